"""`python -m training.data build`: session logs -> the trajectory dataset. Real logs written by
the agent loop (a scripted engine stands in for the model), then filters, held-out tasks, off-
policy marking, outcome records, version 1 logs and the report."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from agent.loop import Agent, LoopConfig
from agent.policy import EnginePolicy
from agent.session_log import SessionLog, read_session
from agent.tools.base import ToolContext, ToolRegistry
from agent.workspace import Workspace
from training.data import Filters, build, heldout_tasks, main, session_reward
from training.rewards import score
from training.tasks import TaskGrade

sys.path.insert(0, str(Path(__file__).parents[1] / "agent"))
from scripted_engine import Echo, ScriptedEngine, TextPolicy, echo_call  # tests/agent is no package


def session(root: Path, logs: Path, tok, *, task_id: str | None = None, outcomes=(), weight_version: int = 3,
            policy=None) -> Path:
    registry = ToolRegistry([Echo()])
    engine = ScriptedEngine(tok, [echo_call(tok, "a\r\nb"), [*tok.encode("Done."), tok.eos_token_id]],
                            weight_version=weight_version)
    log = SessionLog.open(root, model={"id": "composer-mini"}, sampler={}, tools=registry.openai_tools(),
                          system_prompt="sys", log_dir=logs, tokenizer=tok, task_id=task_id)
    agent = Agent(policy or EnginePolicy(engine), registry, ToolContext(Workspace(root)), system="sys", log=log,
                  config=LoopConfig())
    asyncio.run(agent.run_turn("go"))
    for fields in outcomes:
        log.write("outcome", **fields)
    log.close()
    return log.path


def graded(task_id: str, resolved: bool | None, infra: str | None = None) -> dict:
    return TaskGrade(instance_id=task_id, resolved=resolved, fail_to_pass={"test_x": "passed" if resolved else "failed"},
                     infra=infra, infra_stage="run" if infra else None).outcome()


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def logs(tmp_path, real_tokenizer) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    logs = tmp_path / "logs"
    # the outcome records their writers write: a grader's (training/run.py), an editor's (agent/outcomes.py)
    session(root, logs, real_tokenizer, task_id="t-train", outcomes=[graded("t-train", True)])
    session(root, logs, real_tokenizer, task_id="t-heldout", outcomes=[graded("t-heldout", False)])
    session(root, logs, real_tokenizer, weight_version=4, outcomes=[
        {"signal": "edit_accepted", "value": True, "reward": 1.0, "source": "editor"},
        {"signal": "turn_undone", "value": True, "reward": -1.0, "source": "editor"},
        {"signal": "edit_kept", "value": 1.0, "reward": 1.0, "source": "editor"}])
    session(root, logs, real_tokenizer, policy=TextPolicy())
    v1 = logs / "old" / "v1.jsonl"
    v1.parent.mkdir()
    v1.write_text("\n".join(json.dumps(r) for r in [
        {"type": "session", "version": 1, "session_id": "v1", "seq": 0, "time": 1.0, "workspace": str(root),
         "model": {"id": "composer-mini"}, "sampler": {}, "tools": [], "system_prompt_hash": "sha256:" + "0" * 64},
        {"type": "model_call", "version": 1, "session_id": "v1", "seq": 1, "time": 2.0, "prompt_token_ids": [1, 2],
         "completion_token_ids": [3], "logprobs": [-1.0], "text": "x", "finish_reason": "stop"},
    ]) + "\n")
    return logs


def test_build_writes_on_policy_segments_and_says_what_it_dropped(logs, tmp_path, real_tokenizer):
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "bench-heldout.jsonl").write_text(json.dumps({"instance_id": "t-heldout"}) + "\n")
    manifest = build(logs, tmp_path / "ds", Filters(heldout=heldout_tasks(suites)))
    kept = lines(tmp_path / "ds" / "trajectories.jsonl")
    assert sorted(line["task_id"] or "" for line in kept) == ["", "t-train"]
    line = next(line for line in kept if line["task_id"] == "t-train")
    # the rollouts' combined reward (training/rewards.py): resolved, plus its efficiency terms
    assert line["reward_source"] == "task" and line["reward"] == pytest.approx(score(read_session(Path(line["log"]))).reward)
    assert 1.0 < line["reward"] < 1.3 and [o["signal"] for o in line["outcomes"]] == ["task_resolved"]
    editor = next(line for line in kept if line["task_id"] is None)
    assert editor["reward_source"] == "editor" and editor["reward"] == pytest.approx(1 / 3)  # (1 - 1 + 1) / 3
    assert len(line["token_ids"]) == len(line["loss_mask"]) == len(line["logprobs"]) == len(line["routed_experts"])
    first, second = line["calls"]
    assert first["prompt_start"] == 0 and second["prompt_start"] == first["end"] == second["prompt_start"]
    assert line["weight_versions"] == [3] and line["off_policy"] is None and line["start_reason"] is None
    assert all(line["loss_mask"][i] == 0 for i in range(second["prompt_start"], second["completion_start"]))
    assert sum(line["loss_mask"]) == (first["end"] - first["completion_start"]) + (second["end"] - second["completion_start"])
    assert lines(tmp_path / "ds" / "off_policy.jsonl") == []
    reasons = manifest["dropped_by_reason"]
    assert reasons == {"held-out benchmark task": 1, "schema version 1": 1}  # the text-only session is kept ...
    [talk] = lines(tmp_path / "ds" / "conversations.jsonl")  # ... as its conversation (training/conversations.py)
    assert [m["role"] for m in talk["messages"]] == ["system", "user", "assistant"] and talk["reward"] is None
    assert manifest["counts"]["on_policy_segments"] == 2 and manifest["counts"]["logs"] == 5


def test_a_session_without_a_verdict_or_with_a_failed_grader_has_no_reward(logs, tmp_path, real_tokenizer):
    root = tmp_path / "repo"
    failed = session(root, tmp_path / "more", real_tokenizer, task_id="t", outcomes=[graded("t", None, "sandbox died")])
    assert session_reward(read_session(failed)) == (None, "masked")  # never a zero
    wrong = session(root, tmp_path / "more", real_tokenizer, task_id="t", outcomes=[graded("t", False)])
    assert session_reward(read_session(wrong)) == (0.0, "task")
    silent = session(root, tmp_path / "more", real_tokenizer)
    assert session_reward(read_session(silent)) == (None, None)


def test_filters_and_off_policy_marking(logs, tmp_path):
    build(logs, tmp_path / "a", Filters(outcomes=[("task_resolved", "true")]))
    assert [line["task_id"] for line in lines(tmp_path / "a" / "trajectories.jsonl")] == ["t-train"]
    manifest = build(logs, tmp_path / "b", Filters(weight_versions={4}))
    assert [line["weight_versions"] for line in lines(tmp_path / "b" / "trajectories.jsonl")] == [[4]]
    # two sessions of versions 3, and the text-only one's conversation: versions select the policy's own
    assert manifest["dropped_by_reason"]["weight version not selected"] == 3
    assert lines(tmp_path / "b" / "conversations.jsonl") == []
    build(logs, tmp_path / "c", Filters(min_weight_version=4, policy_model="composer-next"))
    assert lines(tmp_path / "c" / "trajectories.jsonl") == []  # another model's: not mixed in ...
    [off] = lines(tmp_path / "c" / "off_policy.jsonl")  # ... but kept apart, saying why
    assert off["off_policy"] == "model composer-mini, not composer-next" and off["weight_versions"] == [4]
    build(logs, tmp_path / "d", Filters(workspace="/nowhere"))
    assert lines(tmp_path / "d" / "trajectories.jsonl") == []
    manifest = build(logs, tmp_path / "e", Filters(model="composer-next"))
    assert lines(tmp_path / "e" / "trajectories.jsonl") == lines(tmp_path / "e" / "off_policy.jsonl") == []
    assert manifest["dropped_by_reason"]["another model"] == 5


def test_the_command_line_reports_and_refuses_to_overwrite(logs, tmp_path):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["build", str(logs), "--out", str(tmp_path / "ds"), "--suites", str(tmp_path / "none")]) == 0
    assert "on-policy segments" in out.getvalue() and "dropped 1: schema version 1" in out.getvalue()
    assert "rewards: 2 from a task's grade, 1 from the editor's signals, 1 without one" in out.getvalue()
    assert "1 text-only conversations" in out.getvalue()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["build", str(logs), "--out", str(tmp_path / "ds")]) == 2
    assert "not empty" in err.getvalue()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".ds")) == []  # no temporary left
