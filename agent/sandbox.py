"""Run one shell command in a sandbox: bubblewrap when it works here, else `unshare`, else a plain
process group with resource limits. The same call serves an editor session and an RL rollout.
Only bubblewrap counts as the sandbox; at the weaker levels `run_sandboxed` refuses to run unless
its caller or the user's config opts in (agent/isolation.py: `--allow-unsandboxed`,
`allow_unsandboxed = true`), and editors ask about every command.

    result = await run_sandboxed("pytest -x", workspace_root=Path("/repo"), timeout_s=60,
                                 on_output=print, cancelled=ctx.cancelled)
    result.exit_code, result.output, result.timed_out, result.isolation   # "bwrap" here

What the command sees (isolation "bwrap"): the whole system read-only (`--ro-bind / /`), the
workspace read-write at its own path (so paths in output match the editor's) except .git/config,
.git/hooks and .composer (read-only: git runs them on the host later; .composer holds the
permission rules), a fresh /tmp, /run and $HOME (tmpfs), /root, /home and the invoking user's home hidden behind empty tmpfs (no
~/.ssh, ~/.netrc, ~/.aws), /etc/shadow and host keys masked, fresh /dev and /proc, no network
(`--unshare-all`; `network=True` adds `--share-net`), uid 1000 in its own user namespace with no
capabilities and no further user namespaces, and a scrubbed environment (PATH with the venvs'
bin, HOME, LANG, TERM=dumb and the caller's `env`; nothing else is inherited, so *_TOKEN,
AWS_*, OPENAI_* never get in).

Limits: the wall clock (`timeout_s`), the output (`max_output_bytes`: reading stops and the
command is killed), memory (RLIMIT_AS), file size (RLIMIT_FSIZE, so one file cannot fill the
disk), and the number of processes. Process count is the subtle one: RLIMIT_NPROC is ignored for
root, and inside a user namespace mapped from root it still counts as root, so as root only a
pids cgroup contains a fork bomb. A per-run pids cgroup (v1 `pids` hierarchy, or a delegated v2
one) is used whenever it can be created; RLIMIT_NPROC is also set inside the user namespace,
where it counts just the sandbox's processes and does contain a fork bomb for non-root users.

Why `unshare` counts as weaker, not as a second full level: it starts from the host's mount tree
and remounts each mount read-only one by one (`_UNSHARE_SETUP`), ignoring failures
(`remount ... || true`), so any mount whose remount fails stays writable, silently (a mount point
with a space in its name did, until the name /proc/self/mounts escapes as \\040 was decoded); and
the command sees the host's /dev and /sys, where bubblewrap gives a fresh minimal /dev. Its
network namespace is as empty as bubblewrap's.
`none` contains nothing: the command can write anywhere the user can, read their secrets and
use the network. macOS: no Seatbelt (`sandbox-exec`) profile here, since it could not be tested
without a Mac; there is neither bwrap nor unshare, so the level is `none` and it fails closed.

Ending: when the command exits, times out, overflows its output or `cancelled` is set, the
whole tree goes: bwrap runs in its own process group, its pid namespace dies with its init
(which defeats double-fork + setsid escapes), and every process left in the run's cgroup is
killed. Background jobs (`cmd &`) therefore never outlive the command.

Start overhead, `run_sandboxed("true")` p50 of 50 runs on the 2-core dev box, nice 19, as root
with the pids cgroup: bwrap 11 ms, unshare 55 ms, none 5 ms with the box near idle (load ~1);
bwrap 35 ms, unshare 90-130 ms, none 8-12 ms while a benchmark shared it (load ~4). A bare
`bwrap --unshare-all true` takes 8 ms at that load; the pids cgroup adds 4-9 ms.

Tests: .venv/bin/python -m pytest tests/agent/test_sandbox.py tests/agent/test_escape.py
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent.isolation import IsolationStatus, status_for
from agent.sandbox_cgroup import PidsCgroup, pids_base, reap_stale

log = logging.getLogger(__name__)

Isolation = Literal["bwrap", "unshare", "none"]
LEVELS: tuple[Isolation, ...] = ("bwrap", "unshare", "none")

SANDBOX_UID = 1000
SANDBOX_HOME = "/tmp/home"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SECRET_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-")
"""Root-owned files that uid 1000 could read when the sandbox's uid is mapped from root."""
SECRET_DIRS = ("/etc/ssh", "/run", "/root", "/home")
"""Hidden behind an empty tmpfs: host keys, daemon sockets (docker.sock), home directories."""
PROTECTED = (".git/config", ".git/hooks", ".composer")
"""Read-only inside the workspace: git config and hooks run on the host later (core.fsmonitor,
core.pager, a pre-commit hook), and .composer holds the workspace's permission rules."""
GIB = 1024**3
_READ_CHUNK = 65536
_DRAIN_S = 0.5
"""After the command exits, how long output written just before exiting may still arrive."""


