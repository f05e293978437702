"""The lock every user of one checkpoint store shares, across processes and threads: records,
restores and diffs hold it shared, so they run side by side; a prune holds it alone, so it never
deletes an object that a checkpoint being recorded has written or counted on but not yet published.

    lock = StoreLock(store_dir / "lock")
    with lock.shared():
        ...                                  # write objects, publish a ref
    with lock.exclusive(wait=False) as held:
        if held:
            ...                              # delete what no checkpoint uses

It is flock(2) on a file in the store, taken on a descriptor of its own each time, so two stores
opened on one workspace in one process (two sessions of a server) exclude each other like two
processes do (an editor's server and `composer-agent checkpoints --keep N`). The kernel drops it
when its holder dies, so a killed process never leaves the store locked. Within a process, every
instance on one store also shares a thread lock (`process_lock`). A store this process
cannot write (a read-only copy another workspace's replay restores from) is read without it.
On NFS, flock becomes a POSIX record lock, which does not exclude two stores of one process.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

_PROCESS_LOCKS: dict[Path, threading.RLock] = {}
_PROCESS_LOCKS_GUARD = threading.Lock()


def process_lock(store_dir: Path) -> threading.RLock:
    """One lock per store in this process, whichever instance opened it (two sessions of a server
    on one workspace): their records and restores take turns, so a session's first checkpoint and
    another's write never interleave."""
    with _PROCESS_LOCKS_GUARD:
        return _PROCESS_LOCKS.setdefault(store_dir, threading.RLock())


class StoreLock:
    def __init__(self, path: Path) -> None:
        self.path = path

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Waits while a prune runs, then holds the lock beside other shared holders."""
        try:
            fd = self._open()
        except OSError as err:
            if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            yield  # the lock file cannot be made here, so neither can this process prune the store
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    @contextlib.contextmanager
    def exclusive(self, wait: bool = True) -> Iterator[bool]:
        """Holds the lock alone and yields True; with `wait=False`, yields False at once when
        anyone else holds it (a caller in this thread holding it shared included)."""
        fd = self._open()
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def _open(self) -> int:
        return os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)  # not a link
