"""Loop detection for the agent loop: a turn whose last steps repeat the steps before them, call for
call and result for result, is a loop the model is not leaving, and the loop stops the turn
rather than spend the rest of its steps on it.

A step is one model reply: its tool calls (name and arguments) and what the model was told back
(each call's result and the harness's note about calls that did not run). Digits are masked in
the results, so a command's duration ("[exit code 1 after 0.1 s]", pytest's "in 0.03s") does not
hide a repeat, while a change of what the command printed does. A loop of period p (one call
again and again, or an edit the tool refuses and the same failing test run, in turn) is seen
when the last p * repeats steps are `repeats` copies of one p-step block.

    watch = RepetitionWatch(repeats=3)
    period = watch.add(step_signature(calls, told))   # None, or the loop's period
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

MAX_PERIOD = 3
"""Longest loop looked for, in steps: longer cycles are rarer, and each repeat costs more."""
_DIGITS = re.compile(r"\d+")


def step_signature(calls: Iterable[Any], told: Iterable[str]) -> str:
    """One step's calls (name, canonical arguments) and what the model was told back (the
    results, the harness's note; digits masked), as a digest."""
    shape = {"calls": [[call.name, call.arguments] for call in calls], "told": [_DIGITS.sub("#", t) for t in told]}
    return hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()


class RepetitionWatch:
    """The steps of one turn; `add` says when the latest ones close a loop."""

    def __init__(self, repeats: int = 3, max_period: int = MAX_PERIOD) -> None:
        if repeats < 2 and repeats != 0:
            raise ValueError(f"repeats must be 0 (off) or at least 2, got {repeats}")
        self.repeats, self.max_period = repeats, max_period
        self.steps: list[str] = []

    def add(self, signature: str) -> int | None:
        """Records a step; returns the shortest period p whose block the last p * repeats steps
        repeat `repeats` times, or None (always None when repeats is 0)."""
        self.steps.append(signature)
        if not self.repeats:
            return None
        for period in range(1, self.max_period + 1):
            span = period * self.repeats
            if span > len(self.steps):
                break
            tail = self.steps[-span:]
            if all(tail[i] == tail[i % period] for i in range(span)):
                return period
        return None
