"""Gold-patch demonstrations (training/demos.py): acted out in the real harness on a task,
resolved by its hidden tests, and read back as off-policy samples whose trained tokens are
exactly the scripted replies in the model's format."""

from __future__ import annotations

import json
import math

from add_task import add_task_line

from agent.session_log import read_session
from training.demos import ScriptPolicy, gold_demonstrations, gold_turns
from training.tasks import load_tasks


async def test_gold_patches_become_resolved_token_exact_demonstrations(real_tokenizer, tmp_path):
    lines = [add_task_line(tmp_path, instance_id=f"dir-{i}") for i in range(2)]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    tasks = load_tasks(tmp_path / "tasks.jsonl")
    samples = await gold_demonstrations(tasks, real_tokenizer, tmp_path / "demos")
    logs = sorted((tmp_path / "demos" / "sessions").rglob("*.jsonl"))
    assert len(logs) == 2 and len(samples) == 2
    for sample in samples:
        assert sample.off_policy and sample.reward >= 1.0 and sample.weight_version == -1
        assert all(math.isnan(x) for x in sample.behaviour_logprobs)
        assert sample.stats["turns"] == 4 and sample.stats["tool_calls"] >= 3
    expected = []
    for log in logs:
        records = read_session(log)
        task = next(t for t in tasks if t.instance_id == records[0]["task_id"])
        assert next(r for r in records if r["type"] == "outcome")["value"] in (1, 1.0, True)
        script = ScriptPolicy(real_tokenizer, gold_turns(task))
        expected.append([i for content, calls in gold_turns(task) for i in script.completion_ids(content, calls)])
    trained = [[t for t, m in zip(s.tokens, s.mask, strict=True) if m] for s in samples]
    assert sorted(trained) == sorted(expected)
    assert real_tokenizer.decode(expected[0]).count("<tool_call>") >= 3
