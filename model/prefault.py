"""Committing the engine's preallocated memory (KV cache rows, prefix-cache pool) ahead of use,
in a background thread, so that first-touch page faults never land on a request's prefill.

The KV cache and the prefix pool are allocated empty (model/kv.py), so their pages are faulted
in as positions are first written. On a bare-metal Linux a fault costs well under a microsecond.
On the cloud VMs this project runs on (Firecracker guests with free page reporting: memory the
guest has not touched, or has freed, goes back to the host), a page the guest touches first is
faulted in by the host too: measured here, ~30 µs a 4 KiB page, about 130 MB/s. The agent
turn's follow-up step writes ~0.6k new positions into its row and into the pool (~28 MB at 23 KB
a position for composer-mini's bf16 cache): 80-160 ms of a ~0.7 s time to first token
(bench/agent_turn.py, 2026-12-04).

`Prefaulter` asks the kernel to populate those pages writable (madvise MADV_POPULATE_WRITE,
Linux 5.14+) without writing them: contents are never changed, so it runs while the engine
already reads and writes the same tensors, and needs no lock. It walks the memory in the order
the engine uses it: cache row 0 and the first pool slots first. Elsewhere (another OS, an older
kernel) it does nothing and pages fault in as before. Long-lived engines (model.serve, the
sessions' shared engine) turn it on unless `COMPOSER_PREFAULT=0` (the test suite sets that: its
engines live seconds, and committing ~3 GB would cost more than it saves).

    prefaulter = Prefaulter(cache.row_regions(range(rows)), pool.memory_regions(parts=8)).start()
    prefaulter.ready.wait(); prefaulter.report()
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import itertools
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch

_MADV_POPULATE_WRITE = 23
ENV_VAR = "COMPOSER_PREFAULT"
CHUNK_BYTES = 32 * 2**20
"""Most bytes one madvise call populates (`report` moves on in steps of this)."""


def enabled_by_env() -> bool:
    """Whether long-lived engines should prefault: yes unless COMPOSER_PREFAULT is 0 (or false, no, off)."""
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


@functools.cache
def _madvise():
    """libc's madvise, or None where there is none to call."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        fn = ctypes.CDLL(name, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def populate(tensor: torch.Tensor) -> bool:
    """Faults in the whole pages inside a contiguous CPU tensor's memory, writable, without
    changing a byte. False when the kernel cannot (then nothing happened)."""
    madvise = _madvise()
    if madvise is None or tensor.device.type != "cpu" or not tensor.is_contiguous():
        return False
    page = _page_size()
    start = tensor.data_ptr()
    first = -(-start // page) * page
    last = (start + tensor.numel() * tensor.element_size()) // page * page
    if last <= first:
        return True
    if madvise(first, last - first, _MADV_POPULATE_WRITE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS):  # a kernel before 5.14
        return False
    raise OSError(err, f"madvise(MADV_POPULATE_WRITE) failed: {errno.errorcode.get(err, err)}")


@functools.cache
def _page_size() -> int:
    import mmap

    return mmap.PAGESIZE


class Prefaulter:
    """Populates memory on a daemon thread, walking `walks` in turn (region 0 of each, then
    region 1 of each, ...; a region is a list of contiguous tensors). `ready` is set when all is
    done, or when populating is impossible here (then `supported` is False)."""

    def __init__(self, *walks: Sequence[Sequence[torch.Tensor]]) -> None:
        regions = [r for step in itertools.zip_longest(*walks, fillvalue=[]) for r in step]
        self._chunks = [chunk for region in regions for t in region for chunk in _chunks(t)]
        self.total_bytes = sum(c.numel() * c.element_size() for c in self._chunks)
        self.done_bytes = 0
        self.seconds = 0.0
        self.supported = True
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="composer-prefault", daemon=True)

    def start(self) -> Prefaulter:
        self._thread.start()
        return self

    def _run(self) -> None:
        started = time.perf_counter()
        try:
            for chunk in self._chunks:
                if not populate(chunk):
                    self.supported = False
                    return
                self.done_bytes += chunk.numel() * chunk.element_size()
        finally:
            self.seconds = time.perf_counter() - started
            self._chunks = []
            self.ready.set()

    def report(self) -> dict[str, Any]:
        return {
            "supported": self.supported, "ready": self.ready.is_set(), "total_bytes": self.total_bytes,
            "populated_bytes": self.done_bytes, "seconds": round(self.seconds, 3),
        }


def _chunks(tensor: torch.Tensor) -> list[torch.Tensor]:
    flat = tensor.view(-1)  # contiguous: a view, never a copy
    step = max(1, CHUNK_BYTES // flat.element_size())
    return [flat[i : i + step] for i in range(0, flat.numel(), step)]
