"""Running a policy on a suite: every task (once per seed of the suite's budget) as a job on
training/envs' scheduler through training/run.py (the editor's harness in a sandboxed
environment, graded with the hidden tests), scored by training/rewards.py, with adherence
(training/eval/adherence.py) on tasks whose reference names helpers. One JSON record per attempt
is appended to the run directory as it finishes, so a killed run continues where it stopped.

    policy = parse_policy("composer-mini")           # or a checkpoint directory, or a URL
    records = await run_suite(load_suite("bugfix-heldout"), policy, RunDir(out), parallel=2)

A run directory holds
    run.json        what was run: suite, budget, policy (written once; a resume must match it)
    records.jsonl   one attempt per line, appended and flushed as each finishes (append-only)
    sessions/       every attempt's session log (training.data reads them: evaluations are data)
    report.json, report.md, report.png    (training/eval/report.py)

A record (`task_record`):
    instance_id, seed, status      "scored" | "masked" (an infrastructure failure: not a score)
    resolved                       true | false | null (masked)
    reward                         training.rewards.Reward.to_json(): reward, success, efficiency
                                   (turns, tool_calls, parallel_calls, parallel_share,
                                   prompt_tokens, completion_tokens, wall_s, model_s,
                                   tokens_per_s), claims (the final message's claims, unsupported
                                   count), malformed, terms
    grade                          training.tasks.TaskGrade.to_json(): per-test outcomes, infra
    adherence                      Adherence.to_json() where the task names helpers, else null
    stop_reason, steps, tool_calls, timings, isolation, log, metadata (level, kind)

Each attempt's seed seeds its sampler (LoopConfig.seed: the first model call takes the seed, the
next ones seed + 1, ...), so an attempt at a temperature above 0 is reproducible too.

Tests: .venv/bin/python -m pytest tests/training/test_eval.py
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from agent.loop import LoopConfig
from agent.session_log import read_session
from training.envs import Base, Scheduler
from training.envs.registry import default_base_dir
from training.eval.adherence import AdherenceError, adherence
from training.eval.suite import Suite
from training.rewards import score
from training.run import RunConfig, TaskRun, run_task
from training.tasks import Task, base_spec

RUN_FORMAT = "composer-eval-run/1"
RECORD_FORMAT = "composer-eval-record/1"


@dataclass(frozen=True)
class PolicySpec:
    """What `--policy` named: the in-process engine on a checkpoint (composer-mini is the
    default one) or an OpenAI-compatible endpoint."""

    spec: str
    kind: str
    """"engine" or "endpoint"."""
    model: str | None = None
    """The checkpoint directory (engine; None is composer-mini) or the model name (endpoint)."""
    endpoint: str | None = None
    quantize: str = "int4"
    tokenizer: str | None = None
    """An endpoint's tokenizer (a checkpoint directory): prompts then go as token ids and the logs
    are token-exact (default: the model's own, when `model` is composer-mini or a directory)."""

    def session(self, api_key: str | None = None) -> dict[str, Any]:
        """agent.session.SessionConfig fields for a task's session."""
        if self.kind == "endpoint":
            return {"endpoint": self.endpoint, "model": self.model, "api_key": api_key, "tokenizer": self.tokenizer}
        return {"model": self.model, "quantize": self.quantize}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def slug(self) -> str:
        """A directory name for the policy's runs."""
        text = self.spec.rstrip("/")
        if self.kind == "engine" and self.model:
            text = Path(text).name
        return re.sub(r"[^A-Za-z0-9._-]+", "_", text.removeprefix("http://").removeprefix("https://")).strip("_")


def parse_policy(text: str, *, model_name: str | None = None, quantize: str = "int4",
                 tokenizer: str | None = None) -> PolicySpec:
    """`composer-mini`, a checkpoint directory (with config.json) or an http(s) URL of an
    OpenAI-compatible server (`model_name`: the model to ask it for; `tokenizer`: its tokenizer's
    directory); ValueError otherwise."""
    if tokenizer is not None and not re.match(r"https?://", text):
        raise ValueError(f"--tokenizer is for endpoints; --policy {text} brings its own")
    if text == "composer-mini":
        return PolicySpec(text, "engine", None, quantize=quantize)
    if re.match(r"https?://", text):
        if tokenizer is not None and not (Path(tokenizer).expanduser() / "tokenizer.json").is_file():
            raise ValueError(f"--tokenizer {tokenizer}: no tokenizer.json there")
        return PolicySpec(text, "endpoint", model_name, endpoint=text.rstrip("/"),
                          tokenizer=str(Path(tokenizer).expanduser().resolve()) if tokenizer else None)
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"--policy {text}: a checkpoint directory needs a config.json (Hugging Face layout)")
        return PolicySpec(text, "engine", str(path.resolve()), quantize=quantize)
    raise ValueError(f"--policy {text!r}: not composer-mini, an existing checkpoint directory or an http(s) URL")


