"""Runs many jobs (setup -> run -> grade) in environments with bounded concurrency, CPU admission
control and a queue that makes bursts wait instead of fail; the same API runs in this process
(backend "local", asyncio) or on Ray actors across machines (backend "ray", ray_backend.py).

    async with Scheduler(cpus=2, max_concurrency=16) as sched:     # start() reaps stale state
        result = await sched.submit(Job(base=spec, run=rollout, tests=("pytest -q",)))
        result.ok, result.passed, result.diff, result.timings     # JobResult

Admission, stage by stage (the driver decides; workers only execute):
  queue   `submit` first takes one of `max_queue` places: past that the caller waits (backpressure)
  live    at most `max_concurrency` jobs hold an environment at once; the rest queue FIFO
  setup   at most `max_setup` environments are being made at once; base builds are shared (one
          build per base and worker, concurrent jobs of that base wait for it) and limited by
          `max_builds` per worker
  run     reserves `job.limits.cpus` of `cpus` (fractions add up; FIFO, so a big job is not
          starved by small ones); the environment is closed right after its diff is taken
  grade   reserves the CPUs again for the tests in a fresh view of the base
Health: each environment must pass `Environment.healthy()` (mounted, a sandboxed `true` runs)
before its run stage, else it is rebuilt once; infrastructure failures (mount errors, a lost Ray
actor) are retried `job.retries` times on another worker; a failing setup command or rollout is
not. `await sched.health()` reports every worker's state.

Tests: .venv/bin/python -m pytest tests/training/test_envs.py -k scheduler
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agent.sandbox import isolation_status, sandbox_support
from training.envs.env import Base, BaseSpec, Environment, GradeResult, Limits, Rollout, grade
from training.envs.exceptions import (
    BaseBuildError,
    EnvError,
    RolloutFailed,
    SchedulerClosedError,
    SetupError,
)
from training.envs.fs import FsLevel, FsSupport, probe_levels
from training.envs.registry import Registry, default_base_dir, default_state_dir, reap

log = logging.getLogger(__name__)

Stage = Literal["setup", "run", "grade", "worker"]


@dataclass(kw_only=True)
class Job:
    base: BaseSpec | Base
    run: Rollout | None = None
    """`async def rollout(env) -> Any`: the agent stage. Without it, `commands` run in order."""
    commands: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()
    """Grade stage commands (skipped when empty), run in a fresh view with the diff applied."""
    patches: tuple[str, ...] = ()
    """Applied after the diff when grading (a task's test_patch)."""
    exclude_paths: tuple[str, ...] = ()
    """Files whose changes are left out of the diff when grading (a task's test files)."""
    setup: tuple[str, ...] = ()
    """Per-environment setup commands (the base's own setup runs once per base)."""
    limits: Limits = field(default_factory=Limits)
    filesystem: FsLevel | None = None
    retries: int = 1
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])


@dataclass
class JobResult:
    id: str
    output: Any = None
    """What `job.run` returned, or the commands' SandboxResults; for a rollout that raised
    RolloutFailed, its `output` (what it had, e.g. its session log's path)."""
    diff: str = ""
    grade: GradeResult | None = None
    isolation: str = ""
    error: str | None = None
    error_stage: Stage | None = None
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds: queue, setup, run, grade, total."""
    attempts: int = 0
    worker: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def passed(self) -> bool:
        return self.ok and self.grade is not None and self.grade.passed


@dataclass
class Outcome:
    """What a worker's stage returns (never an exception, so it crosses Ray unchanged)."""

    value: Any = None
    error: str | None = None
    retryable: bool = False
    seconds: float = 0.0
    worker: str = ""


# ---- the worker side --------------------------------------------------------------------------


@dataclass
class _Slot:
    job: Job
    base: Base | None = None
    env: Environment | None = None
    diff: str = ""


def _describe(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}"
    if not isinstance(err, EnvError):
        text += "\n" + "".join(traceback.format_exception(err)[-6:])
    return text


