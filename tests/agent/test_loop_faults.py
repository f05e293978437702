"""The agent loop under a misbehaving model or a failing store, with a scripted policy (a test
double for the model): a flood of calls or of malformed calls costs a bounded amount each step,
context fitting stays linear in a long conversation, and a turn that fails mid-way leaves the
conversation whole (every call answered) and logs the error. tests/server/test_faults.py runs
the same faults through the real server."""

from __future__ import annotations

import pytest

from agent.checkpoints import CheckpointError
from agent.loop import Agent, LoopConfig
from agent.policy import Reply
from agent.session_log import SessionLog, read_session
from agent.tools.base import ToolContext, ToolRegistry
from agent.tools.files import file_tools
from agent.workspace import Workspace
from model.toolcalls import ToolCall, ToolCallError


class Policy:
    """Replies from a script (then "done"); records the messages of every call and counts how
    often the whole conversation was counted."""

    model_id = "scripted"

    def __init__(self, replies: list[Reply], context_window: int = 100_000) -> None:
        self.replies, self.context_window = list(replies), context_window
        self.seen: list[list[dict]] = []
        self.whole_counts = 0

    def count_tokens(self, messages, tools) -> int:
        self.whole_counts += len(messages) > 1
        return sum(len(str(m.get("content") or "")) for m in messages) // 4

    async def complete(self, messages, tools, *, max_tokens, temperature=0.0, on_text=None) -> Reply:
        self.seen.append([dict(m) for m in messages])
        return self.replies.pop(0) if self.replies else Reply("done", [], "stop")


def agent_with(tmp_path, replies, **kwargs) -> tuple[Agent, Policy]:
    policy = Policy(replies, kwargs.pop("context_window", 100_000))
    agent = Agent(policy, ToolRegistry(file_tools()), ToolContext(Workspace(tmp_path)), system="sys", **kwargs)
    return agent, policy


async def test_calls_past_the_limit_of_a_reply_are_dropped_and_counted_to_the_model(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    flood = Reply("", [ToolCall("read_file", {"path": "a.py"}) for _ in range(100)], "tool_calls")
    agent, policy = agent_with(tmp_path, [flood], config=LoopConfig(max_calls_per_step=64))
    result = await agent.run_turn("go")
    assert result.stop_reason == "end_turn" and result.tool_calls == 64
    shown = policy.seen[1]
    (asked,) = [m for m in shown if m.get("tool_calls")]
    after = shown[shown.index(asked) + 1:]
    assert len(asked["tool_calls"]) == 64
    assert [m["role"] for m in after] == ["tool"] * 64 + ["user"], "every result right after the call, then the note"
    assert "36 tool call(s) past the first 64" in after[-1]["content"]


async def test_a_flood_of_malformed_calls_is_one_bounded_note_a_step_within_the_step_budget(tmp_path):
    errors = [ToolCallError(i, f"tool call {i + 1} is not valid JSON: {'x' * 5000}", "{") for i in range(1000)]
    flood = Reply("", [], "tool_calls", tool_call_errors=errors)
    agent, policy = agent_with(tmp_path, [flood] * 10, config=LoopConfig(max_steps=4, stop_repeats=0))
    result = await agent.run_turn("go")
    assert result.stop_reason == "max_turn_requests" and len(policy.seen) == 4
    notes = [m["content"] for m in policy.seen[-1] if str(m.get("content")).startswith("[harness]")]
    assert len(notes) == 3 and all(len(n) < 2500 for n in notes)
    assert "1000 tool call(s) could not be read" in notes[0] and "(and 995 more)" in notes[0]
    # The same flood a third time is a loop, and the turn stops there (agent/repetition.py).
    agent, policy = agent_with(tmp_path, [flood] * 10, config=LoopConfig(max_steps=25))
    assert (await agent.run_turn("go")).stop_reason == "max_turn_requests" and len(policy.seen) == 3


async def test_fitting_a_long_conversation_counts_it_once_a_step(tmp_path):
    agent, policy = agent_with(tmp_path, [], context_window=2_000)
    agent.messages += [{"role": "tool", "tool_call_id": f"c{i}", "name": "read_file", "content": "short result"}
                       for i in range(3000)]  # over the budget, and nothing long enough to shorten
    await agent.run_turn("go")
    assert policy.whole_counts == 1


async def test_a_turn_that_fails_logs_the_error_and_leaves_every_call_answered(tmp_path):
    class FullStore:
        async def acreate(self, label, buffers):
            raise CheckpointError("could not record a checkpoint in /x: [Errno 28] No space left on device")

    write = Reply("", [ToolCall("write_file", {"path": "b.py", "content": "y = 1\n"})], "tool_calls")
    log = SessionLog.open(tmp_path, model={"id": "scripted"}, sampler={}, tools=[], system_prompt="sys",
                          log_dir=tmp_path / "logs")
    agent, policy = agent_with(tmp_path, [write], checkpoints=FullStore(), log=log)
    with pytest.raises(CheckpointError, match="No space left"):
        await agent.run_turn("write b")
    assert not (tmp_path / "b.py").exists(), "nothing ran without its checkpoint"
    (error,) = [r for r in read_session(log.path) if r["type"] == "error"]
    assert "No space left" in error["message"] and error["kind"] == "CheckpointError"
    assert (await agent.run_turn("again")).stop_reason == "end_turn"
    shown = policy.seen[-1]
    call_id = next(m for m in shown if m.get("tool_calls"))["tool_calls"][0]["id"]
    answers = [m for m in shown if m.get("tool_call_id") == call_id]
    assert len(answers) == 1 and "turn ended before this call ran" in answers[0]["content"]
    log.close()
