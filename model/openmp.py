"""Releasing a thread's OpenMP workers, so that the engine's worker thread gets full-speed ones.

torch's CPU ops run their parallel loops on OpenMP, and GNU OpenMP gives every thread that starts
a parallel region its own team of workers. Between regions the workers spin for a while and then
sleep, but only while the process's OpenMP threads fit on the CPUs: once the teams together
outnumber them (the main thread's team from loading the model plus the engine worker's team, on a
2-core machine), every worker sleeps at once and each parallel region pays a futex wake-up.
Decoding runs ~200 such regions a token (the int4 matmuls): measured on composer-mini int4, the
same C++ decode step takes 6.4 ms a token on the main thread and 14-15 ms on a second thread,
and 6.9 ms there once the main thread's team is released.

`release_openmp_threads()` frees the calling thread's team (OpenMP 5's omp_pause_resource_all);
the next parallel region on that thread makes a new one, so it is always safe. The engine calls
it on the threads that hand it requests and on its worker when it goes idle. A no-op where torch
does not use a GNU or LLVM/Intel OpenMP runtime that can be found.

    from model.openmp import release_openmp_threads
    release_openmp_threads()
"""

from __future__ import annotations

import ctypes
import functools
import os

_PAUSE_SOFT = 1  # omp_pause_soft


@functools.cache
def _runtime():
    """The OpenMP runtime torch loaded (found in /proc/self/maps), or None."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/lib" in line}
    except OSError:
        return None
    for path in sorted(paths):
        if os.path.basename(path).startswith(("libgomp", "libiomp", "libomp")):
            try:
                lib = ctypes.CDLL(path)  # already loaded: the same handle, nothing is re-initialised
                pause = lib.omp_pause_resource_all
            except (OSError, AttributeError):
                continue
            pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
            return pause
    return None


def release_openmp_threads() -> bool:
    """Frees the calling thread's OpenMP worker team; True when a runtime was there to ask."""
    pause = _runtime()
    if pause is None:
        return False
    pause(_PAUSE_SOFT)  # fails harmlessly (nonzero) inside a parallel region
    return True
