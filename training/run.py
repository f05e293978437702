"""Running the agent on tasks: each task becomes a job on training/envs' scheduler, runs one
agent session with the editor's own harness in a sandboxed environment, is graded with its
hidden tests, and the grade goes into the session log. The benchmark (`python -m training.eval`)
and the RL rollout workers both call this.

    run = await run_task(task, policy, config=RunConfig(log_dir=logs), scheduler=sched)
    run.log_path, run.grade        # Path | None; TaskGrade (.resolved, .fail_to_pass, .infra)
    runs = await run_tasks(tasks, None, config=RunConfig(session={"model": ckpt}), on_done=bar)
    reward = score(read_session(run.log_path), run.grade)     # training/rewards.py

    python -m training.run TASKS.jsonl [--instance ID ...] [--model DIR | --endpoint URL]
        [--log-dir DIR] [--max-steps N] [--parallel N] [--allow-unsandboxed]
                                                           # one JSON line per task

One run:
  1. environment up: a view of the task's base (`training.tasks.base_spec`: the workspace
     materialized and its setup run once per task, then shared);
  2. an agent session on it (`Environment.open_session`: agent.session.Session, client
     "rollout", the task id in the log's header, everything allowed inside the sandbox), prompted
     with the problem statement; the harness's clock (`RunConfig.timeout_s`) bounds the turn;
  3. the environment's diff is taken and the environment goes down;
  4. grading in a fresh view: the diff less the tests' files (`tasks.protected_paths`), then
     `test_patch`, then the task's test command over FAIL_TO_PASS + PASS_TO_PASS; each test's
     outcome from pytest's -rA summary (`tasks.grade`);
  5. the diff (`final_diff`) and the grade (`outcome`, signal task_resolved) are appended to the
     session log.

Infrastructure failures are not wrong answers: a base that cannot be built, an environment that
fails, the policy or harness raising, the harness's clock running out, a patch that does not
apply when grading all give a TaskGrade with `infra` and `infra_stage` set, `resolved` None and a
masked outcome record. A wrong answer (tests failing, a test command timing out, the step limit
reached) is `resolved` False.

Where the sandbox is weaker than bubblewrap, the scheduler refuses to start (UnsandboxedError,
raised by run_task, exit status 2 on the command line) unless `RunConfig.allow_unsandboxed`
(`--allow-unsandboxed`) or the user's config.toml opts in: a refusal is not a grade.

`policy` is a Policy (agent.policy) shared by the runs, a zero-argument callable that makes one
per run (what Ray workers need: an engine does not pickle), or None: the session builds it from
`RunConfig.session` (model, endpoint, quantize: agent.session.SessionConfig's fields).

Tests: .venv/bin/python -m pytest tests/training/test_run.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent.isolation import UnsandboxedError
from agent.loop import LoopConfig
from agent.session_log import SessionLog, read_session
from agent.unidiff import touched_paths
from training.envs import Environment, GradeResult, Job, JobResult, Limits, RolloutFailed, Scheduler
from training.envs.fs import FsLevel
from training.rewards import score
from training.tasks import (
    TEST_ENV,
    Task,
    TaskGrade,
    base_spec,
    grade,
    infra_grade,
    load_tasks,
    protected_paths,
    test_outcomes,
)

CANCEL_GRACE_S = 60
"""After the clock runs out, how long the cancelled turn may take to write its last records."""


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """How tasks are run (the same for every task of a run)."""

    log_dir: Path | None = None
    """Where the session logs go (default: $COMPOSER_LOG_DIR or ~/.local/share/composer/sessions)."""
    session: dict[str, Any] = field(default_factory=dict)
    """agent.session.SessionConfig fields for each session (model, endpoint, quantize, loop,
    repo_map_tokens, ...), over Environment.session_config's rollout defaults."""
    limits: Limits = field(default_factory=Limits)
    """Each environment's limits; `timeout_s` bounds every command, the tests' included."""
    timeout_s: float = 1800
    """The harness's clock for the agent's turn; running out is an infrastructure failure."""
    setup_network: bool = False
    """Tasks' setup commands may reach the network (pip install)."""
    cache_dir: str | None = None
    """Where PyPI sources' sdists are looked for (default: training.tasks.sdist_cache_dir())."""
    filesystem: FsLevel | None = None
    """Force an environment filesystem level (overlay, fuse-overlayfs, copy)."""
    state_dir: str | None = None
    """For the scheduler run_task makes when given none: its environments' state directory."""
    base_dir: str | None = None
    """For the scheduler run_task makes when given none: where bases are built."""
    allow_unsandboxed: bool = False
    """For the scheduler run_task makes when given none: run even where the sandbox is weaker
    than bubblewrap (it refuses otherwise: agent/isolation.py). A given scheduler has its own."""

    def scheduler(self, max_concurrency: int) -> Scheduler:
        """The scheduler run_task and run_tasks make when given none."""
        return Scheduler(max_concurrency=max_concurrency, state_dir=self.state_dir, base_dir=self.base_dir,
                         allow_unsandboxed=self.allow_unsandboxed)


