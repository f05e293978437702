"""ACP session/update payloads: the builders produce exactly ACP v1's field names (written out by
hand here from the protocol reference, since the agent-client-protocol package is not a
dependency), the schema accepts ACP's own examples and rejects near misses, and the sinks carry
events as editors and `--json` expect."""

from __future__ import annotations

import io
import json

import pytest

from agent import events as ev

ACP_EXAMPLES = [  # from ACP v1's documented prompt turn
    {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "grep 'def test_'", "kind": "search",
     "status": "in_progress"},
    {"sessionUpdate": "tool_call", "toolCallId": "t2", "title": "Read a.py", "kind": "read", "status": "in_progress",
     "locations": [{"path": "/home/user/project/a.py"}]},
    {"sessionUpdate": "tool_call_update", "toolCallId": "t3", "title": "Edit a.py", "kind": "edit",
     "content": [{"type": "diff", "path": "/home/user/project/a.py", "oldText": "...", "newText": "..."}]},
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Done."}, "messageId": "m1"},
    {"sessionUpdate": "plan", "entries": [{"content": "Fix the test", "priority": "high", "status": "completed"}]},
    {"sessionUpdate": "usage_update", "used": 53000, "size": 200000, "cost": {"amount": 0.045, "currency": "USD"}},
    {"sessionUpdate": "session_info_update", "title": "Fix the failing test"},
    {"sessionUpdate": "current_mode_update", "currentModeId": "code"},
    {"sessionUpdate": "tool_call_update", "toolCallId": "t4", "status": "completed",
     "content": [{"type": "content", "content": {"type": "resource_link", "uri": "file:///a.py", "name": "a.py"}},
                 {"type": "terminal", "terminalId": "term-1"}]},
    {"sessionUpdate": "tool_call", "toolCallId": "t5", "title": "Write new.py", "kind": "edit",
     "content": [{"type": "diff", "path": "/p/new.py", "oldText": None, "newText": "x = 1\n"}]},
]


def test_builders_spell_acp_field_names() -> None:
    assert ev.agent_message_chunk("Hi") == {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hi"}}
    assert ev.agent_thought_chunk("hmm", message_id="m1") == {
        "sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hmm"}, "messageId": "m1"}
    assert ev.tool_call("c1", "Read a.py", "read", {"path": "a.py"}, [ev.location("/ws/a.py", 3)]) == {
        "sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Read a.py", "kind": "read", "status": "pending",
        "locations": [{"path": "/ws/a.py", "line": 3}], "rawInput": {"path": "a.py"}}
    assert ev.tool_call_update("c1", "in_progress") == {"sessionUpdate": "tool_call_update", "toolCallId": "c1",
                                                        "status": "in_progress"}
    assert ev.tool_call_update("c1", "completed", content=[ev.text_content("ok")], raw_output={"exit": 0}) == {
        "sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed",
        "content": [{"type": "content", "content": {"type": "text", "text": "ok"}}], "rawOutput": {"exit": 0}}
    assert ev.diff_content("/ws/a.py", "old\n", "new\n") == {"type": "diff", "path": "/ws/a.py", "oldText": "old\n",
                                                             "newText": "new\n"}
    assert ev.diff_content("/ws/new.py", None, "x")["oldText"] is None
    assert ev.terminal_content("t-1") == {"type": "terminal", "terminalId": "t-1"}
    assert ev.plan([{"content": "a", "priority": "high", "status": "in_progress"}, {"content": "b"}]) == {
        "sessionUpdate": "plan", "entries": [{"content": "a", "priority": "high", "status": "in_progress"},
                                             {"content": "b", "priority": "medium", "status": "pending"}]}
    assert ev.usage_update(used=100, size=1000) == {"sessionUpdate": "usage_update", "used": 100, "size": 1000}
    assert ev.usage_update(1, 2, cost=0.5, currency="EUR")["cost"] == {"amount": 0.5, "currency": "EUR"}
    assert ev.session_info_update(title="t") == {"sessionUpdate": "session_info_update", "title": "t"}


def test_vendor_data_goes_under_meta() -> None:
    update = ev.agent_message_chunk("x", meta=ev.vendor_meta(token_ids=[1, 2], logprobs=[-0.1, -0.2]))
    assert update["_meta"] == {"composer": {"token_ids": [1, 2], "logprobs": [-0.1, -0.2]}}
    ev.validate_update(update)
    with pytest.raises(ValueError, match="Additional properties"):
        ev.validate_update({**ev.agent_message_chunk("x"), "token_ids": [1]})  # no new root fields


@pytest.mark.parametrize("update", ACP_EXAMPLES, ids=[f"{u['sessionUpdate']}-{i}" for i, u in enumerate(ACP_EXAMPLES)])
def test_acp_examples_validate(update: dict) -> None:
    ev.validate_update(update)


