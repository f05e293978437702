"""Freed memory goes back to the OS in training processes.

glibc's malloc raises its mmap threshold each time a mapped block is freed (up to 32 MB), so
afterwards blocks below it come from the heap and stay resident once freed. A training process
allocates and frees GBs of such blocks per update (the merged weights of a sync, a rollout
engine's int4 copies, activations), and its resident memory grew by GBs an update (8.8 -> 13.6
GB over three warm-start updates of the cpu preset, 18.9 GB at the final export) and was never
given back: the first asynchronous run was killed at 24 GB.

`release_freed_memory()` (glibc's `malloc_trim(0)`) hands the free pages of every arena back
once, after each update and its sync, and the next update faults them in again. Fixing the
threshold at 1 MB instead (`mallopt(M_MMAP_THRESHOLD)`) also kept memory flat, but mapped and
faulted every temporary of a megabyte or more afresh: updates 77-84 -> 99-105 s.

    release_freed_memory()   # False where libc is not glibc (musl, macOS): nothing to do

Tests: .venv/bin/python -m pytest tests/training/test_memory.py
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_freed_memory() -> bool:
    """Returns the free pages of malloc's heaps to the OS; whether the C library has the call."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