class Runner:
    """Executes job stages on one machine: the base pool, the environments, their teardown. The
    local backend holds one; each Ray actor holds one."""

    def __init__(self, state_dir: str | os.PathLike[str] | None = None,
                 base_dir: str | os.PathLike[str] | None = None, max_builds: int = 2,
                 allow_unsandboxed: bool = False) -> None:
        self.state_dir = Path(state_dir or default_state_dir())
        self.base_dir = Path(base_dir or default_base_dir())
        self.max_builds = max_builds
        self.allow_unsandboxed = allow_unsandboxed
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self._bases: dict[str, asyncio.Task] = {}
        self._builds: asyncio.Semaphore | None = None
        self._slots: dict[str, _Slot] = {}

    async def start(self) -> dict[str, Any]:
        """Reaps what dead owners left in the state and base dirs, probes the machine; refuses
        (UnsandboxedError) where the sandbox is weaker than bubblewrap, unless allowed."""
        status = await asyncio.to_thread(isolation_status, self.allow_unsandboxed)
        status.check(f"the scheduler's worker {self.name}")
        report = await asyncio.to_thread(reap, self.state_dir, self.base_dir)
        fs = await asyncio.to_thread(self._probe)
        support = await asyncio.to_thread(sandbox_support)
        return {"worker": self.name, "reaped": vars(report), "fs": fs.available,
                "sandbox": support.isolation}

    def _probe(self) -> FsSupport:
        registry = Registry(self.state_dir)
        where = registry.new_dir("probe")  # registered: a crash mid-probe is reaped
        try:
            return probe_levels(where)
        finally:
            registry.retire(where)

    async def base(self, spec: BaseSpec | Base) -> Base:
        """The pool: one build per base (later and concurrent callers share it)."""
        if isinstance(spec, Base):
            return spec
        task = self._bases.get(spec.digest)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = self._bases[spec.digest] = asyncio.ensure_future(self._build(spec))
        return await asyncio.shield(task)

    async def _build(self, spec: BaseSpec) -> Base:
        self._builds = self._builds or asyncio.Semaphore(self.max_builds)
        async with self._builds:
            return await Base.build(spec, self.base_dir, allow_unsandboxed=self.allow_unsandboxed)

    async def prepare(self, specs: Sequence[BaseSpec]) -> list[str]:
        return [str((await self.base(spec)).path) for spec in specs]

    async def _timed(self, stage, *args: Any) -> Outcome:
        started = time.perf_counter()
        try:
            outcome = await stage(*args)
        except (BaseBuildError, SetupError) as err:
            outcome = Outcome(error=_describe(err))
        except EnvError as err:
            outcome = Outcome(error=_describe(err), retryable=True)
        except Exception as err:  # a rollout's own failure: reported, not retried
            outcome = Outcome(error=_describe(err), value=err.output if isinstance(err, RolloutFailed) else None)
        outcome.seconds, outcome.worker = time.perf_counter() - started, self.name
        return outcome

    async def setup(self, job: Job) -> Outcome:
        self._slots[job.id] = _Slot(job)
        return await self._timed(self._setup, job)

    async def _setup(self, job: Job) -> Outcome:
        slot = self._slots[job.id]
        slot.base = await self.base(job.base)
        for _ in range(2):
            env = await Environment.create(slot.base, limits=job.limits, state_dir=self.state_dir,
                                           filesystem=job.filesystem, setup=job.setup,
                                           allow_unsandboxed=self.allow_unsandboxed)
            if await env.healthy():
                slot.env = env
                return Outcome(value=env.isolation)
            log.warning("envs: %r failed its health check; rebuilding it", env)
            await env.close()
        return Outcome(error="the environment failed its health check twice", retryable=True)

    async def run(self, job_id: str) -> Outcome:
        return await self._timed(self._run, self._slots[job_id])

    async def _run(self, slot: _Slot) -> Outcome:
        env, job = slot.env, slot.job
        assert env is not None, "run before setup"
        try:
            if job.run is not None:
                output = await job.run(env)
            else:
                output = [await env.run(command) for command in job.commands]
            slot.diff = await asyncio.to_thread(env.diff)
        finally:
            await env.close()
        return Outcome(value=(output, slot.diff))

    async def grade(self, job_id: str) -> Outcome:
        return await self._timed(self._grade, self._slots[job_id])

    async def _grade(self, slot: _Slot) -> Outcome:
        job = slot.job
        result = await grade(slot.base, job.tests, slot.diff, patches=job.patches,
                             exclude_paths=job.exclude_paths, limits=job.limits, state_dir=self.state_dir,
                             filesystem=job.filesystem, allow_unsandboxed=self.allow_unsandboxed)
        return Outcome(value=result)

    async def finish(self, job_id: str) -> None:
        slot = self._slots.pop(job_id, None)
        if slot is not None and slot.env is not None:
            await slot.env.close()

    async def health(self) -> dict[str, Any]:
        registry = Registry(self.state_dir)
        return {"worker": self.name, "jobs": len(self._slots),
                "open_envs": sum(1 for s in self._slots.values() if s.env and not s.env.closed),
                "registered_dirs": len(registry.live_dirs()), "bases": len(self._bases),
                "fs": probe_levels(self.state_dir).available, "sandbox": sandbox_support().isolation}

    async def close(self) -> None:
        for job_id in list(self._slots):
            await self.finish(job_id)


# ---- admission --------------------------------------------------------------------------------


