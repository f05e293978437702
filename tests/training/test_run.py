"""Tasks on environments (training/run.py): a scripted agent runs in a real sandboxed
environment through the real harness, is graded per test with the task's hidden tests applied
in a fresh view, and the grade lands in its session log; changes to the tests' files are left out
of grading; infrastructure failures (the policy raising, the harness's clock, a base that cannot
be built) come back masked, never as a wrong answer; a task run's log is replayed and re-graded.

Run: .venv/bin/python -m pytest tests/training/test_run.py
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from add_task import add_task_line
from scripted_policy import ScriptedPolicy, calls

import agent.sandbox
from agent.isolation import UnsandboxedError
from agent.policy import Reply
from agent.sandbox import sandbox_support
from agent.session_log import read_session, validate_record
from training.envs import Scheduler
from training.replay import replay_session
from training.rewards import score
from training.run import RunConfig, run_task, run_tasks
from training.run import main as run_main
from training.tasks import Task, load_tasks

HIDDEN = ("diff --git a/test_hidden.py b/test_hidden.py\nnew file mode 100644\n--- /dev/null\n+++ b/test_hidden.py\n"
          "@@ -0,0 +1,4 @@\n+from pkg import add\n+\n+def test_add_hidden():\n+    assert add(2, 3) == 5\n")
ROOT = Path(__file__).resolve().parents[2]


FIX = [calls(("edit_file", {"path": "pkg/__init__.py", "old_string": "a - b", "new_string": "a + b"})),
       calls(("run_terminal", {"command": "python -m pytest -q -p no:cacheprovider test_pkg.py"})),
       Reply("Fixed add in pkg/__init__.py; the tests pass.", [], "stop")]


def make_tasks(tmp_path: Path) -> list[Task]:
    lines = [add_task_line(tmp_path, instance_id="visible"),
             add_task_line(tmp_path, instance_id="hidden", FAIL_TO_PASS=["test_hidden.py::test_add_hidden"],
                           test_patch=HIDDEN),
             add_task_line(tmp_path, instance_id="broken-setup", setup=["exit 3"])]
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return load_tasks(path)


@pytest.fixture
def setting(tmp_path) -> tuple[list[Task], RunConfig]:
    config = RunConfig(log_dir=tmp_path / "logs", session={"repo_map_tokens": 0}, state_dir=str(tmp_path / "state"),
                       base_dir=str(tmp_path / "bases"))
    return make_tasks(tmp_path), config


def logged(run) -> list[dict]:
    records = read_session(run.log_path)
    for record in records:
        validate_record(record)
    return records


async def test_a_fix_is_resolved_graded_per_test_and_logged(setting):
    (visible, _, _), config = setting
    async with Scheduler(max_concurrency=2, state_dir=config.state_dir, base_dir=config.base_dir) as sched:
        good, idle = await asyncio.gather(
            run_task(visible, ScriptedPolicy(FIX), config=config, scheduler=sched),
            run_task(visible, lambda: ScriptedPolicy([Reply("I looked; all tests pass.", [], "stop")]),
                     config=config, scheduler=sched))
    assert good.grade.resolved is True and not good.grade.masked
    assert good.grade.fail_to_pass == {"test_pkg.py::test_add": "passed"}
    assert good.grade.pass_to_pass == {"test_pkg.py::test_zero": "passed"}
    assert idle.grade.resolved is False and idle.grade.fail_to_pass == {"test_pkg.py::test_add": "failed"}
    records = logged(good)
    assert records[0]["client"] == "rollout" and records[0]["task_id"] == "visible"
    (diff,) = [r for r in records if r["type"] == "final_diff"]
    assert "+    return a + b" in diff["diff"] and diff["files"] == ["pkg/__init__.py"]
    grade = [r for r in records if r["type"] == "outcome"][-1]
    assert grade["signal"] == "task_resolved" and grade["value"] is True and grade["reward"] == 1.0
    assert grade["detail"]["fail_to_pass"] == {"test_pkg.py::test_add": "passed"} and grade["masked"] is False
    assert any(r.get("signal") == "tests_passed_after_edit" and r["value"] for r in records)
    right, wrong = score(records), score(logged(idle))  # the grade is read back from each log
    assert right.reward > wrong.reward and right.claims.unsupported == ()
    assert [c.kind for c in wrong.claims.unsupported] == ["tests_pass"] and wrong.reward < 0
    assert good.stop_reason == "end_turn" and good.tool_calls == 2 and set(good.timings) >= {"setup", "run", "grade"}


async def test_hidden_tests_are_applied_at_grading_and_edits_to_them_left_out(setting):
    (_, hidden, _), config = setting
    peek = [calls(("read_file", {"path": "test_hidden.py"})), *FIX]
    cheat = [calls(("write_file", {"path": "test_hidden.py", "content": "def test_add_hidden():\n    pass\n"})),
             Reply("All tests pass.", [], "stop")]
    fixed = await run_task(hidden, ScriptedPolicy(peek), config=config)
    cheated = await run_task(hidden, ScriptedPolicy(cheat), config=config)
    assert fixed.grade.resolved is True and fixed.grade.fail_to_pass == {"test_hidden.py::test_add_hidden": "passed"}
    read = next(r for r in logged(fixed) if r["type"] == "tool_call" and r["name"] == "read_file")
    assert read["error"] is not None  # the hidden test is not in the agent's workspace
    assert "test_hidden.py" in cheated.diff  # the agent wrote it; grading used the task's own
    assert cheated.grade.resolved is False and not cheated.grade.masked
    assert cheated.grade.fail_to_pass == {"test_hidden.py::test_add_hidden": "failed"}


async def test_infrastructure_failures_are_masked_not_wrong_answers(setting):
    (visible, _, broken), config = setting
    seen = []
    fixed, unbuilt = await run_tasks([visible, broken], lambda: ScriptedPolicy(FIX), config=config,
                                     on_done=lambda run: seen.append(run.task_id))
    assert sorted(seen) == ["broken-setup", "visible"]  # one policy per run, from the factory
    assert fixed.grade.resolved is True
    assert unbuilt.grade.masked and unbuilt.grade.infra_stage == "setup" and unbuilt.log_path is None
    assert unbuilt.grade.resolved is None and "exit" in unbuilt.grade.infra
    crashed = await run_task(visible, ScriptedPolicy([], fail=True), config=config)
    assert crashed.grade.masked and crashed.grade.resolved is None and crashed.grade.infra_stage == "run"
    assert "ConnectionError" in crashed.grade.infra
    outcome = [r for r in logged(crashed) if r["type"] == "outcome"][-1]
    assert outcome["masked"] is True and outcome["value"] is None and outcome["reward"] is None
    assert score(read_session(crashed.log_path)).status == "masked"
    slow = await run_task(visible, ScriptedPolicy([], sleep_s=60), config=dataclasses.replace(config, timeout_s=1))
    assert slow.grade.masked and slow.grade.infra_stage == "timeout" and slow.log_path.is_file()
    assert any(r["type"] == "cancelled" for r in logged(slow))


async def test_a_task_runs_log_is_replayed_and_regraded(setting, tmp_path):
    (visible, _, _), config = setting
    run = await run_task(visible, ScriptedPolicy(FIX), config=config)
    report = await replay_session(run.log_path, task=visible, state_dir=config.state_dir, base_dir=config.base_dir)
    assert report["source"]["kind"] == "task" and report["matches"] is True, report
    assert report["grade"]["resolved"] is True and report["mismatches"] == []
    regraded = [r for r in logged(run) if r["type"] == "outcome" and r["signal"] == "task_resolved"]
    assert [r["source"] for r in regraded] == ["grader", "replay"]
    # the command line: the task picked by the log's header among several, --no-write leaves the log
    size = run.log_path.stat().st_size
    env = {**os.environ, "COMPOSER_ENVS_DIR": config.state_dir, "COMPOSER_BASES_DIR": config.base_dir}
    done = subprocess.run([sys.executable, "-m", "training.replay", str(run.log_path), "--task",
                           str(tmp_path / "tasks.jsonl"), "--no-write"], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["grade"]["fail_to_pass"] == {"test_pkg.py::test_add": "passed"}
    assert run.log_path.stat().st_size == size
    wrong = subprocess.run([sys.executable, "-m", "training.replay", str(run.log_path), "--task",
                            str(tmp_path / "tasks.jsonl"), "--instance", "nope"], capture_output=True, text=True,
                           cwd=ROOT, env=env, timeout=120)
    assert wrong.returncode == 2 and "no task 'nope'" in json.loads(wrong.stdout)["error"]


async def test_below_bubblewrap_runs_are_refused_unless_opted_in(setting, monkeypatch, tmp_path):
    (visible, _, _), config = setting
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # no user opt-in
    weak = dataclasses.replace(sandbox_support(), isolation="none", available=("none",))
    monkeypatch.setattr(agent.sandbox, "_support", weak)
    with pytest.raises(UnsandboxedError, match="--allow-unsandboxed"):
        await run_task(visible, ScriptedPolicy(FIX), config=config)
    assert not (tmp_path / "logs").exists()  # refused before any session: not a grade
    run = await run_task(visible, ScriptedPolicy(FIX), config=dataclasses.replace(config, allow_unsandboxed=True))
    assert run.grade.resolved is True and run.isolation.endswith("+none")
    with pytest.raises(UnsandboxedError):
        await replay_session(run.log_path, task=visible, state_dir=config.state_dir, base_dir=config.base_dir)
    report = await replay_session(run.log_path, task=visible, state_dir=config.state_dir, base_dir=config.base_dir,
                                  allow_unsandboxed=True, write=False)
    assert report["matches"] is True and report["grade"]["resolved"] is True


def test_run_command_line_refuses_unknown_instances(setting, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        run_main([str(tmp_path / "tasks.jsonl"), "--instance", "visible", "--instance", "nope"])
    assert exit_.value.code == 2 and "no task ['nope']" in capsys.readouterr().err