def loop_config(suite: Suite, seed: int | None = None) -> LoopConfig:
    """The agent loop under the suite's budget, its sampler seeded with `seed`."""
    b = suite.budget
    return LoopConfig(max_steps=b.max_steps, max_tokens_per_step=b.max_tokens_per_step,
                      max_turn_tokens=b.max_tokens, temperature=b.temperature, seed=seed)


class RunDir:
    """A run's directory: its description, its records (append-only) and its session logs."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.records_path = self.path / "records.jsonl"
        self.sessions = self.path / "sessions"

    def start(self, meta: dict[str, Any]) -> dict[str, Any]:
        """Writes run.json for a new run, or checks that `meta` is the run already there (same
        suite, budget, tasks and policy); ValueError naming both values when it is not."""
        meta = json.loads(json.dumps(meta))  # as it reads back: tuples become lists
        self.sessions.mkdir(parents=True, exist_ok=True)
        path = self.path / "run.json"
        if path.is_file():
            old = json.loads(path.read_text(encoding="utf-8"))
            for key in ("suite", "budget", "instances", "policy"):
                if old.get(key) != meta.get(key):
                    raise ValueError(f"{self.path} holds another run: its {key} is {old.get(key)!r}, "
                                     f"this one's is {meta.get(key)!r}; pass another --out")
            return old
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"format": RUN_FORMAT, **meta}, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return meta

    def meta(self) -> dict[str, Any]:
        return json.loads((self.path / "run.json").read_text(encoding="utf-8"))

    def records(self) -> list[dict[str, Any]]:
        """The records written so far (a line cut short by a kill is skipped: it reruns)."""
        if not self.records_path.is_file():
            return []
        found = []
        for line in self.records_path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("format") == RECORD_FORMAT:
                found.append(record)
        return found

    def append(self, record: dict[str, Any]) -> None:
        """Appends one record and flushes it to disk (after a cut line, on a line of its own)."""
        line = json.dumps({"format": RECORD_FORMAT, **record}, ensure_ascii=False) + "\n"
        with open(self.records_path, "a+b") as f:
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    line = "\n" + line
            f.write(line.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())


async def task_adherence(task: Task, diff: str, workspace: Path) -> dict[str, Any] | None:
    """The adherence report of `diff` on a task whose reference names helpers, else None."""
    if not task.metadata.get("helpers"):
        return None
    try:
        return (await adherence(task, diff, workspace)).to_json()
    except AdherenceError as err:
        return {"error": str(err)[:500], "score": 0.0}


async def task_record(task: Task, seed: int, run: TaskRun, workspace: Path | None) -> dict[str, Any]:
    """One attempt's record (see the module docstring)."""
    records = await asyncio.to_thread(read_session, run.log_path) if run.log_path else []
    reward = score(records, run.grade)
    adh = None
    if not run.grade.masked and workspace is not None:
        adh = await task_adherence(task, run.diff, workspace)
    meta = {k: task.metadata[k] for k in ("level", "kind") if k in task.metadata}
    return {"instance_id": task.instance_id, "seed": seed, "status": "masked" if run.grade.masked else "scored",
            "resolved": run.grade.resolved, "reward": reward.to_json(), "grade": run.grade.to_json(),
            "adherence": adh, "stop_reason": run.stop_reason, "steps": run.steps, "tool_calls": run.tool_calls,
            "timings": run.timings, "isolation": run.isolation, "metadata": meta,
            "log": str(run.log_path) if run.log_path else None, "finished": time.time()}