class CpuAdmission:
    """A FIFO weighted semaphore over `capacity` CPUs: `async with adm.reserve(0.5): ...`. A
    request larger than the capacity is cut to it (it then runs alone)."""

    def __init__(self, capacity: float) -> None:
        if capacity <= 0:
            raise ValueError(f"cpus must be > 0, got {capacity}")
        self.capacity, self.used = float(capacity), 0.0
        self._waiters: collections.deque[tuple[float, asyncio.Future]] = collections.deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _fits(self, cpus: float) -> bool:
        return self.used + cpus <= self.capacity + 1e-9

    def _wake(self) -> None:
        while self._waiters and self._fits(self._waiters[0][0]):
            cpus, fut = self._waiters.popleft()
            if not fut.done():
                self.used += cpus
                fut.set_result(None)

    @contextlib.asynccontextmanager
    async def reserve(self, cpus: float) -> AsyncIterator[None]:
        cpus = min(cpus, self.capacity)
        if self._waiters or not self._fits(cpus):
            fut = asyncio.get_running_loop().create_future()
            entry = (cpus, fut)
            self._waiters.append(entry)
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():  # granted just as we were cancelled
                    self.used -= cpus
                elif entry in self._waiters:
                    self._waiters.remove(entry)
                self._wake()
                raise
        else:
            self.used += cpus
        try:
            yield
        finally:
            self.used -= cpus
            self._wake()


# ---- the scheduler ----------------------------------------------------------------------------


