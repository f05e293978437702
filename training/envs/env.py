"""Bases, environments and grading (the API is in training/envs/__init__.py).

A Base is a directory tree that never changes once built: `Base.build(spec)` copies the spec's
source (a directory, or a `TreeSource` that fills the tree itself, e.g. a task's materialized
workspace: training/tasks.py `TaskSource`) into `<base_dir>/<key>-<digest>/tree`, runs its setup
commands there in the sandbox and
writes the `ready` marker last; a later build of the same spec (same key, source and setup) finds
the marker and returns at once. Builds of one base are serialised by an asyncio lock in the
process and an flock across processes; a build that died half-way is redone.

An Environment is a writable view of a base (training/envs/fs.py) in a registered directory
(training/envs/registry.py), with the sandbox's limits. Grading makes a second, fresh view,
applies the patches (`git apply`, then `patch --fuzz=5` as SWE-bench's harness does) in the
sandbox and runs the test commands there (each command's output read up to
GRADE_OUTPUT_BYTES: grading parses test reports at its end).

Where the sandbox is weaker than bubblewrap (agent/isolation.py), environments refuse to start
and bases with setup commands refuse to build (UnsandboxedError, naming the opt-in), unless
`allow_unsandboxed=True` is passed (or the user's config.toml sets it).

Tests: .venv/bin/python -m pytest tests/training/test_envs.py
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import re
import shlex
import subprocess
import time
import weakref
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agent.sandbox import GIB, SandboxResult, isolation_status, run_sandboxed
from agent.tools.base import ToolContext
from agent.unidiff import without_paths
from agent.workspace import Workspace
from training.envs.diff import tree_diff
from training.envs.exceptions import BaseBuildError, EnvClosedError, SetupError
from training.envs.fs import FsLevel, Layer, make_layer, remove_tree
from training.envs.registry import LOCK, READY, Registry, default_base_dir

if TYPE_CHECKING:
    from agent.session import Session, SessionConfig

APPLY_TIMEOUT_S = 120
GRADE_OUTPUT_BYTES = 32 * 1024**2
WORKSPACE_ALIAS = "/workspace"
"""How an environment's workspace is named to the model (the system prompt; tools accept it):
one path for every environment, so prompts do not differ by the directory an environment got.
Terminal commands still run at the real path (their output shows it)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """What one environment may use. Commands get agent/sandbox.py's limits; `disk_bytes` caps
    the overlay's writable layer; `cpus` is what the scheduler reserves for the environment."""

    timeout_s: float = 300
    """Wall clock of one command (a run_terminal call may ask for less, never more)."""
    memory_bytes: int | None = 4 * GIB
    """Address space of each process (RLIMIT_AS); None: unlimited."""
    max_processes: int | None = 256
    """Processes at once (a pids cgroup; contains fork bombs)."""
    max_file_bytes: int | None = GIB
    """Largest file a command may write (RLIMIT_FSIZE), also the size of the sandbox's /tmp."""
    disk_bytes: int | None = 2 * GIB
    """Everything the environment writes (the tmpfs under the overlay's upper dir); a copy
    environment has no such cap."""
    cpus: float = 1.0
    """CPUs the scheduler reserves while the environment runs (fractions allowed)."""
    network: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment variables for every command."""

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.cpus <= 0:
            raise ValueError(f"timeout_s ({self.timeout_s}) and cpus ({self.cpus}) must be > 0")

    def sandbox_settings(self) -> dict[str, Any]:
        """The `ctx.state["sandbox"]` dict the run_terminal tool reads."""
        return {"network": self.network, "env": dict(self.env), "memory_bytes": self.memory_bytes,
                "max_processes": self.max_processes, "max_file_bytes": self.max_file_bytes,
                "max_timeout_s": self.timeout_s}


# ---- bases ------------------------------------------------------------------------------------


@runtime_checkable
class TreeSource(Protocol):
    """A base's source that makes the tree itself (picklable, to build on a Ray worker)."""

    @property
    def digest(self) -> str:
        """Content address: equal digests make equal trees."""
        ...

    def fill(self, dest: Path) -> None:
        """Creates `dest` (absent when called) with the tree; blocking; raises on failure."""
        ...


@dataclass(frozen=True, kw_only=True)
class BaseSpec:
    """How to build a base: copy `source` (a directory, a TreeSource; None starts empty), then
    run `setup`."""

    key: str
    """The task or repo id (e.g. "django__django-11099" or "requests@v2.31.0")."""
    source: str | TreeSource | None = None
    setup: tuple[str, ...] = ()
    setup_network: bool = False
    """Setup commands may reach the network (pip install); agent commands never do by default."""
    setup_timeout_s: float = 1800
    setup_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """Content address: the key, the source path (or the TreeSource's digest), the setup
        commands and their network."""
        source = self.source.digest if isinstance(self.source, TreeSource) else (
            self.source and os.path.abspath(self.source))
        blob = json.dumps([self.key, source, list(self.setup),
                           self.setup_network, sorted(self.setup_env.items())])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def dirname(self) -> str:
        return f"{re.sub(r'[^A-Za-z0-9_.@+]+', '_', self.key)[:80]}-{self.digest}"


