"""Quoted arguments: a tool-call string value that must be a verbatim piece of given texts.

edit_file's `old_string` has to match the file exactly. Small models copy it wrong (the
warm-started composer-mini's held-out edits: 84 of 355 refused as not verbatim, 36 more as not
unique, docs/benchmarks.md), and each miss costs a turn. Under the tool-call constraint
(model/constrained.py) a quoted value can only grow while its decoded text is still a substring
of one of the sources (the files the agent has read, agent/loop.py), so what the model writes
there is always found: the likeliest continuation that stays in the file wins.

The value is decoded as the grammar reads it (model/constrained_grammar.py): escapes `\\"`,
`\\\\`, `\\/`, `\\b`, `\\f`, `\\n`, `\\r`, `\\t`, and bare quotes that the lenient rule reads as
literal (model/code_quotes.py). `\\uXXXX` is refused in a quoted value: every character it could
stand for can be written as itself or with a short escape. A backslash is taken only when some
short escape after it continues the match, so the grammar's shortest way to close never leads
into a dead end. Closing is always allowed (the empty string is in every source), so the cost
of closing a call is what the grammar computes without quotes.

Each step narrows the sources to those that still hold the value: one `in` (C speed) per source
per token, microseconds for files of a few thousand characters.
"""

from __future__ import annotations

from collections.abc import Iterable

ESCAPED = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
"""A JSON escape's second character -> the character it stands for (`\\u` aside)."""


class Quote:
    """The decoded value so far and the sources that still contain it; immutable."""

    __slots__ = ("sources", "value")

    def __init__(self, sources: Iterable[str], value: str = "") -> None:
        self.sources = tuple(sources)
        self.value = value

    def add(self, text: str) -> Quote | None:
        """This quote with `text` appended, or None when no source holds the result."""
        value = self.value + text
        sources = tuple(s for s in self.sources if value in s)
        return Quote(sources, value) if sources else None

    def escapes(self) -> str:
        """The escape letters (after a backslash) whose character continues the match."""
        return "".join(k for k, ch in ESCAPED.items() if any(self.value + ch in s for s in self.sources))

    def __repr__(self) -> str:
        return f"Quote({self.value!r}, in {len(self.sources)} source(s))"
