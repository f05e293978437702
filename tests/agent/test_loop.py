"""The agent loop with a scripted policy (a test double for the model): parallel read-only calls
overlap, writes to one file do not, cancellation stops a running tool, limits, context
shortening, permission outcomes and malformed calls."""

from __future__ import annotations

import asyncio
import time

import pytest

from agent.call_labels import checkpoint_label
from agent.loop import Agent, LoopConfig
from agent.permissions import PermissionPolicy
from agent.policy import Reply
from agent.tools.base import ToolContext, ToolRegistry, ToolResult, ToolSpec
from agent.trajectory import SHORTENED_NOTE
from agent.workspace import Workspace
from model.toolcalls import ToolCall, ToolCallError

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}, "seconds": {"type": "number"}}}


class ScriptedPolicy:
    """Replies from a script, one per model call; records the messages it was shown."""

    model_id = "scripted"

    def __init__(self, replies: list[Reply], context_window: int = 100_000) -> None:
        self.replies = list(replies)
        self.context_window = context_window
        self.seen: list[list[dict]] = []

    def count_tokens(self, messages, tools) -> int:
        return sum(len(str(m.get("content") or "")) for m in messages) // 4

    async def complete(self, messages, tools, *, max_tokens, temperature=0.0, on_text=None) -> Reply:
        self.seen.append([dict(m) for m in messages])
        reply = self.replies.pop(0) if self.replies else Reply("done", [], "stop")
        if on_text and reply.content:
            on_text(reply.content)
        return reply


class Sleepy:
    """A tool that sleeps and records when it ran."""

    def __init__(self, name: str, read_only: bool, log: list) -> None:
        self.spec = ToolSpec(name, "sleeps", SCHEMA, read_only=read_only, kind="read" if read_only else "edit")
        self.log = log

    def paths(self, args):
        return [args["path"]] if "path" in args else None

    async def run(self, args, ctx) -> ToolResult:
        start = time.perf_counter()
        try:
            await asyncio.sleep(args.get("seconds", 0.2))
        finally:
            self.log.append((self.spec.name, args.get("path"), start, time.perf_counter()))
        return ToolResult(output="x" * 2000)


def calls(*specs) -> Reply:
    return Reply("", [ToolCall(name, args) for name, args in specs], "tool_calls")


def make_agent(tmp_path, replies, **kwargs):
    log: list = []
    registry = ToolRegistry([Sleepy("look", True, log), Sleepy("write", False, log), Sleepy("shell", False, log)])
    events: list[dict] = []

    class Sink:
        async def emit(self, update):
            events.append(update)

    policy = ScriptedPolicy(replies, kwargs.pop("context_window", 100_000))
    agent = Agent(policy, registry, ToolContext(Workspace(tmp_path)), system="sys", events=Sink(), **kwargs)
    return agent, policy, log, events


def overlapped(a, b) -> bool:
    return a[2] < b[3] and b[2] < a[3]


async def test_read_only_calls_run_in_parallel(tmp_path):
    agent, _, log, events = make_agent(tmp_path, [calls(*[("look", {"seconds": 0.3})] * 4)])
    result = await agent.run_turn("go")
    assert result.stop_reason == "end_turn" and result.tool_calls == 4
    # Side by side: every call ran while every other one did (one after another, none would).
    assert len(log) == 4 and all(overlapped(a, b) for a in log for b in log if a is not b)
    kinds = [e["sessionUpdate"] for e in events]
    assert kinds.count("tool_call") == 4 and "agent_message_chunk" in kinds


async def test_writes_to_one_file_are_serialised_and_a_shell_command_runs_alone(tmp_path):
    agent, _, log, _ = make_agent(tmp_path, [calls(
        ("write", {"path": "a.py"}), ("write", {"path": "a.py"}), ("write", {"path": "b.py"}),
    ), calls(("write", {"path": "c.py"}), ("shell", {}), ("write", {"path": "d.py"}))])
    await agent.run_turn("go")
    first = [entry for entry in log if entry[1] in ("a.py", "b.py")]
    a1, a2 = [entry for entry in first if entry[1] == "a.py"]
    b = next(entry for entry in first if entry[1] == "b.py")
    assert not overlapped(a1, a2) and (overlapped(a1, b) or overlapped(a2, b))
    shell = next(entry for entry in log if entry[0] == "shell")
    assert not any(overlapped(shell, e) for e in log if e[1] in ("c.py", "d.py"))


async def test_cancelling_the_turn_stops_a_running_tool(tmp_path):
    agent, _, log, _ = make_agent(tmp_path, [calls(("shell", {"seconds": 30}))])
    task = asyncio.create_task(agent.run_turn("go"))
    await asyncio.sleep(0.2)
    task.cancel()
    result = await task
    assert result.stop_reason == "cancelled"
    assert log and log[0][3] - log[0][2] < 5  # the tool's sleep was interrupted


