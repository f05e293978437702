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

Sources keyed by path (`{"a.py": text, ...}`) are matched to the call's own `path` argument
when the model wrote it first (as the schema orders it): the value must then be a piece of that
file, exactly what edit_file will look for. The `path` value is recorded on the way (a Quote
without sources); a path not among the keys, or written after the quoted value, falls back to
every source.

Each step narrows the sources to those that still hold the value: one `in` (C speed) per source
per token, microseconds for files of a few thousand characters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

ESCAPED = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
"""A JSON escape's second character -> the character it stands for (`\\u` aside)."""


class Quote:
    """The decoded value so far and the sources that still contain it; immutable. Without
    sources (None) it only records the value: the call's `path`."""

    __slots__ = ("sources", "value")

    def __init__(self, sources: Iterable[str] | None, value: str = "") -> None:
        self.sources = None if sources is None else tuple(sources)
        self.value = value

    def add(self, text: str) -> Quote | None:
        """This quote with `text` appended, or None when no source holds the result."""
        value = self.value + text
        if self.sources is None:
            return Quote(None, value)
        sources = tuple(s for s in self.sources if value in s)
        return Quote(sources, value) if sources else None

    def escapes(self) -> str:
        """The escape letters (after a backslash) whose character continues the match."""
        if self.sources is None:
            return "".join(ESCAPED)
        return "".join(k for k, ch in ESCAPED.items() if any(self.value + ch in s for s in self.sources))

    def __repr__(self) -> str:
        where = "recording" if self.sources is None else f"in {len(self.sources)} source(s)"
        return f"Quote({self.value!r}, {where})"


RECORD_PATH = Quote(None)
UNKNOWN_PATH = "\0"
"""What a recorded path reads as after a `\\u` escape: no key matches it."""


class QuotedArgument:
    """One quoted argument's sources: every text (`anywhere`), and per path when keyed."""

    __slots__ = ("anywhere", "by_path")

    def __init__(self, texts: Iterable[str] | Mapping[str, str]) -> None:
        by_path = dict(texts) if isinstance(texts, Mapping) else {}
        sources = tuple(dict.fromkeys(t for t in (by_path.values() if isinstance(texts, Mapping) else texts) if t))
        self.anywhere = Quote(sources) if sources else None
        self.by_path = {path: Quote((text,)) for path, text in by_path.items() if text}

    def for_path(self, path: str | None) -> Quote | None:
        """The quote to start the value with, the call's `path` being `path` (None: not written)."""
        return self.by_path.get(path, self.anywhere) if path is not None else self.anywhere
