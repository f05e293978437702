"""A deterministic stand-in for the model in the training tests: replies from a script, one per
model call (then "done"), optionally after a delay or by failing as a lost server would.

    from scripted_policy import ScriptedPolicy, calls
    policy = ScriptedPolicy([calls(("read_file", {"path": "a.py"})), Reply("done", [], "stop")])
"""

from __future__ import annotations

import asyncio

from agent.policy import Reply
from model.toolcalls import ToolCall


class ScriptedPolicy:
    model_id = "scripted"
    context_window = 100_000

    def __init__(self, replies: list[Reply], *, fail: bool = False, sleep_s: float = 0.0) -> None:
        self.replies, self.fail, self.sleep_s = list(replies), fail, sleep_s

    def count_tokens(self, messages, tools) -> int:
        return sum(len(str(m.get("content") or "")) for m in messages) // 4

    async def complete(self, messages, tools, *, max_tokens, temperature=0.0, on_text=None) -> Reply:
        await asyncio.sleep(self.sleep_s)
        if self.fail:
            raise ConnectionError("the model server went away")
        return self.replies.pop(0) if self.replies else Reply("done", [], "stop")


def calls(*specs: tuple[str, dict]) -> Reply:
    """A reply that calls these tools side by side: calls(("read_file", {"path": "a.py"}), ...)."""
    return Reply("", [ToolCall(name, args) for name, args in specs], "tool_calls")