@pytest.mark.parametrize(("update", "problem"), [
    ({"sessionUpdate": "tool_call", "toolCallId": "t"}, "'title' is a required property"),
    ({"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "done"}, "status"),
    ({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "x", "kind": "shell"}, "kind"),
    ({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "x", "locations": [{"path": "rel/a.py"}]}, "locations/0/path"),
    ({"sessionUpdate": "tool_call_update", "toolCallId": "t", "content": [{"type": "diff", "path": "/a", "old_text": "",
                                                                            "newText": ""}]}, "content/0"),
    ({"sessionUpdate": "tool_call_update", "toolCallId": "t", "content": [{"type": "content", "content": {"type": "text"}}]},
     "content/0"),
    ({"sessionUpdate": "plan", "entries": [{"content": "a", "priority": "urgent", "status": "pending"}]}, "priority"),
    ({"sessionUpdate": "usage_update", "used": 5}, "'size' is a required property"),
    ({"sessionUpdate": "agent_message_chunk", "content": "hello"}, "content"),
    ({"sessionUpdate": "agentMessageChunk", "content": {"type": "text", "text": "x"}}, "sessionUpdate"),
    ({"sessionUpdate": "tool_call", "tool_call_id": "t", "title": "x"}, "toolCallId"),
])
def test_near_misses_are_rejected(update: dict, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        ev.validate_update(update)


def test_builders_refuse_what_acp_forbids() -> None:
    with pytest.raises(ValueError, match="absolute"):
        ev.location("src/a.py")
    with pytest.raises(ValueError, match="absolute"):
        ev.diff_content("a.py", "", "x")
    with pytest.raises(ValueError, match="1-based"):
        ev.location("/a.py", 0)
    with pytest.raises(ValueError, match="tool kind"):
        ev.tool_call("c", "t", "shell")
    with pytest.raises(ValueError, match="tool call status"):
        ev.tool_call_update("c", "done")
    with pytest.raises(ValueError, match="plan priority"):
        ev.plan([{"content": "x", "priority": "urgent"}])
    with pytest.raises(ValueError, match="non-negative"):
        ev.usage_update(-1, 10)


async def test_recorder_validates_and_merges_tool_calls() -> None:
    rec = ev.Recorder()
    await rec.emit(ev.agent_thought_chunk("plan: read then edit"))
    await rec.emit(ev.agent_message_chunk("Reading "))
    await rec.emit(ev.tool_call("c1", "Read a.py", "read", {"path": "a.py"}, [ev.location("/w/a.py")]))
    await rec.emit(ev.tool_call("c2", "Edit a.py", "edit", {"path": "a.py"}))  # parallel calls
    await rec.emit(ev.tool_call_update("c1", "in_progress"))
    await rec.emit(ev.tool_call_update("c2", "failed", content=[ev.text_content("no match")]))
    await rec.emit(ev.tool_call_update("c1", "completed", content=[ev.text_content("x = 1")]))
    await rec.emit(ev.agent_message_chunk("done."))
    assert rec.text() == "Reading done." and rec.text("agent_thought_chunk") == "plan: read then edit"
    calls = rec.tool_calls()
    assert calls["c1"]["status"] == "completed" and calls["c1"]["locations"] == [{"path": "/w/a.py"}]
    assert calls["c2"]["status"] == "failed" and calls["c2"]["title"] == "Edit a.py"
    assert len(rec.of("tool_call_update")) == 3
    with pytest.raises(ValueError):
        await rec.emit({"sessionUpdate": "tool_call", "toolCallId": "c3"})
    await ev.Recorder(validate=False).emit({"anything": 1})


async def test_json_lines_and_broadcast() -> None:
    out, wrapped, rec = io.StringIO(), io.StringIO(), ev.Recorder()
    sink = ev.Broadcast(ev.JsonLinesSink(out), ev.JsonLinesSink(wrapped, session_id="s1"), rec)
    updates = [ev.agent_message_chunk("hi"), ev.tool_call("c1", "ls", "execute", {"command": "ls"}),
               ev.usage_update(10, 100)]
    for update in updates:
        await sink.emit(update)
    assert [json.loads(line) for line in out.getvalue().splitlines()] == updates
    assert [json.loads(line) for line in wrapped.getvalue().splitlines()] == [
        {"sessionId": "s1", "update": u} for u in updates]
    assert rec.events == updates


def test_notification_envelope() -> None:
    update = ev.agent_message_chunk("x")
    assert ev.notification("s1", update) == {"jsonrpc": "2.0", "method": "session/update",
                                             "params": {"sessionId": "s1", "update": update}}
