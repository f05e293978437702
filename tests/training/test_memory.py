"""training/memory.py: after `release_freed_memory()`, blocks freed from malloc's heap go back to
the OS; without it (glibc raises its mmap threshold after a large block is freed, so later
blocks of a few MB come from the heap) they stay resident. Each case runs in its own interpreter,
so this process keeps its allocator.

Run: .venv/bin/python -m pytest tests/training/test_memory.py
"""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# Frees a 16 MB block (glibc then serves smaller blocks from the heap), then 300 blocks of 2 MB,
# each followed by a small block that stays (the heap cannot shrink past them), and prints how
# much of the 600 MB is still resident after the 2 MB blocks are freed.
SCRIPT = """
import sys, torch
from training.memory import release_freed_memory
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) * 1024
torch.ones(4 * 2**20)  # 16 MB, freed at once
before = rss()
big, small = [], []
for _ in range(300):
    big.append(torch.ones(2**19))
    small.append(torch.ones(16))
del big
if sys.argv[1] == "release":
    assert release_freed_memory()
print((rss() - before) / 2**20)
"""


def resident_after_free(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_freed_blocks_go_back_to_the_os_once_released():
    assert resident_after_free("keep") > 400  # MB of the 600 freed
    assert resident_after_free("release") < 100
