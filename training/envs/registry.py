"""Where environments register, and the reaper that cleans up after processes that died.

Every environment (and every grading view, filesystem probe and base build) lives in a directory
whose NAME holds its owner: `<kind>-<pid>.<start time>-<n>`, the start time being the owner's in
clock ticks from /proc/<pid>/stat. The directory exists before anything is mounted in it, so a
crash at any point leaves a name that says whose it was, and a recycled pid never passes for the
owner (its start time differs).

    registry = Registry(state_dir)
    env_dir = registry.new_dir("env")      # /tmp/composer-envs/envs/env-4242.88123-7
    report = reap(state_dir, base_dir)     # ReapReport(dirs=[...], mounts=[...], cgroups=[...])

`reap` (Scheduler.start() calls it) removes, for each owner that is gone: the mounts under its
directories (overlays, tmpfs, fuse), the directories, agent/sandbox.py's per-run pids cgroups
(`composer-run-<pid>-<n>`, killing anything still in them) and half-built bases (no `ready`
marker and nobody holding the build lock). Live owners' state is never touched, so several
schedulers can share one state dir.

Tests: .venv/bin/python -m pytest tests/training/test_envs.py -k reap
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from agent.sandbox import sandbox_support
from training.envs.fs import make_private, mounts_under, remove_tree, umount, unmount_all

log = logging.getLogger(__name__)

STATE_DIR_ENV = "COMPOSER_ENVS_DIR"
BASE_DIR_ENV = "COMPOSER_BASES_DIR"
READY = "ready"
"""Marker file of a finished base (written last, atomically)."""
LOCK = ".lock"
_MOUNT_LOCK = threading.Lock()
"""Orders this process's `new_dir` against `release`: a directory is made (and `envs` made a
private mount) and the idle `envs` mount is removed, never both at once."""
RETIRE_GRACE_S = 2.0
_retired: dict[Path, float] = {}
"""Unmounted environment dirs waiting to be deleted, with when they were retired."""
_in_use: dict[Path, int] = {}
"""Per `envs` dir, this process's directories handed out and not yet retired."""


def default_state_dir() -> Path:
    """$COMPOSER_ENVS_DIR or /tmp/composer-envs: under /tmp, which sandboxes see as an empty
    tmpfs, so no environment can look into another's view."""
    return Path(os.environ.get(STATE_DIR_ENV) or "/tmp/composer-envs")


def default_base_dir() -> Path:
    """$COMPOSER_BASES_DIR or /var/tmp/composer-bases: visible (read-only) inside sandboxes, so
    absolute paths that setup wrote into a base (venv shebangs) resolve in every environment."""
    return Path(os.environ.get(BASE_DIR_ENV) or "/var/tmp/composer-bases")


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


_owner: tuple[int, str] | None = None


def owner_tag() -> str:
    """`<pid>.<start time>` of this process (recomputed after a fork)."""
    global _owner
    pid = os.getpid()
    if _owner is None or _owner[0] != pid:
        _owner = (pid, f"{pid}.{start_time(pid)}")
    return _owner[1]


def owner_alive(tag: str) -> bool:
    pid, _, started = tag.partition(".")
    if not pid.isdigit():
        return False
    return str(start_time(int(pid))) == started


def owner_of(name: str) -> str | None:
    """The owner tag in a registered directory's name; None when the name is not one of ours."""
    parts = name.split("-")
    return parts[1] if len(parts) >= 3 and "." in parts[1] else None


