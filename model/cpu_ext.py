"""Builds and loads the engine's C++ extension (model/csrc/): the row-invariant kernels
(kernels.cpp: dense linear layers, attention over the KV cache) and the fused decode step
(fused_decode.cpp), one module.

It compiles on first use (about a minute with g++ and ninja; longer on a busy machine) into
`$COMPOSER_HOME/torch_extensions/<torch, Python, ISA and a hash of the sources>/` and loads from
there afterwards (checkouts with other sources build their own). The
ISA flags follow this CPU (/proc/cpuinfo): AVX-512 where it has AVX512F/BW/VL/DQ, else AVX2 with
FMA, else none (and AVX512-BF16's rounding instruction where the CPU has it); oneDNN picks AMX or
AVX512-BF16 inside brgemm at run time. When it cannot build
(no compiler, an error) `load_extension` raises ExtensionUnavailable with the reason, and the
engine runs without it (model/kernels.py).

    from model.cpu_ext import load_extension
    ext = load_extension()
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import threading
from pathlib import Path

import torch

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = [CSRC / "module.cpp", CSRC / "kernels.cpp", CSRC / "fused_decode.cpp"]

_lock = threading.Lock()
_module = None
_error: str | None = None


class ExtensionUnavailable(RuntimeError):
    """The extension cannot be built or loaded here."""


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def isa() -> tuple[str, list[str]]:
    """(name, compiler flags) for this CPU's widest vector ISA that torch's vector headers know."""
    flags = cpu_flags()
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma"} <= flags:
        avx512 = ["-mavx2", "-mfma", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq",
                  "-DCPU_CAPABILITY_AVX512", "-DCPU_CAPABILITY=AVX512"]
        if "avx512_bf16" in flags:  # one instruction rounds 32 fp32 values to bf16 (kernels.cpp)
            return "avx512bf16", [*avx512, "-mavx512bf16", "-DCOMPOSER_AVX512BF16"]
        return "avx512", avx512
    if {"avx2", "fma"} <= flags:
        return "avx2", ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2", "-DCPU_CAPABILITY=AVX2"]
    return "default", ["-DCPU_CAPABILITY=DEFAULT"]


def compile_flags() -> tuple[list[str], list[str]]:
    """(compiler flags, linker flags). No fused multiply-add where the source does not ask for
    one: elementwise work rounds like the eager ATen ops it stands in for. -fopenmp: ATen's
    parallel_for is a header-inline `#pragma omp parallel`, which without it runs every task on
    the calling thread."""
    return ["-O3", "-ffp-contract=off", "-fopenmp", *isa()[1]], ["-fopenmp"]


def build_directory() -> Path:
    """Per torch, Python, ISA, flags and sources: an extension built for another must not load."""
    from model.home import composer_home

    digest = hashlib.sha256()
    for flags in compile_flags():
        digest.update(" ".join(flags).encode() + b"\0")
    for source in sorted(CSRC.iterdir()):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    tag = (f"torch-{torch.__version__}-py{sys.version_info.major}{sys.version_info.minor}-{isa()[0]}"
           f"-{digest.hexdigest()[:12]}").replace("+", "_")
    return composer_home() / "torch_extensions" / tag / "composer_cpu"


def load_extension():
    """The compiled module (built once per process, and once per machine thanks to the cache
    directory); raises ExtensionUnavailable with the reason when it cannot be had."""
    global _module, _error
    with _lock:
        if _module is None and _error is None:
            _module, _error = _compile()
        if _error is not None:
            raise ExtensionUnavailable(_error)
        return _module


def _compile():
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return None, f"no C++ compiler ({compiler!r} is not on PATH)"
    try:
        from torch.utils import cpp_extension

        if not cpp_extension.is_ninja_available():
            return None, "ninja is not installed (torch.utils.cpp_extension needs it)"
        from model.home import file_lock

        directory = build_directory()
        directory.mkdir(parents=True, exist_ok=True)
        # An fcntl lock (released if the process dies): torch's own lock file, left behind by a
        # build that was killed, would make every later load wait forever.
        with file_lock(directory):
            (directory / "lock").unlink(missing_ok=True)
            if not (directory / "composer_cpu.so").exists():
                print(f"composer: compiling the engine's C++ kernels into {directory} (once; about a minute)",
                      file=sys.stderr, flush=True)
            cflags, ldflags = compile_flags()
            module = cpp_extension.load(
                name="composer_cpu",
                sources=[str(s) for s in SOURCES],
                build_directory=str(directory),
                extra_cflags=cflags,
                extra_ldflags=ldflags,
                verbose=False,
            )
        return module, None
    except Exception as err:  # compiler errors arrive as RuntimeError/OSError/ImportError
        return None, f"building {CSRC.name}/ failed: {str(err).strip()[-2000:]}"
