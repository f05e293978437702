"""Shared fixtures. Append new fixtures below; the checkpoint ones build at most once per session.

Run: .venv/bin/python -m pytest tests/
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

# Sessions (and the servers tests start) build no semantic index unless a test asks for one:
# loading MiniLM in every server process would cost ~15 s of CPU each. Tests of the index set it.
os.environ.setdefault("COMPOSER_INDEX", "off")
# Nor do their engines commit ~3 GB of KV memory ahead of use (model/prefault.py): they live
# seconds, and on these VMs committing it takes ~45 s of CPU. Tests of prefaulting turn it on.
os.environ.setdefault("COMPOSER_PREFAULT", "0")
# Nor do they read or write the user's config ($XDG_CONFIG_HOME/composer: permission rules, kept
# "always" answers, trusted workspaces, the sandbox opt-in): a run starts from an empty one.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="composer-tests-config-")
atexit.register(shutil.rmtree, os.environ["XDG_CONFIG_HOME"], ignore_errors=True)


@dataclass(frozen=True)
class Build:
    path: Path
    stderr: str
    seconds: float


@pytest.fixture(scope="session")
def composer_home_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session-wide COMPOSER_HOME (tests never write to ~/.cache/composer)."""
    return tmp_path_factory.mktemp("composer-home")


@pytest.fixture(scope="session")
def composer_mini_build(composer_home_dir: Path) -> Build:
    """composer-mini (the real 2.9 GB fp32 MoE), built once by `ensure_default_model()` into
    `composer_home_dir`, with what it logged and how long it took."""
    from model.home import ensure_default_model

    err = io.StringIO()
    start = time.perf_counter()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err):
        mp.setenv("COMPOSER_HOME", str(composer_home_dir))
        path = ensure_default_model()
    return Build(path, err.getvalue(), time.perf_counter() - start)


@pytest.fixture(scope="session")
def composer_mini_dir(composer_mini_build: Build) -> Path:
    """composer-mini's checkpoint directory (Mixtral, 8 experts, top-2, fp32), built once."""
    return composer_mini_build.path


@pytest.fixture(scope="session")
def smollm2_dense_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dense SmolLM2-135M-Instruct checkpoint (Llama, tied head, fp32), written once by
    `python -m model.convert dense`."""
    from model.convert import main

    out = tmp_path_factory.mktemp("smollm2") / "dense"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["dense", "--out", str(out)]) == 0
    return out


@pytest.fixture
def one_thread():
    """torch on one thread for the test: tiny models' matmuls are too small to share, and two
    OpenMP threads on a busy machine spin against each other (measured 20x slower)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def real_tokenizer():
    """composer-mini's tokenizer (SmolLM2's byte-level BPE and ChatML template), read from the
    bundled GGUF's metadata: no checkpoint needed."""
    from gguf import GGUFReader

    from model.gguf_import import bundled_gguf_path
    from model.tokenizer import Tokenizer

    return Tokenizer.from_gguf_metadata(GGUFReader(bundled_gguf_path()))
