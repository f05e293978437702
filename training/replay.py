"""Replay a logged session: re-run its tool calls, in order and in their parallel groups, in a
fresh training/envs environment over the workspace it started from, through the real tool
registry, and report whether the end state matches what the log says (its `final_diff` records)
and what the tests say; against a task, grade it with the task's hidden tests and write the grade
to the log.

    python -m training.replay LOG.jsonl [--workspace-source DIR] [--tests CMD] [--keep DIR]
    python -m training.replay LOG.jsonl --task TASKS.jsonl [--instance ID] [--no-write]
        [--allow-unsandboxed]                   # below bubblewrap it refuses without this
    report = await replay_session(Path("LOG.jsonl"), workspace_source=None, tests="pytest -q")
    report = await replay_session(Path("LOG.jsonl"), task=task)   # report["grade"]: a TaskGrade's JSON

The starting snapshot, in order of preference:
  0. `--task FILE`: the task's workspace, as `training.run` builds it (`tasks.base_spec`), for
     `--instance ID` (default: the id in the log's header, or the file's only task);
  1. `--workspace-source DIR`: a copy of DIR (its .composer folder left out);
  2. the log's first `checkpoint` record, restored from the logged workspace's checkpoint store
     (.composer/checkpoints: gitignored files included), with the workspace's .git at the
     header's commit put back beside it;
  3. the header's git commit, checked out from the logged workspace (a note says when the
     workspace was dirty: uncommitted changes are then missing);
  4. a session that never wrote (no checkpoint): the logged workspace as it is now.

What is compared:
  * read-only calls (read_file, grep, list_dir, ...): the result and error, made the way the
    log writer makes them (the replay's path shown as the logged one, cut, redacted);
  * calls that write: only whether they failed; their effect is judged by the end state:
  * each `final_diff` record against the replay's diff from the matching checkpoint (checkpoint
    records are re-taken at the same points), or, for one without a checkpoint (a task run's,
    written by training.run), against the environment's diff; a log without one must leave no
    change.
Denied and cancelled calls are skipped (they never ran, or a stop cut them short: a command's
partial effect then shows as a final-diff mismatch). The report is JSON: `matches` (every final diff
matches), `final_diffs`, `mismatches` (per call), `tests` (exit code and output tail of --tests,
run in the environment's sandbox), `grade` (with --task: the replayed diff graded in a fresh view
as training.run grades, also appended to the log as an `outcome` record, source "replay",
unless --no-write), `source`, `notes`. Exit status: 0 when it matches, 1 when not, 2 when the log
cannot be replayed.

Tests: .venv/bin/python -m pytest tests/training/test_replay.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.checkpoints import CheckpointStore
from agent.isolation import UnsandboxedError
from agent.loop import LoopConfig
from agent.redact import redact, redact_obj
from agent.session import default_tools
from agent.session_log import MAX_RESULT_CHARS, SessionLog, SessionLogError, read_session
from agent.tools.base import ToolResult, truncate
from training.envs import Base, EnvError, Environment, Limits
from training.run import grade_in, task_limits
from training.tasks import Task, TaskError, base_spec, git, load_tasks

EXCERPT_CHARS = 300


class ReplayError(ValueError):
    """A log that cannot be replayed: no header, no starting snapshot."""


# ---- the starting snapshot -------------------------------------------------------------------


def _attach_git(workspace: Path, dest: Path, commit: str, notes: list[str]) -> None:
    """Puts a .git at `commit` beside restored files (a mixed reset: the files stay as they are)."""
    clone = dest.parent / (dest.name + ".git-clone")
    try:
        git(dest.parent, "clone", "-q", "--no-checkout", str(workspace), str(clone))
        (clone / ".git").rename(dest / ".git")
        git(dest, "reset", "-q", commit)
    except (TaskError, OSError) as err:
        notes.append(f"no .git in the replay: {err}")
        shutil.rmtree(dest / ".git", ignore_errors=True)
    finally:
        shutil.rmtree(clone, ignore_errors=True)


def prepare_workspace(header: dict[str, Any], records: list[dict[str, Any]], dest: Path,
                      workspace_source: Path | None, notes: list[str]) -> dict[str, Any]:
    """Builds the starting snapshot at `dest`; returns where it came from."""
    if workspace_source is not None:
        if not Path(workspace_source).is_dir():
            raise ReplayError(f"--workspace-source {workspace_source} is not a directory")
        shutil.copytree(workspace_source, dest, symlinks=True, ignore=shutil.ignore_patterns(".composer"))
        return {"kind": "dir", "path": str(workspace_source)}
    workspace = Path(header["workspace"])
    commit = (header.get("git") or {}).get("commit")
    has_git = commit is not None and (workspace / ".git").exists()
    first = next((r.get("checkpoint_id") for r in records if r.get("type") == "checkpoint"), None)
    store_dir = workspace / ".composer" / "checkpoints"
    if first is not None and (store_dir / "refs" / f"{first}.json").is_file():
        dest.mkdir(parents=True)
        CheckpointStore(dest, store_dir=store_dir).restore(first, backup=False)
        if has_git:
            _attach_git(workspace, dest, commit, notes)
        return {"kind": "checkpoint", "checkpoint_id": first, "store": str(store_dir), "git_commit": commit}
    if has_git:
        git(dest.parent, "clone", "-q", "--no-checkout", str(workspace), str(dest))
        git(dest, "checkout", "-q", "--detach", commit)
        if (header.get("git") or {}).get("dirty"):
            notes.append("the workspace had uncommitted changes when the session started; the replay "
                         "starts from the commit without them")
        return {"kind": "git", "path": str(workspace), "commit": commit}
    if first is None and workspace.is_dir():
        shutil.copytree(workspace, dest, symlinks=True, ignore=shutil.ignore_patterns(".composer"))
        notes.append("the session never wrote and has no git commit: replayed on the workspace as it is now")
        return {"kind": "current", "path": str(workspace)}
    raise ReplayError(f"no starting snapshot for the log of {workspace}: checkpoint {first!r} is not in "
                      f"{store_dir} and there is no git commit ({commit!r}); pass --workspace-source DIR")


# ---- replaying -------------------------------------------------------------------------------


def _swap_paths(value: Any, old: list[str], new: str) -> Any:
    """`value` (JSON-like) with every string's `old` path prefixes replaced by `new`."""
    if isinstance(value, str):
        for prefix in old:
            value = value.replace(prefix, new)
        return value
    if isinstance(value, dict):
        return {k: _swap_paths(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_swap_paths(v, old, new) for v in value]
    return value


def _first_difference(logged: str, replayed: str) -> dict[str, Any]:
    a, b = logged.splitlines(), replayed.splitlines()
    line = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return {"line": line + 1, "logged": "\n".join(a[line:line + 3])[:EXCERPT_CHARS],
            "replayed": "\n".join(b[line:line + 3])[:EXCERPT_CHARS]}


class Replayer:
    """Re-runs a log's calls in an environment (its tools get the environment's sandbox limits)."""

    def __init__(self, workspace: str, env: Environment) -> None:
        self.logged_root, self.env, self.dest = workspace, env, env.root
        dest = env.root
        self.registry = default_tools()
        self.ctx = env.tool_context()
        self.store = CheckpointStore(dest)
        self.start = self.store.create("replay start")
        self.checkpoints: dict[str, str] = {}
        self.order: dict[str, int] = {}
        self.mismatches: list[dict[str, Any]] = []
        self.final_diffs: list[dict[str, Any]] = []
        self.calls = self.skipped = 0
        self._here = sorted({str(dest), str(dest.resolve())}, key=len, reverse=True)
        self._there = sorted({workspace, str(Path(workspace).resolve())}, key=len, reverse=True)

    def as_logged(self, result: ToolResult, args: Any) -> tuple[str, str | None]:
        """The result and error as the session log would hold them."""
        output = _swap_paths(result.output, self._here, self.logged_root)
        error = _swap_paths(result.error, self._here, self.logged_root) if result.error else None
        if len(output) > MAX_RESULT_CHARS:
            output, _ = truncate(output, MAX_RESULT_CHARS, "The log keeps the head of the result.")
        source = args.get("path") if isinstance(args, dict) and isinstance(args.get("path"), str) else None
        cleaned = redact_obj({"result": output, "error": error}, path=source)
        return cleaned["result"], cleaned["error"]

    async def run_one(self, record: dict[str, Any], lock: asyncio.Lock) -> None:
        self.calls += 1
        if record.get("status") in ("denied", "cancelled"):  # never ran, or stopped part way
            self.skipped += 1
            return
        name, args = record["name"], _swap_paths(record["arguments"], self._there, str(self.dest))
        tool = self.registry.get(name)
        writes = tool is not None and not tool.spec.read_only
        if writes:
            async with lock:  # one write at a time, in the order the model asked for them
                result = await self.registry.call(name, args, self.ctx)
        else:
            result = await self.registry.call(name, args, self.ctx)
        output, error = self.as_logged(result, args)
        base = {"call_id": record["call_id"], "name": name, "group": record.get("group")}
        if writes and (error is None) != (record.get("error") is None):
            self.mismatches.append(base | {"what": "status", "logged": record.get("error"), "replayed": error})
        elif not writes and (output, error) != (record.get("result"), record.get("error")):
            what = "result" if output != record.get("result") else "error"
            logged, replayed = (record.get("result") or "", output) if what == "result" else (record.get("error") or "", error or "")
            self.mismatches.append(base | {"what": what} | _first_difference(logged, replayed))

    async def run_group(self, records: list[dict[str, Any]]) -> None:
        """One parallel group, started in the order the model asked for the calls (the log
        holds them in the order they finished)."""
        records = sorted(records, key=lambda r: self.order.get(r.get("call_id"), math.inf))
        lock = asyncio.Lock()
        await asyncio.gather(*(self.run_one(r, lock) for r in records))

    async def check_diff(self, record: dict[str, Any]) -> None:
        base = record.get("base_checkpoint_id")
        ours = self.checkpoints.get(base) if base else self.start.id
        entry: dict[str, Any] = {"base_checkpoint_id": base, "logged_chars": len(record["diff"])}
        if ours is None:
            self.final_diffs.append(entry | {"matches": False, "why": f"no checkpoint record {base!r} before it"})
            return
        # a diff without a checkpoint is an environment's (training.run): compare in its format
        diff = await asyncio.to_thread(self.env.diff) if not base else self.store.unified_diff(ours)
        if record.get("truncated"):
            diff = diff[: LoopConfig().max_diff_chars]
        diff = redact(diff)
        entry |= {"replayed_chars": len(diff), "matches": diff == record["diff"]}
        if not entry["matches"]:
            entry["first_difference"] = _first_difference(record["diff"], diff)
        self.final_diffs.append(entry)

    async def replay(self, records: list[dict[str, Any]]) -> None:
        group: list[dict[str, Any]] = []
        for record in [*records[1:], {"type": "end"}]:
            kind = record.get("type")
            if group and (kind != "tool_call" or record.get("group") != group[0].get("group")):
                await self.run_group(group)
                group = []
            if kind == "tool_call":
                group.append(record)
            elif kind == "model_call":
                self.order = {c.get("id"): i for i, c in enumerate(record.get("tool_calls") or [])}
            elif kind == "checkpoint":
                self.checkpoints[record["checkpoint_id"]] = (await self.store.acreate(record.get("label", ""))).id
            elif kind == "restore":
                ours = self.checkpoints.get(record["checkpoint_id"])
                if ours is None:
                    self.mismatches.append({"what": "restore", "checkpoint_id": record["checkpoint_id"],
                                            "why": "no checkpoint record for it before the restore"})
                else:
                    await self.store.arestore(ours)
            elif kind == "final_diff":
                await self.check_diff(record)


def _snapshot_base(header: dict[str, Any], records: list[dict[str, Any]], dest: Path,
                   workspace_source: Path | None, notes: list[str]) -> tuple[Base, dict[str, Any]]:
    source = prepare_workspace(header, records, dest, workspace_source, notes)
    return Base.from_dir(dest, key=f"replay-{header.get('session_id', 'session')}"), source


async def replay_session(log_path: Path, *, workspace_source: Path | None = None, tests: str | None = None,
                         task: Task | None = None, write: bool = True, keep: Path | None = None,
                         timeout_s: float = 600, state_dir: str | None = None,
                         base_dir: str | None = None, allow_unsandboxed: bool = False) -> dict[str, Any]:
    """Replays the session of `log_path` in an environment and returns the report (see the
    module docstring); with `task`, grades the result and (when `write`) logs the grade.
    Below bubblewrap it refuses (UnsandboxedError) unless `allow_unsandboxed`."""
    started = time.perf_counter()
    records = read_session(log_path)
    if not records or records[0].get("type") != "session" or not isinstance(records[0].get("workspace"), str):
        raise ReplayError(f"{log_path} does not start with a session header with a workspace "
                          f"(first record type: {records[0].get('type') if records else None!r})")
    header, notes = records[0], []
    if keep is not None and Path(keep).exists():
        raise ReplayError(f"--keep {keep} exists already; give a new path")
    limits = task_limits(Limits(timeout_s=timeout_s))
    with tempfile.TemporaryDirectory(prefix="composer-replay-") as tmp:
        if task is not None:
            base = await Base.build(base_spec(task), base_dir, allow_unsandboxed=allow_unsandboxed)
            source = {"kind": "task", "instance_id": task.instance_id, "base": str(base.path)}
        else:
            base, source = _snapshot_base(header, records, Path(tmp) / "snapshot", workspace_source, notes)
        async with await Environment.create(base, limits=limits, state_dir=state_dir,
                                            allow_unsandboxed=allow_unsandboxed) as env:
            replayer = Replayer(header["workspace"], env)
            await replayer.replay(records)
            if not replayer.final_diffs:  # nothing logged: nothing may have changed
                left = await asyncio.to_thread(env.diff)
                replayer.final_diffs.append({"base_checkpoint_id": None, "logged_chars": 0, "replayed_chars": len(left),
                                             "matches": left == "", "why": "the log has no final_diff: expects no change"})
            outcome = await _run_tests(env, tests) if tests else None
            graded = await grade_in(env, task) if task is not None else None
            if keep is not None:
                await asyncio.to_thread(shutil.copytree, env.root, keep, symlinks=True,
                                        ignore=shutil.ignore_patterns(".composer"))
    if graded is not None and write:
        with SessionLog.reopen(log_path) as log:
            log.write("outcome", **(graded.outcome() | {"source": "replay"}))
    return {
        "log": str(log_path), "session_id": header.get("session_id"), "workspace": header["workspace"],
        "source": source, "matches": all(d["matches"] for d in replayer.final_diffs),
        "final_diffs": replayer.final_diffs, "calls": replayer.calls, "skipped": replayer.skipped,
        "mismatches": replayer.mismatches, "tests": outcome, "grade": graded.to_json() if graded else None,
        "notes": notes, "kept": str(keep) if keep is not None else None,
        "seconds": round(time.perf_counter() - started, 3),
    }


async def _run_tests(env: Environment, command: str) -> dict[str, Any]:
    run = await env.run(command)
    return {"command": command, "exit_code": run.exit_code, "passed": run.exit_code == 0,
            "timed_out": run.timed_out, "output_tail": run.output[-2000:]}


def pick_task(path: Path, instance: str | None, header: dict[str, Any]) -> Task:
    """The task to grade against: `instance`, else the log header's task_id, else the file's
    only task."""
    tasks = load_tasks(path)
    wanted = instance or header.get("task_id")
    if wanted is None:
        if len(tasks) != 1:
            raise ReplayError(f"{path} has {len(tasks)} tasks and the log names none: pass --instance ID")
        return tasks[0]
    found = [t for t in tasks if t.instance_id == wanted]
    if not found:
        raise ReplayError(f"no task {wanted!r} in {path}")
    return found[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="the session log (JSONL)")
    parser.add_argument("--workspace-source", type=Path, help="the starting snapshot to copy")
    parser.add_argument("--tests", help="a shell command run in the sandbox on the replayed workspace")
    parser.add_argument("--task", type=Path, help="a tasks .jsonl file: start from the task's workspace, grade with its tests")
    parser.add_argument("--instance", help="the task's instance id (default: the log header's task_id)")
    parser.add_argument("--no-write", action="store_true", help="do not append the grade to the log")
    parser.add_argument("--keep", type=Path, help="copy the replayed workspace to this new directory")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for each command (--tests, the grading tests)")
    parser.add_argument("--allow-unsandboxed", action="store_true",
                        help="replay even where the sandbox is weaker than bubblewrap (agent/isolation.py)")
    args = parser.parse_args(argv)
    try:
        task = None
        if args.task is not None:
            task = pick_task(args.task, args.instance, next(iter(read_session(args.log, limit=1)), {}))
        report = asyncio.run(replay_session(args.log, workspace_source=args.workspace_source, tests=args.tests,
                                            task=task, write=not args.no_write, keep=args.keep, timeout_s=args.timeout,
                                            allow_unsandboxed=args.allow_unsandboxed))
    except (ReplayError, TaskError, EnvError, SessionLogError, UnsandboxedError, OSError) as err:
        print(json.dumps({"error": str(err)}))
        return 2
    print(json.dumps(report, indent=2))
    return 0 if report["matches"] else 1


if __name__ == "__main__":
    sys.exit(main())
