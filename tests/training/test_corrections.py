"""The person's corrections as training data (training/corrections.py, training/logged.py): a
session in the real loop, whose edit the person changed before accepting, becomes a dataset line
(`python -m training.data build`) and a Sample whose trained tokens are exactly the reply with
the corrected call, after the model call's own context; logged lines train off-policy."""

from __future__ import annotations

import json
import math

from agent.loop import Agent
from agent.permissions import PermissionPolicy
from agent.review import Reviewed
from agent.session_log import SessionLog, read_session
from agent.tools.base import ToolContext, ToolRegistry
from agent.tools.files import file_tools
from agent.workspace import Workspace
from model.toolcalls import ToolCall, parse_tool_calls
from training.data import Filters, build
from training.demos import ScriptPolicy
from training.logged import logged_samples, take
from training.toy import byte_tokenizer

BASE = "def area(w, h):\n    return w + h\n"
EDIT = ToolCall("edit_file", {"path": "shape.py", "old_string": "return w + h", "new_string": "return w * h"})


async def _corrected_session(tmp_path, calls=(EDIT,)):
    """A session whose one reply makes `calls`, each edit revised by the person (`abs(...)`)."""
    tokenizer, root = byte_tokenizer(), tmp_path / "ws"
    root.mkdir()
    (root / "shape.py").write_text(BASE)
    (root / "box.py").write_text(BASE)

    async def person(tool_call, decision):
        return Reviewed("allow_once", BASE.replace("w + h", "abs(w * h)"))

    policy = ScriptPolicy(tokenizer, [("Fixing area.", list(calls)), ("Done.", [])], model_id="composer-mini")
    log = SessionLog.open(root, model={"id": "composer-mini"}, sampler={}, tools=[], system_prompt="sys",
                          log_dir=tmp_path / "logs", tokenizer=tokenizer)
    agent = Agent(policy, ToolRegistry(file_tools()), ToolContext(Workspace(root)), system="sys",
                  permissions=PermissionPolicy(default="ask"), ask=person, log=log)
    await agent.run_turn("fix area")
    log.close()
    return tokenizer, root


async def test_a_corrected_edit_becomes_a_demonstration_of_the_person_s_version(tmp_path):
    tokenizer, root = await _corrected_session(tmp_path)
    assert (root / "shape.py").read_text() == BASE.replace("w + h", "abs(w * h)")
    manifest = build(tmp_path / "logs", tmp_path / "data", Filters())
    assert manifest["counts"]["corrections"] == 1
    [line] = [json.loads(t) for t in (tmp_path / "data" / "corrections.jsonl").read_text().splitlines()]
    assert line["correction"]["text"] == "Fixing area."
    assert line["correction"]["tool_calls"] == [{"name": "edit_file", "arguments": {
        "path": "shape.py", "old_string": "    return w + h", "new_string": "    return abs(w * h)"}}]
    [log_path] = (tmp_path / "logs").rglob("*.jsonl")
    first = next(r for r in read_session(log_path) if r["type"] == "model_call")
    context = line["token_ids"]
    assert context == first["prompt_token_ids"]  # the model call's prompt, as logged

    samples = logged_samples([tmp_path / "data"], tokenizer)
    [fix] = [s for s in samples if s.stats.get("correction")]
    trained = [t for t, m in zip(fix.tokens, fix.mask) if m]
    assert fix.tokens[:len(context)] == context and not any(fix.mask[:len(context)])
    assert trained[-1] == tokenizer.reply_end_id  # the reply ends as the model ends it
    reply = parse_tool_calls(tokenizer.decode(trained[:-1]))
    assert reply.content.strip() == "Fixing area." and [(c.name, c.arguments) for c in reply.tool_calls] == [("edit_file", line["correction"]["tool_calls"][0]["arguments"])]
    assert fix.off_policy and fix.reward == 1.0 and all(math.isnan(lp) for lp in fix.behaviour_logprobs)


def test_logged_lines_train_off_policy_in_a_fixed_order(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "manifest.json").write_text("{}")
    lines = [{"token_ids": [1, 2, 3], "loss_mask": [0, 1, 1], "logprobs": [None, -0.5, -0.1], "reward": reward}
             for reward in (0.5, None)]
    (data / "trajectories.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    samples = logged_samples([data], byte_tokenizer())
    assert [s.mask for s in samples] == [[False, True, True]] * 2
    assert all(s.off_policy and s.weight_version == -1 for s in samples)  # never in the importance ratio
    assert samples[0].reward == 0.5 and math.isnan(samples[1].reward)  # no reward: masked, never zero
    assert take(samples, 0, 1) == [samples[0]] and take(samples, 1, 1) == [samples[1]] and take(samples, 2, 1) == [samples[0]]
    assert len(take(samples, 5, 3)) == 2  # never more than there are


async def test_a_reply_with_two_corrected_edits_is_one_demonstration_with_both(tmp_path):
    box = ToolCall("edit_file", {"path": "box.py", "old_string": "return w + h", "new_string": "return w - h"})
    await _corrected_session(tmp_path, (EDIT, box))
    build(tmp_path / "logs", tmp_path / "data", Filters())
    [line] = [json.loads(t) for t in (tmp_path / "data" / "corrections.jsonl").read_text().splitlines()]
    assert [c["arguments"]["new_string"] for c in line["correction"]["tool_calls"]] == ["    return abs(w * h)"] * 2


async def test_corrections_follow_the_dataset_s_model_and_version_filters(tmp_path):
    await _corrected_session(tmp_path)
    for name, filters in (("other", Filters(policy_model="another-model")), ("versions", Filters(min_weight_version=5))):
        manifest = build(tmp_path / "logs", tmp_path / name, filters)
        assert manifest["counts"].get("corrections", 0) == 0, name