@dataclass(frozen=True)
class TaskRun:
    """One task's run: where its session log is and its grade, and what the job reports."""

    log_path: Path | None
    """The session log (None when no session started: the environment failed first)."""
    grade: TaskGrade
    diff: str = ""
    """Everything the agent changed (the tests' files included; grading leaves those out)."""
    stop_reason: str | None = None
    steps: int = 0
    tool_calls: int = 0
    isolation: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds: queue, setup, run, grade, total (training/envs JobResult)."""

    @property
    def task_id(self) -> str:
        return self.grade.instance_id


@dataclass
class TaskRollout:
    """The agent stage of a task's job (module-level and a dataclass, so Ray can pickle it)."""

    task: Task
    policy: Any
    config: RunConfig

    def _policy(self) -> tuple[Any, bool]:
        """(the policy, whether this run owns it and closes it)."""
        if self.policy is None or hasattr(self.policy, "complete"):
            return self.policy, self.policy is None
        return self.policy(), True

    async def __call__(self, env: Environment) -> dict[str, Any]:
        report: dict[str, Any] = {}
        try:
            policy, owned = self._policy()
            options = {"task_id": self.task.instance_id, **self.config.session}
            if self.config.log_dir is not None:
                options["log_dir"] = self.config.log_dir
            session = await env.open_session(policy, **options)
        except Exception as err:
            raise RolloutFailed(f"the session could not start: {type(err).__name__}: {err}", report) from err
        report["log"] = str(session.log_path)
        try:
            result = await self._turn(session, report)
        except RolloutFailed:
            raise
        except Exception as err:  # the policy or the harness failed: not the agent's answer
            raise RolloutFailed(f"the harness failed: {type(err).__name__}: {err}", report) from err
        finally:
            await (session.aclose() if owned else asyncio.to_thread(session.close))
        return report | {"stop_reason": result.stop_reason, "steps": result.steps, "tool_calls": result.tool_calls}

    async def _turn(self, session: Any, report: dict[str, Any]) -> Any:
        turn = asyncio.ensure_future(session.prompt(self.task.problem_statement))
        done, _ = await asyncio.wait({turn}, timeout=self.config.timeout_s)
        if not done:
            session.cancel()
            await asyncio.wait({turn}, timeout=CANCEL_GRACE_S)
            raise RolloutFailed(f"the harness's clock ran out after {self.config.timeout_s:g} s",
                                report | {"stage": "timeout"})
        return turn.result()


def task_limits(limits: Limits) -> Limits:
    """`limits` with the tasks' test environment variables (training.tasks.TEST_ENV)."""
    return replace(limits, env={**TEST_ENV, **limits.env})


def grading(task: Task) -> dict[str, tuple[str, ...]]:
    """How a task's diff is graded: the `tests`, `patches` and `exclude_paths` of
    training/envs' grade (and of a Job)."""
    return {"tests": (task.test_command([*task.FAIL_TO_PASS, *task.PASS_TO_PASS]),),
            "patches": (task.test_patch,) if task.test_patch.strip() else (),
            "exclude_paths": tuple(sorted(protected_paths(task)))}


def task_job(task: Task, policy: Any = None, config: RunConfig | None = None) -> Job:
    """The scheduler job of one task run (submit it yourself, then call `finish_task`)."""
    config = config or RunConfig()
    return Job(base=base_spec(task, cache_dir=config.cache_dir, setup_network=config.setup_network),
               run=TaskRollout(task, policy, config), limits=task_limits(config.limits),
               filesystem=config.filesystem, **grading(task))


async def grade_in(env: Environment, task: Task) -> TaskGrade:
    """Grades the environment's current diff against `task` (a fresh view; `env` untouched)."""
    g = grading(task)
    return graded_task(task, await env.grade(g["tests"], patches=g["patches"], exclude_paths=g["exclude_paths"]))


def job_grade(task: Task, result: JobResult) -> TaskGrade:
    """The task's grade from its job's result: infrastructure failures masked, else per test."""
    report = result.output if isinstance(result.output, dict) else {}
    if result.error is not None:
        stage = report.get("stage") or result.error_stage or "run"
        return infra_grade(task, stage, result.error, seconds=result.timings.get("total", 0.0))
    return graded_task(task, result.grade)


def graded_task(task: Task, graded: GradeResult | None) -> TaskGrade:
    """The task's grade from training/envs' GradeResult of its test command."""
    if graded is None or not graded.results:
        why = graded.apply_output[-2000:] if graded is not None else "no grade stage ran"
        return infra_grade(task, "grade", f"a patch did not apply in the grading view: {why}")
    tests = graded.results[0]
    ids = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
    return grade(task, test_outcomes(tests.output, ids), exit_code=tests.exit_code,
                 timed_out=tests.timed_out, seconds=tests.duration_s)


