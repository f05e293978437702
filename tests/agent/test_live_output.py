"""A running command's output reaches its card while it runs (agent/live_output.py): throttled,
the tail only, and never after the call's final update.

Run: .venv/bin/python -m pytest tests/agent/test_live_output.py
"""

from __future__ import annotations

import asyncio

from agent import events as ev
from agent.live_output import LiveOutput
from agent.loop import Agent
from agent.policy import Reply
from agent.tools.base import ToolContext, ToolRegistry
from agent.tools.terminal import RunTerminal
from agent.workspace import Workspace
from model.toolcalls import ToolCall


async def test_a_burst_is_sent_once_an_interval_and_its_last_text_is_not_lost():
    sent: list[dict] = []
    live = LiveOutput(sent.append, "c1", interval_s=0.2, shown_chars=10)
    for i in range(50):
        live(f"{i}\n")
    assert len(sent) == 1, "the first text goes out at once, the rest waits for the interval"
    await asyncio.sleep(0.3)
    assert len(sent) == 2 and sent[-1]["content"][0]["content"]["text"] == "46\n47\n48\n49\n"[-10:]
    assert sent[-1]["status"] == "in_progress" and sent[-1]["toolCallId"] == "c1"


async def test_close_sends_what_waits_and_nothing_after():
    sent: list[dict] = []
    live = LiveOutput(sent.append, "c1", interval_s=0.1)
    live("a")
    live("b")  # waits for the interval: the command's last line, say
    live.close()
    live("c")
    await asyncio.sleep(0.2)
    assert [u["content"][0]["content"]["text"] for u in sent] == ["a", "ab"]


class Scripted:
    model_id = "scripted"
    context_window = 100_000

    def __init__(self, replies):
        self.replies = list(replies)

    def count_tokens(self, messages, tools) -> int:
        return 0

    async def complete(self, messages, tools, *, max_tokens, temperature=0.0, on_text=None) -> Reply:
        return self.replies.pop(0) if self.replies else Reply("done", [], "stop")


async def test_the_card_of_a_running_command_shows_its_output_before_it_ends(tmp_path):
    events: list[dict] = []

    class Sink:
        async def emit(self, update):
            events.append(update)

    command = "echo first line; sleep 1; echo second line"
    policy = Scripted([Reply("", [ToolCall("run_terminal", {"command": command})], "tool_calls")])
    agent = Agent(policy, ToolRegistry([RunTerminal()]), ToolContext(Workspace(tmp_path)), system="sys", events=Sink())
    await agent.run_turn("go")
    texts = [(e.get("status"), e["content"][0]["content"]["text"]) for e in events
             if e["sessionUpdate"] == "tool_call_update" and e.get("content")]
    running = [text for status, text in texts if status == "in_progress"]
    assert running and running[0] == "first line\n", "shown while the command slept"
    assert texts[-1][0] == "completed" and "second line" in texts[-1][1], "the final update comes last"


async def test_composer_agent_run_prints_a_running_commands_output_once(capsys):
    from agent.cli import _Printer

    printer, updates = _Printer(as_json=False), []
    live = LiveOutput(updates.append, "c1", interval_s=0, shown_chars=8)
    for text in ("one\n", "two\n", "three\n"):
        live(text)
    # 20 characters more came between two updates than the 8 the next one shows
    updates.append(ev.tool_call_update("c1", "in_progress", content=[ev.text_content("xx\nlast\n")],
                                       meta=ev.vendor_meta(outputChars=live.total + 20)))
    for update in updates:
        await printer.emit(update)
    assert capsys.readouterr().err == "one\ntwo\nthree\n  [...]\nxx\nlast\n"


async def test_a_note_after_output_left_mid_line_starts_a_line_of_its_own(capsys):
    from agent.cli import _Printer

    printer = _Printer(as_json=False)
    await printer.emit(ev.tool_call_update("c1", "in_progress", content=[ev.text_content("50%")],
                                           meta=ev.vendor_meta(outputChars=3)))
    await printer.emit(ev.tool_call_update("c1", "failed", content=[ev.text_content("killed")]))
    assert capsys.readouterr().err == "50%\n[tool failed] c1: killed\n"