async def test_a_cancelled_step_answers_the_calls_that_ran_as_a_reloaded_session_does(tmp_path):
    """The model is told what ran before the cancel (a write that finished did happen), and the
    conversation rebuilt from the log (agent/replay.py) is the same."""
    from agent.replay import conversation
    from agent.session_log import SessionLog, read_session

    log_file = SessionLog.open(tmp_path, model={"id": "scripted"}, sampler={}, tools=[], system_prompt="sys",
                               log_dir=tmp_path / "logs")
    agent, _, _, events = make_agent(tmp_path, [calls(("shell", {"seconds": 30}), ("look", {"seconds": 0}),
                                                      ("write", {"path": "a.py", "seconds": 0}))], log=log_file)
    task = asyncio.create_task(agent.run_turn("go"))
    await asyncio.sleep(0.3)
    task.cancel()
    assert (await task).stop_reason == "cancelled"
    log_file.close()
    answers = {m["name"]: m["content"] for m in agent.messages if m["role"] == "tool"}
    assert list(answers) == ["shell", "look", "write"]  # in the order of the calls
    assert answers["look"].startswith("x")
    assert "stopped while this call ran; it may have done part of its work" in answers["shell"]
    assert "turn ended before this call ran" in answers["write"]  # it waited for the shell command
    assert conversation(read_session(log_file.path), "sys") == agent.messages
    # The editor sees every call end: none is left showing as running.
    final = {e["toolCallId"]: e["status"] for e in events if e.get("status") in ("completed", "failed")}
    assert len(final) == 3 and list(final.values()).count("failed") == 2
    stopped = [r for r in read_session(log_file.path) if r["type"] == "tool_call" and r.get("status") == "cancelled"]
    assert sorted(r["name"] for r in stopped) == ["shell", "write"]


def final_status(events, call_id):
    return [e["status"] for e in events if e.get("toolCallId") == call_id and "status" in e][-1]


@pytest.mark.parametrize("beside", [[], [("look", {"seconds": 30})], [("shell", {"seconds": 30})],
                                    [("write", {"path": "a.py", "seconds": 30})]], ids=["alone", "a read", "a command", "a queued write"])
@pytest.mark.parametrize("cancels", [1, 3])
async def test_a_file_write_under_way_when_the_turn_is_cancelled_lands_and_is_reported(tmp_path, beside, cancels):
    """Stopped mid-write (an editor answering an edit, a slow disk), the write finishes first, so
    the editor, the model and the log all say it happened; it never lands unseen after the stop.
    Calls stopped beside it, and a client that sends the cancel again, do not cut it short."""
    agent, _, log, events = make_agent(tmp_path, [calls(("write", {"path": "a.py", "seconds": 0.5}), *beside)])
    task = asyncio.create_task(agent.run_turn("go"))
    await asyncio.sleep(0.2)
    for _ in range(cancels):
        task.cancel()
        await asyncio.sleep(0.05)
    assert (await task).stop_reason == "cancelled"
    (write,) = [entry for entry in log if entry[0] == "write" and entry[3] - entry[2] < 5]
    assert write[3] - write[2] >= 0.45, "the write ran to its end"
    answer = next(m for m in agent.messages if m["role"] == "tool")
    assert answer["content"].startswith("x")
    assert final_status(events, answer["tool_call_id"]) == "completed"
    assert all(final_status(events, m["tool_call_id"]) == "failed" for m in agent.messages[-len(beside):] if beside)


async def test_a_write_that_outlasts_the_grace_is_stopped(tmp_path):
    agent, _, _, events = make_agent(tmp_path, [calls(("write", {"path": "a.py", "seconds": 30}))],
                                       config=LoopConfig(write_finish_s=0.3))
    task = asyncio.create_task(agent.run_turn("go"))
    await asyncio.sleep(0.1)
    task.cancel()
    began = time.perf_counter()
    assert (await task).stop_reason == "cancelled"
    assert 0.15 < time.perf_counter() - began < 5
    answer = next(m for m in agent.messages if m["role"] == "tool")
    assert "stopped while this call ran" in answer["content"]
    assert final_status(events, answer["tool_call_id"]) == "failed"


