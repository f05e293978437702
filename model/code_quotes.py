"""The rule for bare quotes in a string value of a tool call's arguments object, shared by the
parser (model/toolcalls.py) and the decoding constraint (model/constrained_grammar.py).

Small models copying code into `old_string` leave its quotes unescaped (`return f"{x}"`). A bare
`"` in such a value is read as follows:

* before `,` or `}` (after optional spaces) it closes the value, as in valid JSON; a raw newline
  after it closes it too;
* otherwise it is a literal quote of the code if the code could have one there: it closes a code
  string (an odd number of literal quotes came before it in this value), or it opens one (the
  character before it is not a letter, digit, `_`, `)`, `]`, `}` or `.`, or is a string prefix
  such as `f`, `r` or `rb` after such a character);
* anything else (`x == 0)"` with no code string open) closes the value, and the constraint then
  allows only `,` or `}` next. Without this case a model that copied a line correctly and then
  wrote a stray quote and more text ran on inside the value until its edit no longer matched.

The context of a quote is an int: bit 0 is the parity of literal quotes so far, the rest is one
of four categories of the characters before it. `MAY_CLOSE_ONLY` (0) is the context in which a
bare quote must close the value.
"""

from __future__ import annotations

VALUE_CLOSERS = ",}"
"""After a bare quote (and optional spaces) in a value, the characters that make it the end."""

MAY_CLOSE_ONLY = 0  # even parity, after a character no code string opens after
_OPENS = 2  # after a character a code string may open after (and at a value's start)
_PREFIX = 4  # after one string-prefix letter that follows an opening character
_PREFIX2 = 6  # after two such letters (`rb"`, `fr"`)
VALUE_START = _OPENS

_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_STRING_PREFIX = frozenset("bBfFrRuU")
_NO_OPEN_AFTER = frozenset(")]}.")


def after_text(context: int, text: str) -> int:
    """The context after `text`, which holds no quote and no backslash. Only the last three
    characters matter: three prefix letters in a row are a word whatever came before."""
    category = context & 6
    for ch in text[-3:]:
        if ch in _WORD:
            prefix = ch in _STRING_PREFIX and category in (_OPENS, _PREFIX)
            category = category + 2 if prefix else MAY_CLOSE_ONLY
        else:
            category = MAY_CLOSE_ONLY if ch in _NO_OPEN_AFTER else _OPENS
    return category | (context & 1)


def after_literal_quote(context: int) -> int:
    """The context after a bare quote read as a literal one."""
    return _OPENS | (~context & 1)


def after_escape(context: int) -> int:
    """The context after an escape sequence's second character (`\\n`, `\\"`, `\\u`): a quote
    may open a string there, as at a line's start."""
    return _OPENS | (context & 1)


def may_be_literal(context: int) -> bool:
    """Whether a bare quote in `context` waits for what follows, rather than closing the value."""
    return context != MAY_CLOSE_ONLY