class Registry:
    """Hands out owner-named directories under `state_dir/envs`."""

    _counter = itertools.count()

    def __init__(self, state_dir: Path | None = None) -> None:
        self.state_dir = Path(state_dir or default_state_dir()).resolve()
        self.envs = self.state_dir / "envs"
        self.envs.mkdir(parents=True, exist_ok=True, mode=0o700)

    def new_dir(self, kind: str) -> Path:
        """A new owner-named directory, inside `envs` made a private mount when we may mount
        (fs.make_private: unmounts there never propagate into sandboxes' copies)."""
        if "-" in kind:
            raise ValueError(f"kind {kind!r} must not contain '-'")
        path = self.envs / f"{kind}-{owner_tag()}-{next(self._counter)}"
        self._sweep(force=False)
        with _MOUNT_LOCK:
            path.mkdir(mode=0o700)
            make_private(self.envs)
            _in_use[self.envs] = _in_use.get(self.envs, 0) + 1
        return path

    def retire(self, path: Path) -> None:
        """Deletes an unmounted directory, after RETIRE_GRACE_S while other environments of this
        process are open. Why wait: a sandbox starting meanwhile holds a private copy of every
        mount in its new namespace while bubblewrap remounts them read-only one by one; deleting
        a mount point detaches the copies on it, and bubblewrap then fails ("remount ...: No such
        file or directory", ~2% of starts with 16 environments churning; 0 in 600 with the
        grace). With nothing of ours open, no sandbox of ours can be starting."""
        with _MOUNT_LOCK:
            _retired[path] = time.monotonic()
            _in_use[self.envs] = max(0, _in_use.get(self.envs, 0) - 1)
            idle = _in_use[self.envs] == 0
        self._sweep(force=idle)
        if idle:
            self.release()

    def _sweep(self, force: bool) -> None:
        now = time.monotonic()
        with _MOUNT_LOCK:
            due = [p for p, when in _retired.items() if force or now - when > RETIRE_GRACE_S]
            for path in due:
                del _retired[path]
        for path in due:
            remove_tree(path)

    def release(self) -> None:
        """Unmounts the `envs` self-bind once no directory is left in it (any owner's)."""
        with _MOUNT_LOCK:
            if not any(self.envs.iterdir()):
                umount(self.envs)  # EBUSY/EINVAL when in use or not mounted: fine either way

    def live_dirs(self) -> list[Path]:
        """This process's registered directories (what it has not torn down yet)."""
        tag = owner_tag()
        return sorted(p for p in self.envs.iterdir() if owner_of(p.name) == tag)


@dataclass
class ReapReport:
    dirs: list[str] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    processes: int = 0
    bases: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.dirs or self.mounts or self.cgroups or self.processes or self.bases)


def _reap_dirs(envs: Path, report: ReapReport) -> None:
    if not envs.is_dir():
        return
    for path in sorted(envs.iterdir()):
        owner = owner_of(path.name)
        if owner is None or owner_alive(owner):
            continue
        report.mounts += unmount_all(path)
        remove_tree(path)
        report.dirs.append(str(path))


def _cgroup_pids(path: Path) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    return []


def _reap_cgroups(report: ReapReport) -> None:
    """agent/sandbox.py's run cgroups (`composer-run-<pid>-<n>`) whose creator is gone: kill what
    is left in them, then remove them."""
    base = sandbox_support().pids_cgroup
    if base is None:
        return
    for path in base.glob("composer-run-*"):
        pid = path.name.split("-")[2]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        for _ in range(100):
            pids = _cgroup_pids(path)
            for victim in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGKILL)
            report.processes += len(pids)
            try:
                path.rmdir()
                report.cgroups.append(str(path))
                break
            except OSError:
                time.sleep(0.01)


def _reap_bases(base_dir: Path, report: ReapReport) -> None:
    """Bases with no `ready` marker whose build lock is free: a builder died mid-setup."""
    if not base_dir.is_dir():
        return
    for path in sorted(base_dir.iterdir()):
        if not path.is_dir() or (path / READY).exists():
            continue
        with open(path / LOCK, "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # being built right now
            if (path / READY).exists():
                continue
            report.mounts += unmount_all(path)
            remove_tree(path)
            report.bases.append(str(path))


def reap(state_dir: Path | None = None, base_dir: Path | None = None) -> ReapReport:
    """Cleans up what dead owners left (see the module docstring). Blocking; idempotent."""
    report = ReapReport()
    state = Path(state_dir or default_state_dir())
    _reap_dirs(state / "envs", report)
    _reap_cgroups(report)
    if base_dir is not None:
        _reap_bases(Path(base_dir), report)
    if (state / "envs").is_dir():
        Registry(state).release()
    if report:
        log.info("envs: reaped %d dirs, %d mounts, %d cgroups, %d processes, %d bases",
                 len(report.dirs), len(report.mounts), len(report.cgroups), report.processes,
                 len(report.bases))
    return report


def leftovers(state_dir: Path) -> list[str]:
    """Mounts and directories still under `state_dir/envs` (tests and health checks)."""
    envs = Path(state_dir) / "envs"
    found = mounts_under(envs) if envs.exists() else []
    return found + ([str(p) for p in envs.iterdir()] if envs.is_dir() else [])