async def test_a_cancel_while_the_person_is_asked_ends_every_call_of_the_step(tmp_path):
    async def person(tool_call, decision):
        await asyncio.sleep(30)  # nobody answers

    permissions = PermissionPolicy([{"tool": "write", "action": "ask"}], default="allow")
    agent, _, log, events = make_agent(tmp_path, [calls(("look", {"seconds": 0}), ("write", {"path": "x"}))],
                                       permissions=permissions, ask=person)
    task = asyncio.create_task(agent.run_turn("go"))
    await asyncio.sleep(0.2)
    task.cancel()
    assert (await task).stop_reason == "cancelled"
    assert not log, "nothing ran"
    ids = [e["toolCallId"] for e in events if e["sessionUpdate"] == "tool_call"]
    assert len(ids) == 2 and all(final_status(events, i) == "failed" for i in ids)
    answers = [m["content"] for m in agent.messages if m["role"] == "tool"]
    assert len(answers) == 2 and all("turn ended before this call ran" in a for a in answers)


async def test_a_call_that_fails_the_step_stops_the_others_before_the_turn_ends(tmp_path):
    agent, _, log, _ = make_agent(tmp_path, [calls(("look", {"seconds": 0.5}), ("write", {"path": "a.py"}))])

    async def broken_refresh(call):
        if call.name == "write":
            raise ConnectionError("the editor went away")

    agent._refresh = broken_refresh
    with pytest.raises(ConnectionError, match="the editor went away"):
        await agent.run_turn("go")
    ended = time.perf_counter()
    assert log and log[0][0] == "look" and log[0][3] <= ended, "the slow call was stopped, not left running"
    answers = [m for m in agent.messages if m["role"] == "tool"]
    assert [a["name"] for a in answers] == ["look", "write"]


async def test_a_cancel_while_a_failed_step_stops_its_calls_still_answers_those_that_ran(tmp_path):
    from agent.replay import conversation
    from agent.session_log import SessionLog, read_session

    class Stubborn(Sleepy):  # takes a while to stop
        async def run(self, args, ctx):
            try:
                return await super().run(args, ctx)
            except asyncio.CancelledError:
                await asyncio.sleep(0.5)
                raise

    log_file = SessionLog.open(tmp_path, model={"id": "scripted"}, sampler={}, tools=[], system_prompt="sys",
                               log_dir=tmp_path / "logs")
    agent, _, log, _ = make_agent(tmp_path, [calls(("slow", {"seconds": 30}), ("look", {"seconds": 0}),
                                                   ("write", {"path": "a.py"}))], log=log_file)
    agent.tools = ToolRegistry([Stubborn("slow", True, log), *(agent.tools.get(n) for n in ("look", "write"))])

    async def broken_refresh(call):
        if call.name == "write":
            await asyncio.sleep(0.1)  # after the look ran
            raise ConnectionError("the editor went away")

    agent._refresh = broken_refresh
    task = asyncio.create_task(agent.run_turn("go"))
    await asyncio.sleep(0.3)  # the step failed; the slow call is stopping
    task.cancel()
    assert (await task).stop_reason == "cancelled"
    log_file.close()
    answers = {m["name"]: m["content"] for m in agent.messages if m["role"] == "tool"}
    assert answers["look"].startswith("x"), "the call that ran is answered with its result"
    assert conversation(read_session(log_file.path), "sys") == agent.messages


async def test_step_limit(tmp_path):
    agent, _, _, _ = make_agent(tmp_path, [calls(("look", {"seconds": 0}))] * 10, config=LoopConfig(max_steps=3, stop_repeats=0))
    result = await agent.run_turn("go")
    assert result.stop_reason == "max_turn_requests" and result.steps == 3


async def test_a_turn_token_budget_caps_each_call_and_stops_the_turn(tmp_path):
    reply = calls(("look", {"seconds": 0}))
    reply.completion_tokens = 300
    agent, policy, _, _ = make_agent(tmp_path, [reply] * 10, config=LoopConfig(max_tokens_per_step=400, max_turn_tokens=1000, stop_repeats=0))
    asked: list[int] = []
    complete = policy.complete

    async def recording(messages, tools, *, max_tokens, **kw):
        asked.append(max_tokens)
        return await complete(messages, tools, max_tokens=max_tokens, **kw)

    policy.complete = recording
    result = await agent.run_turn("go")
    assert asked == [400, 400, 400, 100]  # what is left of the turn's 1000, never more than a step's 400
    assert result.stop_reason == "max_tokens" and result.steps == 4


async def test_old_tool_outputs_are_shortened_first_when_the_context_fills(tmp_path):
    replies = [calls(("look", {"seconds": 0})) for _ in range(6)]
    config = LoopConfig(max_tokens_per_step=200, shortened_chars=100, stop_repeats=0)
    agent, policy, _, _ = make_agent(tmp_path, replies, context_window=2000, config=config)
    await agent.run_turn("go")
    last = policy.seen[-1]
    tool_messages = [m for m in last if m["role"] == "tool"]
    assert tool_messages[0]["content"].endswith(SHORTENED_NOTE)
    assert not tool_messages[-1]["content"].endswith(SHORTENED_NOTE)  # the newest stays whole
    assert last[0]["content"] == "sys" and last[1]["content"] == "go"


