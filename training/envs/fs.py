"""An environment's filesystem: a copy-on-write view of a base directory, made by the first level
that works here (kernel overlayfs, fuse-overlayfs, a plain copy), and the mount bookkeeping that
tears it down and finds what a crashed process left mounted.

    layer = make_layer(env_dir, lower=base.path, level=None, disk_bytes=2 * GIB)  # blocking
    layer.root      # the merged view (overlay) or the copy
    layer.upper     # the overlay's upper dir (edits, whiteouts); None for a copy
    layer.destroy() # unmounts everything under env_dir and deletes it
    probe_levels()  # FsSupport(available=("overlay", "copy"), notes=(...))

Layout of env_dir: `rw/` (a tmpfs of `disk_bytes` when the overlay can be mounted: upper and work
dirs live there, so edits and anything the sandbox writes count against a real quota), `merged/`
(the overlay mount point) or `tree/` (the copy). Mount calls go straight to libc (mount(2),
umount2(2)) rather than through mount(8): ~0.1 ms against ~3 ms a process.

Overlay options: redirect_dir=off (a directory renamed in the merged view is copied, so the upper
dir alone says what changed), index=off, metacopy=off (no metadata-only copy-ups to decode),
xino=off.

Tests: .venv/bin/python -m pytest tests/training/test_envs.py -k layer
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from training.envs.exceptions import MountError

log = logging.getLogger(__name__)

FsLevel = Literal["overlay", "fuse-overlayfs", "copy"]
FS_LEVELS: tuple[FsLevel, ...] = ("overlay", "fuse-overlayfs", "copy")

MS_NOSUID, MS_NODEV, MS_BIND, MS_PRIVATE = 0x2, 0x4, 0x1000, 0x40000
MNT_DETACH = 0x2
OVERLAY_OPTIONS = "redirect_dir=off,index=off,metacopy=off,xino=off"
_UNSAFE_IN_OPTIONS = (",", ":", "\\", "=")
"""Characters mount option strings cannot carry unescaped (overlay splits on them)."""

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


# ---- mount(2) ---------------------------------------------------------------------------------


def mount(source: str, target: Path, fstype: str, options: str, flags: int = MS_NOSUID | MS_NODEV) -> None:
    if _libc.mount(source.encode(), os.fsencode(target), fstype.encode(), flags, options.encode()) != 0:
        err = ctypes.get_errno()
        raise MountError(f"mount -t {fstype} {source} {target} -o {options}: {os.strerror(err)}")


def make_private(path: Path) -> bool:
    """Makes `path` a private mount (binding it onto itself first when it is not a mount point);
    False when this process may not mount. Why: bubblewrap turns its copy of the mount tree into
    slaves of the host's mounts; below a shared host mount (systemd's default) every unmount of an
    environment would then propagate into the copies of every sandbox starting meanwhile, which
    fail remounting them ("Can't bind mount /oldroot/ on /newroot/"). Mounts below a private
    mount do not propagate. (Unbindable would also hide them from bubblewrap's recursive bind,
    but bubblewrap's make-rslave clears that flag, and overlayfs refuses lower and upper dirs on
    an unbindable mount.)"""
    target = os.fsencode(path)
    if _libc.mount(None, target, None, MS_PRIVATE, None) == 0:
        return True
    if ctypes.get_errno() != errno.EINVAL:  # EINVAL: not a mount point yet
        return False
    if _libc.mount(target, target, None, MS_BIND, None) != 0:
        return False
    return _libc.mount(None, target, None, MS_PRIVATE, None) == 0


def umount(target: str | Path, *, detach: bool = False) -> int:
    """0 on success, else the errno (EINVAL: not a mount point, EBUSY: in use)."""
    if _libc.umount2(os.fsencode(target), MNT_DETACH if detach else 0) != 0:
        return ctypes.get_errno()
    return 0


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mounts_under(prefix: str | Path) -> list[str]:
    """Mount points at or below `prefix` in this process's mount namespace, deepest first."""
    prefix = os.path.realpath(prefix)
    found = []
    with open("/proc/self/mountinfo") as info:
        for line in info:
            point = _unescape(line.split(" ", 5)[4])
            if point == prefix or point.startswith(prefix.rstrip("/") + "/"):
                found.append(point)
    return sorted(set(found), key=lambda p: (-p.count("/"), p))