@dataclass(frozen=True)
class Base:
    key: str
    path: Path
    """The tree environments see (never written once ready)."""
    digest: str = ""

    @classmethod
    def from_dir(cls, path: str | os.PathLike[str], key: str | None = None) -> Base:
        """An existing snapshot used as is (it must not change while environments use it)."""
        tree = Path(path).resolve()
        if not tree.is_dir():
            raise ValueError(f"base directory {path} does not exist")
        return cls(key or tree.name, tree, "")

    @classmethod
    async def build(cls, spec: BaseSpec, base_dir: str | os.PathLike[str] | None = None, *,
                    allow_unsandboxed: bool = False) -> Base:
        """The base for `spec`, built now unless a finished one is already in `base_dir`. Its
        setup commands refuse to run with a sandbox weaker than bubblewrap unless
        `allow_unsandboxed` (UnsandboxedError)."""
        home = Path(base_dir or default_base_dir()).resolve() / spec.dirname
        if (home / READY).exists():
            return cls(spec.key, home / "tree", spec.digest)
        async with _build_lock(home):
            lock = await asyncio.to_thread(_flock, home)
            try:
                if not (home / READY).exists():
                    await _build(spec, home, allow_unsandboxed)
            finally:
                lock.close()
        return cls(spec.key, home / "tree", spec.digest)


_BUILD_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Path, asyncio.Lock]] = (
    weakref.WeakKeyDictionary())


def _build_lock(home: Path) -> asyncio.Lock:
    """One builder per base in this process (the others wait here, not in a thread); per event
    loop, as an asyncio.Lock belongs to the loop that first waited on it."""
    locks = _BUILD_LOCKS.setdefault(asyncio.get_running_loop(), {})
    return locks.setdefault(home, asyncio.Lock())


def _flock(home: Path):
    """Takes the base's build lock across processes; retries when a reaper deleted the lock file
    under us."""
    while True:
        home.mkdir(parents=True, exist_ok=True)
        lock = open(home / LOCK, "a+")  # noqa: SIM115 - held until the build ends
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError):
            if os.fstat(lock.fileno()).st_ino == os.stat(home / LOCK).st_ino:
                return lock
        lock.close()


async def _build(spec: BaseSpec, home: Path, allow_unsandboxed: bool) -> None:
    tree = home / "tree"
    started = time.perf_counter()
    await asyncio.to_thread(remove_tree, tree)
    if spec.source is None:
        tree.mkdir()
    elif isinstance(spec.source, TreeSource):
        try:
            await asyncio.to_thread(spec.source.fill, tree)
        except Exception as err:  # the source's own error (a task that cannot be built)
            raise BaseBuildError(f"base {spec.key}: its source could not be made: {err}") from err
    else:
        if not Path(spec.source).is_dir():
            raise BaseBuildError(f"base {spec.key}: source {spec.source} is not a directory")
        done = await asyncio.to_thread(subprocess.run, ["cp", "-a", "--reflink=auto",
                                       f"{spec.source}/.", str(tree)], capture_output=True)
        if done.returncode != 0:
            raise BaseBuildError(f"base {spec.key}: copying {spec.source} failed: "
                                 f"{done.stderr.decode(errors='replace')[-500:]}")
    for command in spec.setup:
        result = await run_sandboxed(command, workspace_root=tree, timeout_s=spec.setup_timeout_s,
                                     network=spec.setup_network, env=dict(spec.setup_env),
                                     max_output_bytes=1_000_000, memory_bytes=None,
                                     allow_unsandboxed=allow_unsandboxed)
        if result.exit_code != 0:
            raise BaseBuildError(f"base {spec.key}: setup command {command!r} "
                                 f"{'timed out' if result.timed_out else f'exited {result.exit_code}'}"
                                 f":\n{result.output[-2000:]}")
    source = f"{type(spec.source).__name__}:{spec.source.digest}" if isinstance(spec.source, TreeSource) \
        else spec.source
    info = {"key": spec.key, "digest": spec.digest, "source": source, "setup": list(spec.setup),
            "build_s": round(time.perf_counter() - started, 3), "built": time.time()}
    (home / f"{READY}.tmp").write_text(json.dumps(info, indent=1))
    os.replace(home / f"{READY}.tmp", home / READY)


# ---- environments -----------------------------------------------------------------------------