@dataclass(frozen=True)
class SandboxResult:
    exit_code: int | None
    """The shell's exit status (128+N when killed by signal N); None when the sandbox killed it
    (timeout, output cap, cancellation)."""
    output: str
    """stdout and stderr interleaved as written, decoded as UTF-8 with replacement."""
    truncated: bool
    """Output reached `max_output_bytes`: reading stopped there and the command was killed."""
    timed_out: bool
    cancelled: bool
    duration_s: float
    isolation: str


@dataclass(frozen=True)
class SandboxSupport:
    """What this machine allows, probed once (`sandbox_support()`)."""

    isolation: Isolation
    """The best level that ran `true` successfully."""
    available: tuple[Isolation, ...]
    pids_cgroup: Path | None
    """The directory per-run pids cgroups are made in; None when none can be made."""
    cgroup_version: int
    notes: tuple[str, ...]
    """Why higher levels or the cgroup are unavailable."""


# ---- command lines -----------------------------------------------------------------------------


def _hidden_dirs() -> list[str]:
    home = str(Path.home())
    dirs = [d for d in SECRET_DIRS if os.path.isdir(d)]
    if os.path.isdir(home) and not any(_under(home, d) for d in dirs) and home != "/":
        dirs.append(home)
    return dirs


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _protected(workspace: Path) -> list[str]:
    return [str(workspace / rel) for rel in PROTECTED if (workspace / rel).exists()
            and not (workspace / rel).is_symlink()]


def _python_dirs(workspace: Path) -> list[str]:
    """This interpreter's venv and base install, and the one the workspace's .venv points at
    (pyenv lives in ~/.pyenv): kept visible when they sit in a hidden directory."""
    found = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    for python in (sys.executable, str(workspace / ".venv" / "bin" / "python")):
        if os.path.exists(python):
            found.add(os.path.dirname(os.path.dirname(os.path.realpath(python))))
    return sorted(p for p in found if os.path.isdir(p) and p != "/")


def _venv_bins(workspace: Path) -> list[str]:
    bins = [str(workspace / ".venv" / "bin")]
    if sys.prefix != sys.base_prefix:
        bins.append(os.path.join(sys.prefix, "bin"))
    return [b for b in dict.fromkeys(bins) if os.path.isdir(b)]


def _environment(workspace: Path, home: str, extra: dict[str, str] | None) -> dict[str, str]:
    env = {
        "PATH": ":".join([*_venv_bins(workspace), SYSTEM_PATH]),
        "HOME": home,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "TMPDIR": "/tmp",
    }
    env.update(extra or {})
    return env


def _inner(command: str, max_processes: int | None) -> list[str]:
    # RLIMIT_NPROC must be set inside the new user namespace: set outside, the kernel would also
    # count every other process of the invoking user against it.
    limit = f'ulimit -u {max_processes} 2>/dev/null; ' if max_processes else ""
    return ["bash", "-c", f'{limit}exec bash -c "$1"', "composer-sandbox", command]