class LocalBackend:
    """Workers = one Runner in this process."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    async def start(self) -> list[dict[str, Any]]:
        return [await self.runner.start()]

    def pick(self, job: Job, avoid: str | None) -> Runner:
        return self.runner

    def release(self, worker: Runner) -> None:
        return None

    async def prepare(self, specs: Sequence[BaseSpec]) -> None:
        await self.runner.prepare(specs)

    async def health(self) -> list[dict[str, Any]]:
        return [await self.runner.health()]

    async def replace(self, worker: Any) -> None:
        return None

    async def close(self) -> None:
        await self.runner.close()


@dataclass
class SchedulerStats:
    queued: int
    """Holding a queue place, waiting for a live slot."""
    blocked: int
    """Waiting in `submit` for a queue place (the queue is full: backpressure)."""
    live: int
    stage: dict[str, int]
    cpus_used: float
    cpus: float
    submitted: int
    done: int
    failed: int
    cancelled: int


class Scheduler:
    def __init__(self, *, cpus: float | None = None, max_concurrency: int = 64,
                 max_queue: int = 10_000, max_setup: int | None = None, max_builds: int = 2,
                 backend: Literal["local", "ray"] = "local",
                 state_dir: str | os.PathLike[str] | None = None,
                 base_dir: str | os.PathLike[str] | None = None, allow_unsandboxed: bool = False,
                 **ray_options: Any) -> None:
        """`cpus`: what admission hands out (default: this machine's, or the Ray cluster's);
        `ray_options` go to RayBackend (actors, cpus_per_actor, address, init);
        `allow_unsandboxed`: run even where the sandbox is weaker than bubblewrap (start() refuses
        otherwise, on every worker: agent/isolation.py)."""
        if max_concurrency < 1 or max_queue < max_concurrency:
            raise ValueError(f"need max_concurrency ({max_concurrency}) >= 1 and max_queue "
                             f"({max_queue}) >= max_concurrency")
        if backend not in ("local", "ray"):
            raise ValueError(f"backend must be 'local' or 'ray', got {backend!r}")
        if ray_options and backend != "ray":
            raise ValueError(f"options {sorted(ray_options)} are for backend='ray'")
        self.backend_name, self.cpus = backend, cpus
        self.max_concurrency, self.max_queue = max_concurrency, max_queue
        self.max_setup = max_setup or max(2, 2 * (os.cpu_count() or 1))
        self._runner_args = {"state_dir": state_dir, "base_dir": base_dir, "max_builds": max_builds,
                             "allow_unsandboxed": allow_unsandboxed}
        self._ray_options = ray_options
        self._backend: Any = None
        self._state = "new"
        self._stage = dict.fromkeys(("setup", "run", "grade"), 0)
        self._counts = {"submitted": 0, "done": 0, "failed": 0, "cancelled": 0}
        self._blocked = self._waiting = self._running = 0

    async def start(self) -> list[dict[str, Any]]:
        """Reaps stale sandboxes (per worker) and opens for submissions; returns each worker's
        start report."""
        if self._backend is None:
            if self.backend_name == "ray":
                from training.envs.ray_backend import RayBackend

                self._backend = RayBackend(runner_args=self._runner_args, **self._ray_options)
            else:
                self._backend = LocalBackend(Runner(**self._runner_args))
        reports = await self._backend.start()
        if self.cpus is None:
            self.cpus = getattr(self._backend, "cpus", None) or float(os.cpu_count() or 1)
        self._admission = CpuAdmission(self.cpus)
        self._queue = asyncio.Semaphore(self.max_queue)
        self._live = asyncio.Semaphore(self.max_concurrency)
        self._setup = asyncio.Semaphore(self.max_setup)
        self._state = "started"
        return reports

    async def submit(self, job: Job) -> JobResult:
        """Runs `job` through its stages and returns its JobResult; waits (without failing) while
        the queue is full. Raises only SchedulerClosedError."""
        if self._state != "started":
            raise SchedulerClosedError(f"scheduler is {self._state}; call start() first"
                                       if self._state == "new" else "scheduler is closed")
        self._counts["submitted"] += 1
        started = time.perf_counter()
        try:
            result = await self._admit(job, started)
        except asyncio.CancelledError:
            self._counts["cancelled"] += 1
            raise
        result.timings["total"] = time.perf_counter() - started
        self._counts["done" if result.ok else "failed"] += 1
        return result

    async def _admit(self, job: Job, started: float) -> JobResult:
        self._blocked += 1
        try:
            await self._queue.acquire()
        finally:
            self._blocked -= 1
        try:
            self._waiting += 1
            try:
                await self._live.acquire()
            finally:
                self._waiting -= 1
            queued = time.perf_counter() - started
            self._running += 1
            try:
                result = await self._execute(job)
            finally:
                self._running -= 1
                self._live.release()
        finally:
            self._queue.release()
        result.timings["queue"] = queued
        return result

    async def map(self, jobs: Iterable[Job]) -> list[JobResult]:
        return list(await asyncio.gather(*(self.submit(job) for job in jobs)))

    async def prepare(self, specs: BaseSpec | Sequence[BaseSpec]) -> None:
        """Builds bases ahead of the jobs that need them (on every worker)."""
        if self._state != "started":
            raise SchedulerClosedError(f"scheduler is {self._state}: prepare() needs start()")
        await self._backend.prepare([specs] if isinstance(specs, BaseSpec) else list(specs))

    async def _execute(self, job: Job) -> JobResult:
        result = JobResult(job.id)
        avoid = None
        while True:
            result.attempts += 1
            worker = self._backend.pick(job, avoid)
            stage, outcome = await self._stages(job, worker, result)
            if outcome.error is None:
                return result
            result.error, result.error_stage = outcome.error, stage
            if not outcome.retryable or result.attempts > job.retries:
                return result
            log.warning("envs: job %s failed at %s on %s (%s); retrying", job.id, stage,
                        outcome.worker, outcome.error.splitlines()[0])
            avoid = outcome.worker
            await self._backend.replace(worker)
            result.error = result.error_stage = None

    async def _call(self, stage: str, method: Any, *args: Any) -> Outcome:
        self._stage[stage] += 1
        try:
            return await self._backend_call(method, *args)
        finally:
            self._stage[stage] -= 1

    async def _backend_call(self, method: Any, *args: Any) -> Outcome:
        call = getattr(self._backend, "call", None)
        return await (call(method, *args) if call else method(*args))

    async def _stages(self, job: Job, worker: Any, result: JobResult) -> tuple[Stage, Outcome]:
        try:
            async with self._setup:
                outcome = await self._call("setup", worker.setup, job)
            result.timings["setup"], result.worker = outcome.seconds, outcome.worker
            if outcome.error is not None:
                return "setup", outcome
            result.isolation = outcome.value
            async with self._admission.reserve(job.limits.cpus):
                outcome = await self._call("run", worker.run, job.id)
            result.timings["run"] = outcome.seconds
            if outcome.error is not None:
                result.output = outcome.value
                return "run", outcome
            result.output, result.diff = outcome.value
            if job.tests:
                async with self._admission.reserve(job.limits.cpus):
                    outcome = await self._call("grade", worker.grade, job.id)
                result.timings["grade"] = outcome.seconds
                if outcome.error is not None:
                    return "grade", outcome
                result.grade = outcome.value
            return "grade", outcome
        except Exception as err:  # the worker itself failed (a Ray actor died): retry elsewhere
            return "worker", Outcome(error=_describe(err), retryable=True, worker=str(worker))
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._backend_call(worker.finish, job.id))
            self._backend.release(worker)

    def stats(self) -> SchedulerStats:
        adm = getattr(self, "_admission", None)
        return SchedulerStats(queued=self._waiting, blocked=self._blocked, live=self._running,
                              stage=dict(self._stage),
                              cpus_used=adm.used if adm else 0.0, cpus=self.cpus or 0.0,
                              **self._counts)

    async def health(self) -> list[dict[str, Any]]:
        if self._backend is None:
            raise SchedulerClosedError("scheduler is not started")
        return await self._backend.health()

    async def close(self) -> None:
        """Closes every environment still open; submissions after this raise."""
        if self._state == "closed":
            return
        self._state = "closed"
        if self._backend is not None:
            await self._backend.close()

    async def __aenter__(self) -> Scheduler:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