def unmount_all(prefix: str | Path, *, attempts: int = 50) -> list[str]:
    """Unmounts everything at or below `prefix`, deepest first, retrying while busy (the sandbox's
    namespaces may still be dying); a mount still busy after that is detached lazily. Returns the
    mount points it unmounted."""
    done: list[str] = []
    for _ in range(attempts):
        points = mounts_under(prefix)
        if not points:
            return done
        busy = False
        for point in points:
            err = umount(point)
            if err == 0:
                done.append(point)
            elif err == errno.EBUSY:
                busy = True
        if busy:
            time.sleep(0.02)
    for point in mounts_under(prefix):
        log.warning("envs: %s stayed busy; detaching it lazily", point)
        if umount(point, detach=True) == 0:
            done.append(point)
    return done


# ---- layers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FsSupport:
    available: tuple[FsLevel, ...]
    notes: tuple[str, ...]
    """Why the levels missing from `available` do not work here."""


@dataclass
class Layer:
    level: FsLevel
    env_dir: Path
    lower: Path
    root: Path
    """Where the environment's files are: the merged view, or the copy."""
    upper: Path | None
    """The overlay's upper dir (what changed); None for a copy."""
    quota: bool
    """The writable part sits on a size-capped tmpfs."""

    def unmount(self) -> None:
        """Unmounts everything under env_dir and deletes a copy's tree, leaving env_dir and the
        empty mount point dirs (registry.retire deletes them after a grace period: see there)."""
        if self.level == "fuse-overlayfs" and self.root.is_dir():
            _fuse_unmount(self.root)
        unmount_all(self.env_dir)
        if self.level == "copy":
            remove_tree(self.root)

    def destroy(self) -> None:
        """Unmounts and deletes everything under env_dir at once. Safe to call twice."""
        self.unmount()
        remove_tree(self.env_dir)


def remove_tree(path: Path) -> None:
    """rm -rf that refuses to descend into a mount (a leftover mount is unmounted first)."""
    if mounts_under(path):
        unmount_all(path)
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():  # read-only dirs left by a command (chmod -w): make writable and retry
        for folder, dirs, _ in os.walk(path):
            for name in dirs:
                with contextlib.suppress(OSError):
                    os.chmod(os.path.join(folder, name), 0o700)
        with contextlib.suppress(OSError):
            os.chmod(path, 0o700)
        shutil.rmtree(path, ignore_errors=True)


def _check_option_path(path: Path) -> str:
    text = str(path)
    if any(c in text for c in _UNSAFE_IN_OPTIONS):
        raise MountError(f"{text} holds one of {_UNSAFE_IN_OPTIONS}, which overlay options cannot "
                         "carry; use a base and state dir without them")
    return text


def _match_root(upper: Path, lower: Path) -> None:
    """The merged root takes its mode and owner from the upper root: copy the lower root's."""
    st = lower.stat()
    os.chown(upper, st.st_uid, st.st_gid)
    os.chmod(upper, st.st_mode & 0o7777)


def _make_rw(env_dir: Path, disk_bytes: int | None, *, quota_optional: bool = False
             ) -> tuple[Path, Path, bool]:
    rw = env_dir / "rw"
    rw.mkdir()
    quota = False
    if disk_bytes:
        try:
            mount("tmpfs", rw, "tmpfs", f"size={disk_bytes},mode=0700")
            quota = True
        except MountError:
            if not quota_optional:
                raise
    (rw / "upper").mkdir()
    (rw / "work").mkdir()
    return rw / "upper", rw / "work", quota


def _overlay(env_dir: Path, lower: Path, disk_bytes: int | None) -> Layer:
    lowers = _check_option_path(lower)
    upper, work, quota = _make_rw(env_dir, disk_bytes)
    _match_root(upper, lower)
    merged = env_dir / "merged"
    merged.mkdir()
    mount("overlay", merged, "overlay",
          f"lowerdir={lowers},upperdir={_check_option_path(upper)},workdir={_check_option_path(work)},"
          f"{OVERLAY_OPTIONS}")
    return Layer("overlay", env_dir, lower, merged, upper, quota)


