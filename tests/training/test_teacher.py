"""The stronger-model warm start (training/teacher.py): a scripted OpenAI-compatible endpoint
(tests/server/scripted_model.py, reached through the real EndpointPolicy and HTTP client) attempts
a task in the harness; a resolved attempt becomes samples in the policy's own tokens (prompts the
harness built with its tokenizer, the teacher's replies rendered as it writes them), an attempt
that does not resolve gives none."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from add_task import add_task_line

from agent.session_log import read_session
from model.toolcalls import ToolCall
from training.config import PRESETS, replace_in
from training.demos import rendered_ids
from training.rl import demonstrations
from training.tasks import load_tasks
from training.teacher import endpoint_demonstrations

sys.path.insert(0, str(Path(__file__).parents[1] / "server"))
from scripted_model import ScriptedModel  # tests/server is no package: on sys.path above

TEST_RUN = "python -m pytest -q -p no:cacheprovider"
SCRIPT = [[
    {"text": "Reading it.", "tool_calls": [{"name": "read_file", "arguments": {"path": "pkg/__init__.py"}}]},
    {"text": "", "tool_calls": [{"name": "edit_file", "arguments": {
        "path": "pkg/__init__.py", "old_string": "    return a - b", "new_string": "    return a + b"}}]},
    {"text": "", "tool_calls": [{"name": "run_terminal", "arguments": {"command": TEST_RUN}}]},
    {"text": "`add` subtracted; it adds now and the tests pass."},
]]


def the_task(tmp_path: Path):
    line = add_task_line(tmp_path, problem_statement="add(2, 3) is -1 (pkg/__init__.py)")
    (tmp_path / "tasks.jsonl").write_text(json.dumps(line) + "\n")
    return load_tasks(tmp_path / "tasks.jsonl")


async def test_a_resolved_attempt_trains_as_the_policy_would_have_written_it(real_tokenizer, tmp_path):
    tasks = the_task(tmp_path)
    with ScriptedModel(SCRIPT) as teacher:
        samples = await endpoint_demonstrations(tasks, real_tokenizer, tmp_path / "demos", teacher.url)
    assert len(samples) == 1
    [sample] = samples
    assert sample.off_policy and sample.reward >= 1.0 and sample.weight_version == -1
    assert all(math.isnan(x) for x in sample.behaviour_logprobs)
    trained = [t for t, m in zip(sample.tokens, sample.mask, strict=True) if m]
    expected = [i for reply in SCRIPT[0] for i in rendered_ids(
        real_tokenizer, reply["text"], [ToolCall(c["name"], c["arguments"]) for c in reply.get("tool_calls", [])])]
    assert trained == expected
    # the teacher saw the conversation as chat messages with the harness's tools
    assert {t["function"]["name"] for t in teacher.requests[0]["tools"]} >= {"read_file", "edit_file", "run_terminal"}
    assert teacher.requests[0]["messages"][-1]["role"] == "user"
    [log] = sorted((tmp_path / "demos" / "sessions").rglob("*.jsonl"))
    records = read_session(log)
    assert records[0]["model"]["id"] == f"teacher:{teacher.url}"
    calls = [r for r in records if r["type"] == "model_call"]
    assert all(not r.get("text_only") for r in calls)
    # the sample starts with the prompt the harness built in the policy's tokens
    prompt = calls[0]["prompt_token_ids"]
    assert calls[0]["prefix_len"] == 0 and sample.tokens[:len(prompt)] == prompt
    assert "add(2, 3) is -1" in real_tokenizer.decode(prompt)


async def test_a_teacher_that_does_not_fix_the_bug_gives_a_clear_error(real_tokenizer, tmp_path):
    tasks = the_task(tmp_path)
    with ScriptedModel([[{"text": "Looks fine to me."}]]) as teacher, \
            pytest.raises(ValueError, match=r"no attempt by .* of 1 tasks resolved"):
        await endpoint_demonstrations(tasks, real_tokenizer, tmp_path / "demos", teacher.url)


def test_training_rl_takes_its_warm_start_from_the_endpoint_once_then_from_the_run_directory(real_tokenizer, tmp_path):
    the_task(tmp_path)
    config = replace_in(PRESETS["cpu"](), rollout={"tasks": str(tmp_path / "tasks.jsonl")},
                        train={"warm_start": "endpoint", "warm_start_tasks": 1})
    run = SimpleNamespace(config=config, tokenizer=real_tokenizer, dir=tmp_path / "run")
    with pytest.raises(ValueError, match=r"needs --train.endpoint URL"):
        demonstrations(run)
    with ScriptedModel(SCRIPT) as teacher:
        run.config = replace_in(config, train={"endpoint": teacher.url})
        first = demonstrations(run)
    assert len(first) == 1 and (run.dir / "demos" / "demonstrations.jsonl").is_file()
    again = demonstrations(run)  # a resumed run: the teacher is gone, the demonstrations are kept
    assert [s.tokens for s in again] == [s.tokens for s in first]
