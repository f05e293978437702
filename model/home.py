"""Where Composer keeps its files, and composer-mini and composer-mini-trained built there.

    from model.home import ensure_default_model, ensure_trained_model
    path = ensure_default_model()     # ~/.cache/composer/models/composer-mini, built once
    path = ensure_trained_model()     # composer-mini-trained: the model editors get (`make run`)
    python -m model.home              # builds both if needed and prints their paths
    python -m model.home install-trained runs/cpu/final   # your own training run instead

composer-mini is the untrained base: training starts from it and the benchmark's `composer-mini`
is always it. composer-mini-trained is what the editor-facing commands (composer-lsp,
composer-agent) serve (`served_model`): `make run`, or their first load of it, builds it once from
composer-mini and the LoRA adapter this repository commits (model/trained/composer-mini-rl:
the warm start plus 13 RL updates, `w11rl` in docs/benchmarks.md, its factors int8), and a
checkpoint you train (`make model-trained`) is installed in its place.

`$COMPOSER_HOME` replaces `~/.cache/composer`. Building each takes seconds to tens of seconds
and writes about 2.9 GB (fp32). It happens under a file lock, so two processes never both build,
and into a temporary directory beside the target that is renamed into place at the end, so a
directory at the target is always complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

DEFAULT_MODEL = "composer-mini"
TRAINED_MODEL = "composer-mini-trained"
TRAINED_ADAPTER = Path(__file__).parent / "trained" / "composer-mini-rl"
BUILT_FROM = "built-from-adapter.sha256"


def composer_home() -> Path:
    """`$COMPOSER_HOME`, else `~/.cache/composer`."""
    return Path(os.environ.get("COMPOSER_HOME") or "~/.cache/composer").expanduser()


def default_model_dir() -> Path:
    return composer_home() / "models" / DEFAULT_MODEL


def trained_model_dir() -> Path:
    return composer_home() / "models" / TRAINED_MODEL


def served_model(model: str | None, endpoint: str | None) -> str | None:
    """The model an editor-facing command serves: `model` when given (with an endpoint, None
    lets the server pick); else composer-mini-trained's directory, which the engine builds or
    brings up to date when it first loads it (`checkpoint_dir`), so an editor that starts
    composer-lsp itself gets the model `make run` serves."""
    if model or endpoint:
        return model
    return str(trained_model_dir())


def checkpoint_dir(path: str | Path | None) -> Path:
    """The directory an engine loads for `path`: composer-mini when None; composer-mini-trained's
    directory built from the committed adapter, or rebuilt after a pull changed it
    (`ensure_trained_model`), when `path` is that directory; else `path` itself."""
    if path is None:
        return ensure_default_model()
    path = Path(path).expanduser()
    if path.absolute() == trained_model_dir().absolute():
        return ensure_trained_model()
    return path


def install_trained(checkpoint: str | Path) -> Path:
    """Installs a trained checkpoint directory (a run's `final/`: weights, tokenizer, `adapter/`)
    as composer-mini-trained, atomically. Files are hard-linked where they can be (a run's
    export is rewritten by renames, so the link keeps this version), else copied."""
    source = Path(checkpoint).expanduser().absolute()
    if not is_complete_checkpoint(source):
        raise ValueError(f"{source} is not a complete checkpoint (config.json, *.safetensors, tokenizer.json)")

    def build(directory: Path) -> None:
        for path in sorted(source.rglob("*")):
            target = directory / path.relative_to(source)
            if path.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            try:
                os.link(path, target)
            except OSError:  # another file system
                shutil.copy2(path, target)

    target = build_atomically(trained_model_dir(), build, force=True)
    refresh_chat_template(target)  # a run's export from before the template changed
    return target


def is_complete_checkpoint(path: str | Path) -> bool:
    """Whether `path` holds config.json, safetensors weights and tokenizer.json."""
    path = Path(path)
    return (
        (path / "config.json").is_file()
        and (path / "tokenizer.json").is_file()
        and any(path.glob("*.safetensors"))
    )


@contextlib.contextmanager
def file_lock(target: Path) -> Iterator[None]:
    """An exclusive fcntl lock on `.<name>.lock` beside `target` (released if the process dies)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_atomically(target: str | Path, build: Callable[[Path], object], *, force: bool = False,
                     current: Callable[[Path], bool] = is_complete_checkpoint) -> Path:
    """Runs `build(tmp_dir)` and renames the result to `target`, under the lock.

    Skips the build when `current(target)` (by default: it is a complete checkpoint) unless
    `force`; a failed build leaves nothing behind. An incomplete directory at `target` is replaced.
    """
    target = Path(target).expanduser().absolute()
    with file_lock(target):
        if not force and current(target):
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        tmp.chmod(0o755)  # mkdtemp's 0o700 would otherwise become the checkpoint's mode
        try:
            build(tmp)
            old = None
            if target.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
                os.rename(target, old / target.name)
            os.rename(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return target


def ensure_default_model() -> Path:
    """composer-mini's directory, built from the bundled SmolLM2 weights the first time; a build
    made before the chat template changed gets the current one (`refresh_chat_template`)."""
    target = default_model_dir()
    if is_complete_checkpoint(target):
        refresh_chat_template(target)
        return target
    from model.convert import write_upcycled

    def build(directory: Path) -> None:
        # Checked again under the lock by build_atomically, so only the builder logs.
        print(f"composer: building {DEFAULT_MODEL} into {target} (once; 10 to 30 s)", file=sys.stderr, flush=True)
        write_upcycled(directory)

    return build_atomically(target, build)


def ensure_trained_model(adapter: str | Path | None = None) -> Path:
    """composer-mini-trained's directory. A checkpoint you installed (`install_trained`) is kept
    (an earlier composer-mini chat template in it brought up to date); otherwise it is built from
    composer-mini and `adapter` (`merge_adapter`), once, and again when the adapter changes (a
    pull that brings a newer one: `BUILT_FROM` says which). `adapter` defaults to the committed
    one, `TRAINED_ADAPTER`."""
    from model.adapter import ADAPTER_FILE

    adapter = TRAINED_ADAPTER if adapter is None else adapter
    digest = hashlib.sha256((Path(adapter) / ADAPTER_FILE).read_bytes()).hexdigest()

    def current(target: Path) -> bool:
        stamp = target / BUILT_FROM
        return is_complete_checkpoint(target) and (not stamp.is_file() or stamp.read_text().strip() == digest)

    target = trained_model_dir()
    if current(target):
        refresh_chat_template(target)
        return target
    base = ensure_default_model()

    def build(directory: Path) -> None:
        print(f"composer: building {TRAINED_MODEL} into {target} (once; about 10 s)", file=sys.stderr, flush=True)
        merge_adapter(base, adapter, directory)
        (directory / BUILT_FROM).write_text(digest + "\n")

    return build_atomically(target, build, current=current)


def merge_adapter(base: str | Path, adapter: str | Path, directory: str | Path) -> Path:
    """Writes into `directory` the checkpoint `base` with `adapter`'s product added to the weights
    it names: the base's other files (config, tokenizer, chat template) as they are, and the
    adapter itself as `adapter/` (which the int4 engine keeps beside its matrices)."""
    import torch

    from model.adapter import ADAPTER_DIR, read_adapter
    from model.hf import load_model, save_model

    low_ranks = read_adapter(adapter)
    if low_ranks is None:
        raise FileNotFoundError(f"{adapter}: no such adapter directory")
    model = load_model(base)
    with torch.no_grad():
        for name, low_rank in low_ranks.items():
            weight = model.get_parameter(name)
            weight.add_(low_rank.delta().to(weight.dtype))
    directory = Path(directory)
    save_model(model, directory)
    for path in Path(base).iterdir():  # after the weights: the base's own config wins
        if path.is_file() and path.suffix != ".safetensors":
            shutil.copy2(path, directory / path.name)
    shutil.copytree(adapter, directory / ADAPTER_DIR, dirs_exist_ok=True)
    return directory


def refresh_chat_template(directory: Path) -> None:
    """Rewrites composer-mini's chat template (`chat_template.jinja` and tokenizer_config.json's
    copy, each atomically, under the build lock) when the directory holds an earlier version of it
    (model/tokenizer.py EARLIER_TEMPLATES: a build or a trained checkpoint from before it changed;
    any other template is left alone): the template is part of composer-mini as this code renders
    prompts, and vLLM reads it from the directory."""
    from model.tokenizer import CHAT_TEMPLATE_PATH, current_template

    current = CHAT_TEMPLATE_PATH.read_text()
    template_file, config_file = directory / "chat_template.jinja", directory / "tokenizer_config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    held = [template_file.read_text()] if template_file.is_file() else []
    held += [config["chat_template"]] if isinstance(config.get("chat_template"), str) else []
    if not any(t != current and current_template(t) == current for t in held):
        return  # none, up to date, or not composer-mini's
    with file_lock(directory):
        config = json.loads(config_file.read_text()) if config_file.is_file() else {}
        config["chat_template"] = current
        for name, text in (("tokenizer_config.json", json.dumps(config, indent=2, ensure_ascii=True) + "\n"),
                           ("chat_template.jinja", current)):
            tmp = directory / f".{name}.tmp"
            tmp.write_text(text)
            os.replace(tmp, directory / name)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["install-trained"] and len(argv) == 2:
        try:
            print(install_trained(argv[1]))
        except ValueError as err:
            print(f"model.home: {err}", file=sys.stderr)
            return 2
        return 0
    if argv:
        print("usage: python -m model.home [install-trained CHECKPOINT_DIR]", file=sys.stderr)
        return 2
    start = time.perf_counter()
    print(ensure_default_model(), f"({time.perf_counter() - start:.1f} s)")
    print(ensure_trained_model(), f"({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