SPREAD = 4
"""Attempts start in a spread order: every SPREAD-th task of the suite first, then the next
offset, so a run stopped early (a slow machine, a kill) has sampled the whole suite (suites list
their tasks grouped by module, with levels in turn) rather than its first module."""


def todo(suite_tasks: list[Task], seeds: tuple[int, ...], records: list[dict[str, Any]]) -> list[tuple[Task, int]]:
    """The attempts no record holds yet, seed by seed, each seed's in the spread order."""
    done = {(r["instance_id"], r["seed"]) for r in records}
    order = sorted(range(len(suite_tasks)), key=lambda i: (i % SPREAD, i))
    return [(suite_tasks[i], s) for s in seeds for i in order if (suite_tasks[i].instance_id, s) not in done]


async def run_suite(suite: Suite, policy: PolicySpec, run_dir: RunDir, *, tasks: list[Task] | None = None,
                    parallel: int = 2, policy_factory: Callable[[], Any] | None = None,
                    api_key: str | None = None, allow_unsandboxed: bool = False,
                    on_record: Callable[[dict[str, Any]], None] | None = None,
                    on_start: Callable[[int, int], None] | None = None,
                    scheduler_options: dict[str, Any] | None = None, command: str | None = None,
                    timeout_s: float | None = None) -> list[dict[str, Any]]:
    """Runs the attempts of `tasks` (default: the suite's) that `run_dir` has no record of, at
    most `parallel` at once, appending each record as it finishes; returns every record of the
    run. `policy_factory` makes a Policy per attempt (a scripted one in tests); without it
    the session builds `policy`'s. `on_start(done, total)` is called once before any attempt.
    `timeout_s` replaces the suite's clock per attempt (a slow or shared machine: the clock is a
    safety net, not the budget; running out masks the attempt as an infrastructure failure)."""
    tasks = suite.tasks() if tasks is None else tasks
    meta = {"suite": suite.name, "suite_path": str(suite.path), "budget": asdict(suite.budget),
            "instances": [t.instance_id for t in tasks], "policy": policy.to_json()}
    timeout_s = timeout_s or suite.budget.timeout_s
    run_dir.start(meta | {"created": time.time(), "command": command, "timeout_s": timeout_s})
    pending = todo(tasks, suite.budget.seeds, run_dir.records())
    if on_start is not None:
        on_start(len(tasks) * len(suite.budget.seeds) - len(pending), len(tasks) * len(suite.budget.seeds))
    config = RunConfig(log_dir=run_dir.sessions, session=policy.session(api_key), timeout_s=timeout_s,
                       allow_unsandboxed=allow_unsandboxed)
    options = {"max_concurrency": parallel, "allow_unsandboxed": allow_unsandboxed, **(scheduler_options or {})}
    base_dir = options.get("base_dir") or default_base_dir()
    async with Scheduler(**options) as scheduler:
        async def attempt(task: Task, seed: int) -> None:
            seeded = replace(config, session={**config.session, "loop": loop_config(suite, seed)})
            run = await run_task(task, policy_factory, config=seeded, scheduler=scheduler)
            workspace = await _workspace(task, base_dir, allow_unsandboxed) if task.metadata.get("helpers") else None
            record = await task_record(task, seed, run, workspace)
            await asyncio.to_thread(run_dir.append, record)
            if on_record is not None:
                on_record(record)

        await asyncio.gather(*(attempt(task, seed) for task, seed in pending))
    return run_dir.records()


async def _workspace(task: Task, base_dir: Any, allow_unsandboxed: bool) -> Path | None:
    """The task's starting workspace: its base, already built by the scheduler for the run."""
    try:
        base = await Base.build(base_spec(task), base_dir, allow_unsandboxed=allow_unsandboxed)
    except Exception:  # adherence is then not measured; the attempt's record still stands
        return None
    return base.path
