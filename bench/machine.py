"""The machine a benchmark ran on, for its results: CPU model and the ISA flags the engine's
kernels depend on (AVX2, AVX-512, AVX512-BF16, AMX), torch and its threads, and the load.

    machine_line()   # "Intel(R) Xeon(R) Processor (avx2 avx512f avx512_bf16 amx_bf16 amx_int8), 2 CPUs, ..."
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8")


def cpu_model_and_flags() -> tuple[str, list[str]]:
    """From /proc/cpuinfo (what lscpu shows as "Model name" and "Flags")."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    return model, [f for f in FLAGS if f in flags]


def load_average() -> float:
    return round(os.getloadavg()[0], 1)


def machine_line() -> str:
    import torch

    model, flags = cpu_model_and_flags()
    capability = torch.backends.cpu.get_cpu_capability()
    return (f"{model} ({' '.join(flags) or 'no AVX2'}; torch {torch.__version__} dispatches {capability}), "
            f"{os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads")


def run_line(results: dict) -> str:
    """The line "MACHINE; load average (1 min) START -> END; DATE" of a run whose results hold
    machine_line() as "machine" and load_average() at its start and end as "load_start" and
    "load_end"."""
    return (f"{results['machine']}; load average (1 min) {results['load_start']} -> {results['load_end']}; "
            f"{time.strftime('%Y-%m-%d')}")