def record_run(log_path: Path, run_grade: TaskGrade, diff: str, max_diff_chars: int | None = None) -> None:
    """Appends the run's final diff and its grade to its session log."""
    limit = max_diff_chars or LoopConfig().max_diff_chars
    with SessionLog.reopen(log_path) as log:
        if diff:
            log.write("final_diff", diff=diff[:limit], truncated=len(diff) > limit, base_checkpoint_id=None,
                      files=sorted(touched_paths(diff)))
        log.write("outcome", **run_grade.outcome())


def finish_task(task: Task, result: JobResult, config: RunConfig | None = None) -> TaskRun:
    """Grades a task's finished job, writes the log records, and returns the TaskRun."""
    config = config or RunConfig()
    report = result.output if isinstance(result.output, dict) else {}
    run_grade = job_grade(task, result)
    log_path = Path(report["log"]) if report.get("log") else None
    if log_path is not None and log_path.is_file():
        loop = config.session.get("loop")
        record_run(log_path, run_grade, result.diff, loop.max_diff_chars if isinstance(loop, LoopConfig) else None)
    return TaskRun(log_path=log_path, grade=run_grade, diff=result.diff, stop_reason=report.get("stop_reason"),
                   steps=report.get("steps", 0), tool_calls=report.get("tool_calls", 0),
                   isolation=result.isolation, timings=dict(result.timings))


async def run_task(task: Task, policy: Any = None, *, config: RunConfig | None = None,
                   scheduler: Scheduler | None = None) -> TaskRun:
    """Runs the agent on `task` in an environment and grades it (see the module docstring).
    Without a scheduler, one is made for this run (and closed after it)."""
    config = config or RunConfig()
    if scheduler is None:
        async with config.scheduler(1) as own:
            return await run_task(task, policy, config=config, scheduler=own)
    result = await scheduler.submit(task_job(task, policy, config))
    return await asyncio.to_thread(finish_task, task, result, config)


async def run_tasks(tasks: Sequence[Task], policy: Any = None, *, config: RunConfig | None = None,
                    scheduler: Scheduler | None = None, parallel: int = 2,
                    on_done: Callable[[TaskRun], None] | None = None) -> list[TaskRun]:
    """Runs every task (at most `parallel` at once when making the scheduler); TaskRuns in the
    tasks' order; `on_done` is called as each finishes (a progress bar)."""
    config = config or RunConfig()
    if scheduler is None:
        async with config.scheduler(parallel) as own:
            return await run_tasks(tasks, policy, config=config, scheduler=own, on_done=on_done)

    async def one(task: Task) -> TaskRun:
        run = await run_task(task, policy, config=config, scheduler=scheduler)
        if on_done is not None:
            on_done(run)
        return run

    return list(await asyncio.gather(*(one(task) for task in tasks)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("tasks", type=Path, help="a tasks .jsonl file")
    parser.add_argument("--instance", action="append", help="run only this instance id (repeatable)")
    parser.add_argument("--model", help="checkpoint directory (in-process engine; default composer-mini)")
    parser.add_argument("--endpoint", help="an OpenAI-compatible base URL instead of the in-process engine")
    parser.add_argument("--log-dir", type=Path, help="where session logs go")
    parser.add_argument("--max-steps", type=int, default=LoopConfig().max_steps)
    parser.add_argument("--max-tokens", type=int, default=LoopConfig().max_tokens_per_step)
    parser.add_argument("--timeout", type=float, default=1800, help="the harness's clock per task, seconds")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--allow-unsandboxed", action="store_true",
                        help="run even where the sandbox is weaker than bubblewrap (agent/isolation.py)")
    args = parser.parse_args(argv)
    tasks = [t for t in load_tasks(args.tasks) if not args.instance or t.instance_id in args.instance]
    missing = set(args.instance or ()) - {t.instance_id for t in tasks}
    if missing:
        parser.error(f"no task {sorted(missing)} in {args.tasks}")
    session = {"model": args.model, "endpoint": args.endpoint,
               "loop": LoopConfig(max_steps=args.max_steps, max_tokens_per_step=args.max_tokens)}
    config = RunConfig(log_dir=args.log_dir, session=session, timeout_s=args.timeout,
                       allow_unsandboxed=args.allow_unsandboxed)

    def report(run: TaskRun) -> None:
        reward = score(read_session(run.log_path), run.grade) if run.log_path else None
        print(json.dumps({"task": run.task_id, "log": str(run.log_path) if run.log_path else None,
                          "grade": run.grade.to_json(), "reward": reward.to_json() if reward else None}), flush=True)

    try:
        asyncio.run(run_tasks(tasks, None, config=config, parallel=args.parallel, on_done=report))
    except UnsandboxedError as err:  # refused before any task ran: not a grade
        print(json.dumps({"error": str(err)}), flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