def _bwrap_argv(workspace: Path, command: str, network: bool, max_processes: int | None,
                tmp_bytes: int) -> list[str]:
    argv = [_binary("bwrap"), "--unshare-all", "--unshare-user", "--disable-userns",
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--die-with-parent", "--new-session", "--ro-bind", "/", "/",
            "--dev", "/dev", "--proc", "/proc", "--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    if network:
        argv.append("--share-net")
    for hidden in _hidden_dirs():
        argv += ["--size", str(64 * 1024**2), "--tmpfs", hidden]
    for secret in SECRET_FILES:
        if os.path.exists(secret):
            argv += ["--ro-bind", "/dev/null", secret]
    keep = _python_dirs(workspace)
    if network and os.path.exists("/etc/resolv.conf"):
        keep.append(os.path.realpath("/etc/resolv.conf"))  # often a link into the hidden /run
    for path in keep:
        if any(_under(path, h) for h in [*_hidden_dirs(), "/tmp"]):
            argv += ["--ro-bind", path, path]
    argv += ["--bind", str(workspace), str(workspace)]
    for path in _protected(workspace):
        argv += ["--ro-bind", path, path]
    argv += ["--dir", SANDBOX_HOME,
             "--chdir", str(workspace), "--"]
    return argv + _inner(command, max_processes)


_UNSHARE_SETUP = r"""
set -e
ws=$1; nproc=$2; cmd=$3; shift 3
hidden=(); while [ "$1" != -- ]; do hidden+=("$1"); shift; done; shift
exec {wsfd}<"$ws"
keeps=(); while [ "$1" != -- ]; do keeps+=("$1"); shift; done; shift
keepfds=(); for keep in "${keeps[@]}"; do exec {fd}<"$keep"; keepfds+=("$fd"); done
while read -r _ mnt _; do
  mnt=$(printf '%b' "${mnt//\\/\\0}")  # /proc/self/mounts writes a space as \040
  case "$mnt" in /proc|/proc/*|/sys|/sys/*) ;; *) mount -o remount,bind,ro "$mnt" 2>/dev/null || true ;; esac
done < /proc/self/mounts
mount -t tmpfs -o size=1g tmpfs /tmp
mount -t tmpfs -o size=64m tmpfs /dev/shm 2>/dev/null || true
for h in "${hidden[@]}"; do mount -t tmpfs -o size=64m tmpfs "$h"; done
for secret in /etc/shadow /etc/gshadow; do if [ -e "$secret" ]; then mount --bind /dev/null "$secret"; fi; done
i=0; for keep in "${keeps[@]}"; do mkdir -p "$keep"; mount --no-canonicalize --bind "/proc/self/fd/${keepfds[$i]}" "$keep"; i=$((i+1)); done
mkdir -p "$ws" /tmp/home
mount --no-canonicalize --bind "/proc/self/fd/$wsfd" "$ws"
mount -o remount,bind,rw "$ws"
for p in "$@"; do mount --bind "$p" "$p"; mount -o remount,bind,ro "$p"; done
exec {wsfd}<&-
cd "$ws"
exec unshare --user --map-user=1000 --map-group=1000 -- bash -c \
  'if [ "$1" != 0 ]; then ulimit -u "$1" 2>/dev/null; fi; exec bash -c "$2"' composer-sandbox "$nproc" "$cmd"
"""


def _unshare_argv(workspace: Path, command: str, network: bool, max_processes: int | None) -> list[str]:
    # The setup runs as root of a fresh user namespace, then drops to uid 1000 in a nested one,
    # where the mounts made here are locked: the command cannot unmount them to look beneath.
    argv = [_binary("unshare"), "--user", "--map-root-user", "--mount", "--pid", "--fork", "--kill-child",
            "--mount-proc", "--ipc", "--uts"]
    if not network:
        argv.append("--net")
    hidden = _hidden_dirs()
    keep = [p for p in _python_dirs(workspace) if any(_under(p, h) for h in [*hidden, "/tmp"])]
    return [*argv, "--", "bash", "-c", _UNSHARE_SETUP, "composer-setup", str(workspace),
            str(max_processes or 0), command, *hidden, "--", *keep, "--", *_protected(workspace)]


def _outer(argv: list[str], cgroup: PidsCgroup | None, memory_bytes: int | None,
           max_file_bytes: int | None) -> list[str]:
    """A bash that joins the run's cgroup and sets the rlimits, then execs the sandbox.
    (No preexec_fn: it is unsafe in a process with threads.)"""
    script = ""
    if cgroup is not None:
        script += 'echo $$ > "$1/cgroup.procs" || exit 125; '
    if memory_bytes:
        script += f"ulimit -v {memory_bytes // 1024} || exit 125; "
    if max_file_bytes:
        script += f"ulimit -f {max(1, max_file_bytes // 1024)} || exit 125; "
    script += 'shift; exec "$@"'
    return ["/bin/bash", "-c", script, "composer-limits", str(cgroup.path if cgroup else ""), *argv]


# ---- probing -----------------------------------------------------------------------------------

_support: SandboxSupport | None = None


def _binary(name: str) -> str:
    """`name` as found on the caller's PATH (the probe and the runs use the same binary; the
    sandbox's own PATH would find the system's)."""
    return shutil.which(name) or name


def _probe_level(level: Isolation, workspace: Path) -> str | None:
    """None when `level` runs `true` here; else why not."""
    tool = {"bwrap": "bwrap", "unshare": "unshare", "none": "bash"}[level]
    if shutil.which(tool) is None:
        return f"{level}: `{tool}` is not on PATH"
    argv = _argv(level, workspace, "true", network=False, max_processes=64, tmp_bytes=GIB)
    try:
        done = subprocess.run(argv, capture_output=True, timeout=20, env=_environment(workspace, "/tmp", None),
                              cwd=workspace, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{level}: {err}"
    if done.returncode != 0:
        return f"{level}: exit {done.returncode}: {done.stderr.decode(errors='replace').strip()[:300]}"
    return None


def sandbox_support(refresh: bool = False) -> SandboxSupport:
    """Probes (once) which isolation levels and whether a pids cgroup work on this machine;
    warns once when bubblewrap is not usable."""
    global _support
    if _support is not None and not refresh:
        return _support
    notes: list[str] = []
    available: list[Isolation] = []
    with tempfile.TemporaryDirectory(prefix="composer-probe-") as tmp:
        for level in LEVELS:
            problem = _probe_level(level, Path(tmp))
            if problem is None:
                available.append(level)
            else:
                notes.append(problem)
    base, version = None, 0
    try:
        base, version = pids_base()
        reap_stale(base, version)
        probe = PidsCgroup(base, version, 8)
        probe.path.rmdir()
    except OSError as err:
        base = None
        notes.append(f"pids cgroup: {err}")
    if not available:
        available.append("none")
    _support = SandboxSupport(available[0], tuple(available), base, version, tuple(notes))
    if _support.isolation != "bwrap":
        log.warning("sandbox: bubblewrap is not usable here, only isolation %r (%s); commands are "
                    "asked about in editors and refused elsewhere unless the user opts in",
                    _support.isolation, "; ".join(notes))
    if base is None and os.geteuid() == 0:
        log.warning("sandbox: no pids cgroup (%s); fork bombs are contained only by RLIMIT_NPROC, "
                    "which root ignores", notes[-1])
    return _support


def isolation_status(allow_unsandboxed: bool = False) -> IsolationStatus:
    """This machine's level (probed once) and whether commands may run at it
    (agent/isolation.py): `allow_unsandboxed` is the caller's opt-in, else the user's config."""
    support = sandbox_support()
    notes = tuple(n for n in support.notes if n.split(":")[0] in LEVELS)
    return status_for(support.isolation, notes, allow_unsandboxed)


def startup_isolation(program: str, workspace: Path, allow_unsandboxed: bool) -> IsolationStatus | None:
    """What a command-line program checks before it starts: the workspace is a directory and the
    user's config parses; then it prints the sandbox level to stderr. None (after printing why)
    when it must exit with status 2."""
    if not workspace.is_dir():
        print(f"{program}: workspace {workspace} is not a directory", file=sys.stderr)
        return None
    try:
        status = isolation_status(allow_unsandboxed)
    except ValueError as err:  # a config.toml that does not parse
        print(f"{program}: {err}", file=sys.stderr)
        return None
    print(f"{program}: {status.describe()}", file=sys.stderr, flush=True)
    return status


def _argv(level: Isolation, workspace: Path, command: str, *, network: bool,
          max_processes: int | None, tmp_bytes: int) -> list[str]:
    if level == "bwrap":
        return _bwrap_argv(workspace, command, network, max_processes, tmp_bytes)
    if level == "unshare":
        return _unshare_argv(workspace, command, network, max_processes)
    return ["bash", "-c", command]


# ---- running -----------------------------------------------------------------------------------


class _Output:
    """Collects output up to a byte cap, decoding incrementally and streaming the text."""

    def __init__(self, cap: int, on_output: Callable[[str], None] | None) -> None:
        self.cap, self.on_output = cap, on_output
        self.size = 0
        self.parts: list[str] = []
        self.truncated = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes, final: bool = False) -> None:
        if self.size + len(data) > self.cap:
            data, self.truncated = data[: self.cap - self.size], True
        self.size += len(data)
        text = self._decoder.decode(data, final=final or self.truncated)
        if text:
            self.parts.append(text)
            if self.on_output is not None:
                self.on_output(text)

    @property
    def text(self) -> str:
        return "".join(self.parts)


class _Process:
    """A Popen whose output and exit the event loop watches (no threads, no SIGCHLD watcher)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, output: _Output) -> None:
        self.loop = asyncio.get_running_loop()
        self.output = output
        self.eof = self.loop.create_future()
        self.exited = self.loop.create_future()
        self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
        self.fd = self.popen.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.loop.add_reader(self.fd, self._read)
        self.pidfd: int | None = None
        try:
            self.pidfd = os.pidfd_open(self.popen.pid)
            self.loop.add_reader(self.pidfd, self._reaped)
        except (AttributeError, OSError):  # no pidfd (old kernel): poll instead
            self.loop.create_task(self._poll())

    def _read(self) -> None:
        try:
            data = os.read(self.fd, _READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data and not self.output.truncated:
            self.output.feed(data)
        if not data or self.output.truncated:
            self._stop_reading()

    def _stop_reading(self) -> None:
        if not self.eof.done():
            self.loop.remove_reader(self.fd)
            self.output.feed(b"", final=True)
            self.eof.set_result(None)

    def _reaped(self) -> None:
        self.loop.remove_reader(self.pidfd)
        if not self.exited.done():
            self.exited.set_result(self.popen.wait())

    async def _poll(self) -> None:
        while self.popen.poll() is None:
            await asyncio.sleep(0.02)
        if not self.exited.done():
            self.exited.set_result(self.popen.returncode)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)

    async def close(self, cgroup: PidsCgroup | None) -> None:
        self.kill()
        if cgroup is not None:
            cgroup.kill_all()
        await self.exited
        self._stop_reading()
        self.popen.stdout.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
        if cgroup is not None:
            await cgroup.remove()


async def _supervise(proc: _Process, timeout_s: float, cancelled: asyncio.Event | None) -> str:
    """Waits for the command to end; returns why it ended: exit, output, timeout or cancelled."""
    cancel_wait = asyncio.ensure_future(cancelled.wait()) if cancelled is not None else None
    watched = {proc.exited, proc.eof} | ({cancel_wait} if cancel_wait else set())
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            done, _ = await asyncio.wait(watched, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            if cancel_wait is not None and cancel_wait in done:
                return "cancelled"
            if proc.output.truncated:
                return "output"
            if proc.exited in done:
                # Output written just before exit may still be in the pipe; background jobs that
                # hold it open are killed by close().
                await asyncio.wait({proc.eof}, timeout=_DRAIN_S)
                return "exit"
            watched.discard(proc.eof)
    finally:
        if cancel_wait is not None:
            cancel_wait.cancel()


async def _pick_level(isolation: Isolation | None, allow_unsandboxed: bool) -> tuple[Isolation, SandboxSupport]:
    support = _support or await asyncio.to_thread(sandbox_support)  # the first probe takes ~0.1 s
    if isolation is None:
        if support.isolation != "bwrap":
            (await asyncio.to_thread(isolation_status, allow_unsandboxed)).check("this command")
        return support.isolation, support
    if isolation not in support.available:
        raise ValueError(f"isolation {isolation!r} was requested but only {support.available} work "
                         f"here: {'; '.join(support.notes)}")
    return isolation, support


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


async def run_sandboxed(
    command: str,
    *,
    workspace_root: Path,
    timeout_s: float = 120,
    max_output_bytes: int = 200_000,
    env: dict[str, str] | None = None,
    network: bool = False,
    on_output: Callable[[str], None] | None = None,
    cancelled: asyncio.Event | None = None,
    memory_bytes: int | None = 8 * GIB,
    max_processes: int | None = 512,
    max_file_bytes: int | None = GIB,
    isolation: Isolation | None = None,
    allow_unsandboxed: bool = False,
) -> SandboxResult:
    """Runs `command` with `bash -c` in the sandbox, cwd = `workspace_root`; never raises for
    what the command does. `isolation` forces a lower level (tests); None takes the best one,
    and raises UnsandboxedError (before running anything) when that is weaker than bubblewrap,
    unless `allow_unsandboxed` or the user's config.toml allows it (agent/isolation.py).
    `memory_bytes`, `max_processes` and `max_file_bytes` of None lift that limit."""
    workspace = Path(workspace_root).resolve()
    if not workspace.is_dir():
        raise ValueError(f"workspace_root {workspace_root} is not a directory")
    if timeout_s <= 0 or max_output_bytes <= 0:
        raise ValueError(f"timeout_s ({timeout_s}) and max_output_bytes ({max_output_bytes}) must be > 0")
    level, support = await _pick_level(isolation, allow_unsandboxed)
    cgroup = None
    if support.pids_cgroup is not None and max_processes:
        cgroup = PidsCgroup(support.pids_cgroup, support.cgroup_version, max_processes)
    home = SANDBOX_HOME if level != "none" else tempfile.mkdtemp(prefix="composer-home-")
    argv = _argv(level, workspace, command, network=network, max_processes=max_processes,
                 tmp_bytes=max_file_bytes or GIB)
    argv = _outer(argv, cgroup, memory_bytes, max_file_bytes)
    started = time.perf_counter()
    output = _Output(max_output_bytes, on_output)
    proc = None
    try:
        proc = _Process(argv, _environment(workspace, home, env), workspace, output)
        reason = await _supervise(proc, timeout_s, cancelled)
    finally:
        if proc is not None:
            await asyncio.shield(proc.close(cgroup))
        elif cgroup is not None:
            await cgroup.remove()
        if level == "none":
            shutil.rmtree(home, ignore_errors=True)
    returncode = proc.exited.result()
    return SandboxResult(
        exit_code=_exit_code(returncode) if reason == "exit" else None,
        output=output.text,
        truncated=output.truncated,
        timed_out=reason == "timeout",
        cancelled=reason == "cancelled",
        duration_s=time.perf_counter() - started,
        isolation=level,
    )
