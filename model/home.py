"""Where Composer keeps its files, and composer-mini built there on first use.

    from model.home import ensure_default_model
    path = ensure_default_model()     # ~/.cache/composer/models/composer-mini, built once
    python -m model.home              # builds it if needed and prints the path
    python -m model.home install-trained runs/cpu/final   # the model editors get by default

composer-mini is the untrained base: training starts from it and the benchmark's `composer-mini`
is always it. A checkpoint trained in the harness (`make model-trained`) is installed beside it
as composer-mini-trained, and the editor-facing commands (composer-lsp, composer-agent) serve
that one when it is there (`served_model`).

`$COMPOSER_HOME` replaces `~/.cache/composer`. Building takes tens of seconds and writes about
2.9 GB (fp32). It happens under a file lock, so two processes never both build, and into a
temporary directory beside the target that is renamed into place at the end, so a directory at
the target is always complete.
"""

from __future__ import annotations

import contextlib
import fcntl
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


def composer_home() -> Path:
    """`$COMPOSER_HOME`, else `~/.cache/composer`."""
    return Path(os.environ.get("COMPOSER_HOME") or "~/.cache/composer").expanduser()


def default_model_dir() -> Path:
    return composer_home() / "models" / DEFAULT_MODEL


def trained_model_dir() -> Path:
    return composer_home() / "models" / TRAINED_MODEL


def served_model(model: str | None, endpoint: str | None) -> str | None:
    """The model an editor-facing command serves: `model` when given (with an endpoint, None
    lets the server pick); else composer-mini-trained when installed; else None, which means
    composer-mini itself (built on first use)."""
    if model or endpoint:
        return model
    trained = trained_model_dir()
    return str(trained) if is_complete_checkpoint(trained) else None


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

    return build_atomically(trained_model_dir(), build, force=True)


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


def build_atomically(target: str | Path, build: Callable[[Path], object], *, force: bool = False) -> Path:
    """Runs `build(tmp_dir)` and renames the result to `target`, under the lock.

    Skips the build when `target` is already a complete checkpoint (unless `force`); a failed build
    leaves nothing behind. An incomplete directory at `target` is replaced.
    """
    target = Path(target).expanduser().absolute()
    with file_lock(target):
        if not force and is_complete_checkpoint(target):
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


def refresh_chat_template(directory: Path) -> None:
    """Rewrites composer-mini's chat template (`chat_template.jinja` and tokenizer_config.json's
    copy, each atomically, under the build lock) when the one in model/ differs: the template is
    part of composer-mini as this code renders prompts, and vLLM reads it from the directory."""
    from model.tokenizer import CHAT_TEMPLATE_PATH

    current = CHAT_TEMPLATE_PATH.read_text()
    template_file = directory / "chat_template.jinja"
    if template_file.is_file() and template_file.read_text() == current:
        return
    with file_lock(directory):
        config_file = directory / "tokenizer_config.json"
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