async def test_permission_refusal_reaches_the_model(tmp_path):
    asked = []

    async def person(tool_call, decision):
        asked.append(tool_call["title"].split()[0])
        assert tool_call["rawInput"] == {"path": "x"} and tool_call["status"] == "pending"
        return "reject_once"

    permissions = PermissionPolicy([{"tool": "write", "action": "ask"}], default="allow")
    agent, policy, log, _ = make_agent(tmp_path, [calls(("write", {"path": "x"}), ("look", {"seconds": 0}))],
                                       permissions=permissions, ask=person)
    await agent.run_turn("go")
    tool_messages = [m for m in policy.seen[-1] if m["role"] == "tool"]
    assert "did not allow write" in tool_messages[0]["content"]
    assert [entry[0] for entry in log] == ["look"] and asked == ["write"]


async def test_malformed_tool_calls_are_reported_back(tmp_path):
    bad = Reply("", [], "stop", tool_call_errors=[ToolCallError(0, "tool call 1 is not valid JSON", "{")])
    agent, policy, _, _ = make_agent(tmp_path, [bad])
    await agent.run_turn("go")
    assert any("not valid JSON" in str(m.get("content")) for m in policy.seen[-1])


async def test_a_turn_that_writes_logs_its_final_diff_and_can_be_undone(tmp_path):
    from agent.checkpoints import CheckpointStore
    from agent.session_log import SessionLog, read_session
    from agent.tools.files import file_tools

    (tmp_path / "a.py").write_text("x = 1\n")
    registry = ToolRegistry(file_tools())
    edit = Reply("", [ToolCall("edit_file", {"path": "a.py", "old_string": "x = 1", "new_string": "x = 2"})], "tool_calls")
    log = SessionLog.open(tmp_path, model={"id": "scripted"}, sampler={}, tools=[], system_prompt="sys",
                          log_dir=tmp_path / "logs")
    store = CheckpointStore(tmp_path)
    agent = Agent(ScriptedPolicy([edit]), registry, ToolContext(Workspace(tmp_path)), system="sys",
                  checkpoints=store, log=log)
    await agent.run_turn("change x")
    log.close()
    assert (tmp_path / "a.py").read_text() == "x = 2\n"
    final = [r for r in read_session(log.path) if r["type"] == "final_diff"]
    assert final and "-x = 1" in final[0]["diff"] and "+x = 2" in final[0]["diff"]
    assert store.get(agent.last_checkpoint).label == "before edit_file a.py"
    store.restore(agent.last_checkpoint)
    assert (tmp_path / "a.py").read_text() == "x = 1\n"


def test_a_checkpoint_label_names_paths_and_programs_never_a_command_s_arguments():
    calls = [ToolCall("edit_file", {"path": "src/app.py"}),
             ToolCall("run_terminal", {"command": "curl -H 'Authorization: Bearer s3cret' example.com"}),
             ToolCall("run_terminal", {"command": "env OPENAI_API_KEY=sk-abc123 /usr/bin/python x.py"}),
             ToolCall("todo_write", {"todos": []}), ToolCall("run_terminal", {"command": "  "}),
             ToolCall("write_file", {"path": "a\x1b[2Jb.txt"})]
    assert checkpoint_label(calls) == ("before edit_file src/app.py, run_terminal curl, run_terminal python, "
                                       "todo_write, run_terminal, write_file a?[2Jb.txt")


async def test_arguments_of_the_wrong_shape_are_refused_not_fatal(tmp_path):
    from agent.permissions import default_editor_policy
    from agent.tools.files import file_tools

    bad = Reply("", [
        ToolCall("edit_file", {"path": {"type": "string"}, "old_string": 1, "new_string": []}),
        ToolCall("read_file", {"path": ["a", "b"]}),
        ToolCall("write_file", "not an object"),  # type: ignore[arg-type]
    ], "tool_calls")
    policy = ScriptedPolicy([bad])
    agent = Agent(policy, ToolRegistry(file_tools()), ToolContext(Workspace(tmp_path)), system="sys",
                  permissions=default_editor_policy(tmp_path))
    result = await agent.run_turn("go")
    assert result.stop_reason == "end_turn"
    tool_messages = [m for m in policy.seen[-1] if m["role"] == "tool"]
    assert len(tool_messages) == 3 and all("invalid arguments" in m["content"] or "must be a JSON object" in m["content"]
                                           for m in tool_messages)
