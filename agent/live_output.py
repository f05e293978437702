"""A running command's output, shown while it runs: the terminal tool streams what the command
prints (ToolContext.on_output), and the card of its call in the editor shows the last lines as
they come, a few times a second, instead of nothing until the command ends (a test suite, an
install). The final update, with the whole result, replaces it. Each update says how much the
command has printed in all (`_meta.composer.outputChars`), so a client that prints a stream
(composer-agent run) prints only what is new.

    live = LiveOutput(emit, call_id)              # emit: the loop's ordered session/update sender
    ctx = dataclasses.replace(ctx, on_output=live)
    try:
        result = await tool.run(args, ctx)
    except BaseException:
        live.close(flush=False)                   # stopped or failed: nothing more is sent
        raise
    live.close()                                  # sends what waits; nothing is sent after this

Tests: .venv/bin/python -m pytest tests/agent/test_live_output.py
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from agent import events as ev
from agent.call_labels import SHOWN_CHARS

INTERVAL_S = 0.25
"""At most one update in this long: a command printing fast does not flood the editor."""


class LiveOutput:
    """`on_output` for one call: keeps the output's tail and sends it as the call's content, at
    most every `interval_s` (the last text of a burst goes out when the interval ends)."""

    def __init__(self, emit: Callable[[dict[str, Any]], None], call_id: str, *,
                 interval_s: float = INTERVAL_S, shown_chars: int = SHOWN_CHARS) -> None:
        self.emit, self.call_id = emit, call_id
        self.interval_s, self.shown_chars = interval_s, shown_chars
        self.tail = ""
        self.total = 0
        """Characters printed so far: the update's `_meta.composer.outputChars`, so a client that
        prints the output as a stream (composer-agent run) knows which end of `tail` is new."""
        self.sent = 0
        """Updates sent so far."""
        self._last = -float("inf")
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def __call__(self, text: str) -> None:
        if self._closed or not text:
            return
        self.tail = (self.tail + text)[-self.shown_chars:]
        self.total += len(text)
        wait = self._last + self.interval_s - time.monotonic()
        if wait <= 0:
            self._send()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(wait, self._send)

    def _send(self) -> None:
        self._timer = None
        if self._closed:
            return
        self._last = time.monotonic()
        self.sent += 1
        self.emit(ev.tool_call_update(self.call_id, "in_progress", content=[ev.text_content(self.tail)],
                                      meta=ev.vendor_meta(outputChars=self.total)))

    def close(self, flush: bool = True) -> None:
        """The call ended: text still waiting for its interval goes out now (a command's last
        lines, often its summary; not for a call that was stopped, whose final update may be
        out already), then nothing more (the final update carries the result)."""
        if self._timer is not None:
            self._timer.cancel()
            if flush:
                self._send()
        self._closed = True