@dataclass(frozen=True)
class GradeResult:
    passed: bool
    """The patches applied and every test command exited 0."""
    applied: bool
    commands: tuple[str, ...]
    results: tuple[SandboxResult, ...]
    """One per test command run (none when a patch did not apply)."""
    apply_output: str
    isolation: str
    duration_s: float


_ids = itertools.count()


class Environment:
    """A writable copy-on-write view of a base; make one with `await Environment.create(base)`."""

    def __init__(self, base: Base, limits: Limits, layer: Layer, sandbox: str, state_dir: Path, *,
                 allow_unsandboxed: bool = False) -> None:
        self.base, self.limits, self.layer, self.state_dir = base, limits, layer, state_dir
        self.isolation = f"{layer.level}+{sandbox}"
        self.allow_unsandboxed = allow_unsandboxed
        """Commands may run with a sandbox weaker than bubblewrap (the opt-in was given)."""
        self.id = layer.env_dir.name
        self.closed = False
        self._workspace: Workspace | None = None
        self._applied = itertools.count()

    @classmethod
    async def create(cls, base: Base, *, limits: Limits | None = None,
                     state_dir: str | os.PathLike[str] | None = None,
                     filesystem: FsLevel | None = None, setup: Sequence[str] = (),
                     kind: str = "env", allow_unsandboxed: bool = False) -> Environment:
        """A new view of `base` (filesystem: force a level, e.g. "copy"), after running `setup`
        commands in it (SetupError when one fails). Refuses to start (UnsandboxedError) when the
        sandbox is weaker than bubblewrap, unless `allow_unsandboxed` or the user's config."""
        status = await asyncio.to_thread(isolation_status, allow_unsandboxed)  # probed once (~0.1 s)
        status.check("a training environment")
        limits = limits or Limits()
        registry = Registry(Path(state_dir) if state_dir else None)
        env_dir = registry.new_dir(kind)
        try:
            layer = await asyncio.to_thread(make_layer, env_dir, base.path, filesystem,
                                            limits.disk_bytes, env_dir)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(registry.retire, env_dir))
            raise
        env = cls(base, limits, layer, status.level, registry.state_dir, allow_unsandboxed=status.weaker)
        for command in setup:
            result = await env.run(command)
            if result.exit_code != 0:
                await env.close()
                raise SetupError(f"environment setup {command!r} exited {result.exit_code} on "
                                 f"{base.key}:\n{result.output[-2000:]}")
        return env

    @property
    def root(self) -> Path:
        return self.layer.root

    @property
    def workspace(self) -> Workspace:
        if self._workspace is None:
            self._workspace = Workspace(self.root, alias=WORKSPACE_ALIAS)
        return self._workspace

    def sandbox_settings(self) -> dict[str, Any]:
        """`ctx.state["sandbox"]` for run_terminal: the limits, and the opt-in when given."""
        return {**self.limits.sandbox_settings(), **({"unsandboxed": "allow"} if self.allow_unsandboxed else {})}

    def tool_context(self, **kwargs: Any) -> ToolContext:
        """A ToolContext on this environment for `default_tools()`: run_terminal gets the limits."""
        ctx = ToolContext(self.workspace, **kwargs)
        ctx.state.setdefault("sandbox", self.sandbox_settings())
        return ctx

    def session_config(self, **kwargs: Any) -> SessionConfig:
        """A SessionConfig for a rollout here: everything allowed (the sandbox is the boundary),
        no checkpoints and no semantic index unless asked."""
        from agent.session import SessionConfig

        settings = {"auto_allow": True, "checkpoints": False, "index": "off", "client": "rollout",
                    "allow_unsandboxed": self.allow_unsandboxed}
        return SessionConfig(workspace=self.root, **{**settings, **kwargs})

    async def open_session(self, policy: Any = None, **kwargs: Any) -> Session:
        """`Session.create` on this environment with `default_tools()`, the limits applied to
        run_terminal (kwargs go to session_config)."""
        from agent.session import Session

        session = await Session.create(self.session_config(**kwargs), policy=policy,
                                       workspace=self.workspace)
        session.agent.ctx.state["sandbox"] = self.sandbox_settings()
        return session

    def _check_open(self) -> None:
        if self.closed:
            raise EnvClosedError(f"environment {self.id} of {self.base.key} is closed")

    async def run(self, command: str, *, timeout_s: float | None = None,
                  env: Mapping[str, str] | None = None, on_output: Callable[[str], None] | None = None,
                  cancelled: asyncio.Event | None = None, max_output_bytes: int = 200_000) -> SandboxResult:
        """`command` with bash in the sandbox, cwd = root, with the environment's limits."""
        self._check_open()
        timeout = min(timeout_s or self.limits.timeout_s, self.limits.timeout_s)
        return await run_sandboxed(
            command, workspace_root=self.root, timeout_s=timeout, max_output_bytes=max_output_bytes,
            env={**self.limits.env, **(env or {})}, network=self.limits.network, on_output=on_output,
            cancelled=cancelled, memory_bytes=self.limits.memory_bytes,
            max_processes=self.limits.max_processes, max_file_bytes=self.limits.max_file_bytes,
            allow_unsandboxed=self.allow_unsandboxed)

    async def apply(self, patch: str) -> SandboxResult:
        """Applies a diff to the view in the sandbox: `git apply`, else `patch -p1 --fuzz=5`."""
        self._check_open()
        name = f".composer-apply-{os.getpid()}-{next(self._applied)}.patch"
        (self.root / name).write_bytes(patch.encode("utf-8", "surrogateescape"))
        quoted = shlex.quote(name)
        command = (f"git apply --verbose --whitespace=nowarn {quoted} || "
                   f"patch --batch --fuzz=5 -p1 --no-backup-if-mismatch -i {quoted}")
        git_env = {"GIT_CEILING_DIRECTORIES": str(self.root.parent), "GIT_CONFIG_COUNT": "1",
                   "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}
        try:
            return await self.run(command, timeout_s=APPLY_TIMEOUT_S, env=git_env)
        finally:
            (self.root / name).unlink(missing_ok=True)

    def diff(self, *, include_ignored: bool = False) -> str:
        """The view's changes against the base as a git diff (training/envs/diff.py). Blocking:
        walks the upper dir (overlay) or both trees (copy)."""
        self._check_open()
        return tree_diff(self.base.path, self.root, self.layer.upper, include_ignored=include_ignored)

    async def grade(self, tests: Sequence[str], diff: str | None = None, *,
                    patches: Sequence[str] = (), exclude_paths: Collection[str] = (),
                    timeout_s: float | None = None) -> GradeResult:
        """Runs `tests` in a fresh view of the base with `diff` (default: this environment's
        diff) and then `patches` applied; this environment is not touched."""
        if diff is None:
            diff = await asyncio.to_thread(self.diff)
        return await grade(self.base, tests, diff, patches=patches, exclude_paths=exclude_paths,
                           limits=self.limits, state_dir=self.state_dir, filesystem=self.layer.level,
                           timeout_s=timeout_s, allow_unsandboxed=self.allow_unsandboxed)

    async def healthy(self) -> bool:
        """The view is mounted and readable and a command runs in the sandbox."""
        if self.closed or not self.root.is_dir():
            return False
        if self.layer.level != "copy" and not os.path.ismount(self.root):
            return False
        result = await self.run("true", timeout_s=min(30.0, self.limits.timeout_s))
        return result.exit_code == 0

    async def close(self) -> None:
        """Unmounts and deletes the view; idempotent, and completes even when cancelled."""
        if self.closed:
            return
        self.closed = True
        await asyncio.shield(asyncio.to_thread(self._destroy))

    def _destroy(self) -> None:
        self.layer.unmount()
        Registry(self.state_dir).retire(self.layer.env_dir)

    async def __aenter__(self) -> Environment:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"Environment({self.id}, base={self.base.key}, {self.isolation}, root={self.root})"


async def grade(base: Base, tests: Sequence[str], diff: str | None = None, *,
                patches: Sequence[str] = (), exclude_paths: Collection[str] = (),
                limits: Limits | None = None, state_dir: str | os.PathLike[str] | None = None,
                filesystem: FsLevel | None = None, timeout_s: float | None = None,
                allow_unsandboxed: bool = False) -> GradeResult:
    """Applies `diff` (less its sections for `exclude_paths`: a task's test files, which the
    agent may not change) and then `patches` (e.g. a task's test_patch) to a fresh view of
    `base`, runs `tests` there one by one (each must exit 0) and tears the view down."""
    started = time.perf_counter()
    if diff and exclude_paths:
        diff = without_paths(diff, frozenset(exclude_paths))
    env = await Environment.create(base, limits=limits, state_dir=state_dir, filesystem=filesystem,
                                   kind="grade", allow_unsandboxed=allow_unsandboxed)
    try:
        outputs = []
        for patch in [p for p in (diff, *patches) if p and p.strip()]:
            applied = await env.apply(patch)
            outputs.append(applied.output)
            if applied.exit_code != 0:
                return GradeResult(False, False, tuple(tests), (), "".join(outputs), env.isolation,
                                   time.perf_counter() - started)
        results = []
        for command in tests:
            results.append(await env.run(command, timeout_s=timeout_s, max_output_bytes=GRADE_OUTPUT_BYTES))
        passed = all(r.exit_code == 0 for r in results)
        return GradeResult(passed, True, tuple(tests), tuple(results), "".join(outputs),
                           env.isolation, time.perf_counter() - started)
    finally:
        await env.close()


Rollout = Callable[[Environment], Awaitable[Any]]
"""What a job runs in its environment (the agent stage)."""