def _fuse_overlay(env_dir: Path, lower: Path, disk_bytes: int | None) -> Layer:
    binary = shutil.which("fuse-overlayfs")
    if binary is None or not os.path.exists("/dev/fuse"):
        raise MountError("fuse-overlayfs: the binary or /dev/fuse is missing")
    upper, work, quota = _make_rw(env_dir, disk_bytes, quota_optional=True)  # tmpfs if we may
    _match_root(upper, lower)
    merged = env_dir / "merged"
    merged.mkdir()
    opts = f"lowerdir={_check_option_path(lower)},upperdir={upper},workdir={work}"
    done = subprocess.run([binary, "-o", opts, str(merged)], capture_output=True, timeout=30)
    if done.returncode != 0:
        raise MountError(f"fuse-overlayfs: {done.stderr.decode(errors='replace').strip()[:300]}")
    return Layer("fuse-overlayfs", env_dir, lower, merged, upper, quota)


def _fuse_unmount(point: Path) -> None:
    for tool in ("fusermount3", "fusermount"):
        if shutil.which(tool) and subprocess.run([tool, "-u", str(point)],
                                                 capture_output=True).returncode == 0:
            return


def _copy(env_dir: Path, lower: Path, disk_bytes: int | None) -> Layer:
    tree = env_dir / "tree"
    done = subprocess.run(["cp", "-a", "--reflink=auto", f"{lower}/.", str(tree)],
                          capture_output=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise MountError(f"cp -a {lower} {tree}: {done.stderr.decode(errors='replace').strip()[:300]}")
    return Layer("copy", env_dir, lower, tree, None, False)


_MAKERS = {"overlay": _overlay, "fuse-overlayfs": _fuse_overlay, "copy": _copy}


def make_layer(env_dir: Path, lower: Path, level: FsLevel | None = None,
               disk_bytes: int | None = None, probe_dir: Path | None = None) -> Layer:
    """Creates the view of `lower` in the (new, empty) `env_dir`: at `level`, or at the first level
    `probe_levels()` found working. Blocking (a copy takes seconds): call it in a thread."""
    if level is not None and level not in FS_LEVELS:
        raise ValueError(f"filesystem level {level!r} is not one of {FS_LEVELS}")
    levels = [level] if level is not None else list(probe_levels(probe_dir).available)
    problems = []
    for candidate in levels:
        try:
            return _MAKERS[candidate](env_dir, lower, disk_bytes)
        except (MountError, OSError) as err:
            problems.append(f"{candidate}: {err}")
            unmount_all(env_dir)
            for child in list(env_dir.iterdir()):
                remove_tree(child)
    raise MountError(f"no filesystem level worked for {env_dir}: {'; '.join(problems)}")


_support: FsSupport | None = None
_probe_lock = threading.Lock()


def probe_levels(work_dir: Path | None = None, refresh: bool = False) -> FsSupport:
    """Which filesystem levels work here, tried once on a tiny lower dir in `work_dir` (a
    registered dir, so a crash mid-probe is reaped like an environment) or a temp dir."""
    global _support
    if _support is not None and not refresh:
        return _support
    with _probe_lock:
        if _support is None or refresh:
            _support = _probe(work_dir)
            if "overlay" not in _support.available:
                log.warning("envs: no kernel overlay here (%s); environments use %s",
                            "; ".join(_support.notes), _support.available[0])
    return _support


def _probe(work_dir: Path | None) -> FsSupport:
    available: list[FsLevel] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="composer-fsprobe-", dir=work_dir) as tmp:
        lower = Path(tmp) / "lower"
        lower.mkdir()
        (lower / "probe").write_text("probe\n")
        for n, level in enumerate(FS_LEVELS):
            env_dir = Path(tmp) / f"env{n}"
            env_dir.mkdir()
            try:
                layer = _MAKERS[level](env_dir, lower, 1024**2)
                ok = (layer.root / "probe").read_text() == "probe\n"
                layer.destroy()
                if ok:
                    available.append(level)
            except (MountError, OSError) as err:
                notes.append(f"{level}: {err}")
            finally:
                unmount_all(env_dir)
    return FsSupport(tuple(available), tuple(notes))
