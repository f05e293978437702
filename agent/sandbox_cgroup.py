"""Per-run pids cgroups for agent/sandbox.py: cap one command's process count (the only thing
that contains a fork bomb when the sandbox's user is mapped from root) and find every process it
started, to kill them all when it ends. cgroup v1's `pids` hierarchy, or a delegated v2 subtree.

    base, version = pids_base()              # OSError when no pids cgroup can be made here
    cgroup = PidsCgroup(base, version, max_processes=512)
    ... run the command with its pid in cgroup.path / "cgroup.procs" ...
    await cgroup.remove()                    # kills what is left, then removes the directory

Tests: .venv/bin/python -m pytest tests/agent/test_sandbox.py
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
from pathlib import Path

log = logging.getLogger("agent.sandbox")



def _own_cgroup(controller: str) -> tuple[int, str] | None:
    """(version, path) of this process's cgroup for `controller` from /proc/self/cgroup."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                return 1, path
            if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
                return 2, path
    return None


def pids_base() -> tuple[Path, int]:
    """Where per-run pids cgroups go; raises OSError when they cannot be made."""
    own = _own_cgroup("pids")
    if own is None:
        raise OSError("no pids cgroup controller in /proc/self/cgroup")
    version, path = own
    if version == 1:
        base = Path("/sys/fs/cgroup/pids") / path.lstrip("/") / "composer-sandbox"
        base.mkdir(exist_ok=True)
        return base, 1
    own_dir = Path("/sys/fs/cgroup") / path.lstrip("/")
    if "pids" not in (own_dir / "cgroup.subtree_control").read_text().split():
        raise OSError(f"pids controller not delegated to {own_dir} (cgroup v2)")
    return own_dir, 2


def reap_stale(base: Path, version: int) -> None:
    """Removes empty run cgroups left by dead processes (a crash between create and remove)."""
    for child in base.glob("composer-run-*"):
        pid = child.name.split("-")[2]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                child.rmdir()


class PidsCgroup:
    """One run's pids cgroup: caps its process count and finds every process it started."""

    _counter = itertools.count()

    def __init__(self, base: Path, version: int, max_processes: int) -> None:
        self.version = version
        self.path = base / f"composer-run-{os.getpid()}-{next(self._counter)}"
        self.path.mkdir()
        (self.path / "pids.max").write_text(str(max_processes))

    def pids(self) -> list[int]:
        with contextlib.suppress(OSError):
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        return []

    def kill_all(self) -> None:
        if self.version == 2 and (self.path / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                (self.path / "cgroup.kill").write_text("1")
            return
        # v1 has no cgroup.kill: sweep until empty. pids.max bounds what can be forked meanwhile.
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    async def remove(self) -> None:
        for _ in range(100):
            self.kill_all()
            try:
                self.path.rmdir()
                return
            except OSError:  # EBUSY while killed processes are still being torn down
                await asyncio.sleep(0.01)
        log.warning("sandbox cgroup %s still busy; it is removed on a later start", self.path)
