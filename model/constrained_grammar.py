"""The pushdown automaton behind model/constrained.py's tool-call constraint: the grammar of a
`<tool_call>` block, stepped one character at a time.

A state is an immutable tuple (mode, tag progress, stack), the stack a linked list of nodes
(symbol, x, y, cost below, rest): copying is free, and each node carries the closing cost of
everything under it, so the cost of a state is O(1). `Grammar.step` advances a state by one
character (None: not allowed), `cost` is the fewest characters that close it, `next_char` the
first of them. Tests: tests/model/test_constrained.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from model import code_quotes
from model.constrained_quote import ESCAPED, RECORD_PATH, UNKNOWN_PATH, Quote, QuotedArgument
from model.constrained_schema import (
    ANY,
    CHAR_TYPE,
    NUMBER,
    STRING,
    TYPE_COST,
    TYPE_FIRST,
    ArgSchema,
)
from model.toolcalls import CLOSE_TAG, OPEN_TAG

State = tuple[int, int, Any]

TEXT, START, CALL = 0, 1, 2  # outside calls / required mode before the first call / in a call

# Grammar symbols. Node layout: (symbol, x, y, cost of the nodes below, node below).
(_END, _WS, _LIT, _VALUE, _OBJ_OPEN, _OBJ_FIRST, _OBJ_NEXT, _ARR_FIRST, _ARR_NEXT) = range(9)
(_STR, _ANY_NAME, _NAME, _NUM, _INUM) = range(9, 14)
(_ARGS_OPEN, _ARGS_FIRST, _ARGS_NEXT, _KEY, _TVALUE) = range(14, 19)  # schema-aware arguments
_VSTR = 19  # a string value of the arguments object: a bare quote in it may be literal
# _WS: x = run length. _LIT: x = literal, y = offset. _VALUE/_OBJ_*/_ARR_*: x = depth.
# _STR/_ANY_NAME: x = length, y = escape state (0 none, 1 after '\', 2..5 after '\u' + y-2 hex).
# _VSTR: x = (length, quote context of model/code_quotes.py, Quote or None: a quoted value must
# stay a piece of its sources, model/constrained_quote.py); y = escape state as in _STR, or
# _PENDING + 2 * n + c: after a bare quote and n whitespace characters (c = 1: one of them is
# not a space), undecided between closing and a literal quote.
# _NAME: x = prefix of a tool name (JSON-escaped). _NUM/_INUM (integer): x = state, y = length.
# _ARGS_*: x = ArgSchema, y = mask of keys seen. _KEY: x = ArgSchema, y = (mask, key prefix).
# _TVALUE (a top-level value): x = its Quote or None, y = mask of allowed types
# (model/constrained_schema.py).
_N_MINUS, _N_ZERO, _N_INT, _N_DOT, _N_FRAC, _N_E, _N_ESIGN, _N_EXP = range(8)
_NUM_DONE = (False, True, True, False, True, False, False, True)  # may end here
_ESCAPE_COST = (0, 1, 4, 3, 2, 1)
_PENDING = 6
_MIDDLE_COST = len(',"arguments":')
_UNIT_COST = frozenset({_VALUE, _OBJ_FIRST, _OBJ_NEXT, _ARR_FIRST, _ARR_NEXT})

_BOTTOM = (_END, 0, 0, 0, None)
_JSON_WS = frozenset(" \t\n\r")
_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_ESCAPES = frozenset('"\\/bfnrtu')
_LITERALS = {"t": "true", "f": "false", "n": "null"}


class Grammar:
    """The automaton: `step` a state by one character, `cost` to close it, `next_char` of the
    shortest way to close it."""

    def __init__(
        self,
        specs: Mapping[str, Mapping[str, Any]] | None,
        no_calls: bool,
        max_string_chars: int,
        max_depth: int,
        max_whitespace: int,
        quotes: Mapping[str, Mapping[str, Iterable[str] | Mapping[str, str]]] | None = None,
    ) -> None:
        self.no_calls = no_calls
        self.max_string = max_string_chars
        self.max_depth = max_depth
        self.max_ws = max_whitespace
        self.names: frozenset[str] | None = None
        # prefix -> fewest characters to a full name plus its shortest `arguments` object
        self.name_rest: dict[str, int] = {}
        self.name_next: dict[str, str] = {}  # prefix -> next character toward that name
        self.schemas: dict[str, ArgSchema | None] = {}  # JSON-escaped name -> its arguments
        for name, parameters in (specs or {}).items():
            encoded = json.dumps(name, ensure_ascii=False)[1:-1]
            schema = self.schemas[encoded] = ArgSchema.from_parameters(parameters)
            args = 2 if schema is None else schema.open_cost()
            for i in range(len(encoded) + 1):
                rest = len(encoded) - i + args
                if rest < self.name_rest.get(encoded[:i], rest + 1):
                    self.name_rest[encoded[:i]] = rest
                    self.name_next[encoded[:i]] = encoded[i] if i < len(encoded) else '"'
        if specs:  # an empty list opens no calls (no_calls); its skeleton is never used
            self.names = frozenset(self.schemas)
        for name, keys in (quotes or {}).items():
            self._add_quotes(name, keys)
        self.text_states = tuple((TEXT, k, None) for k in range(len(OPEN_TAG)))
        self.start_states = tuple((START, k, None) for k in range(len(OPEN_TAG)))
        self.call_start: State = (CALL, 0, self._skeleton())
        self.call_cost = self.cost(self.call_start)

    def _add_quotes(self, name: str, keys: Mapping[str, Iterable[str] | Mapping[str, str]]) -> None:
        """Quoted string arguments of tool `name` (a tool not offered is skipped): each key must
        be a string property of its schema; a key without sources is not constrained. Sources
        keyed by path follow the call's `path` argument (model/constrained_quote.py)."""
        schema = self.schemas.get(json.dumps(name, ensure_ascii=False)[1:-1])
        if schema is None:
            return
        for key, texts in keys.items():
            i = schema.index.get(json.dumps(key, ensure_ascii=False)[1:-1])
            if i is None or schema.types[i] & ~STRING or i == schema.path_key:
                raise ValueError(f"tool {name!r} has no string argument {key!r} to quote")
            quoted = QuotedArgument(texts)
            if quoted.anywhere is not None:
                schema.quoted[i] = quoted

    def _skeleton(self) -> tuple:
        """The stack right after `<tool_call>`; the top is the last one pushed."""
        parts = [
            (_WS, 0, 0), (_LIT, "{", 0), (_WS, 0, 0), (_LIT, '"name"', 0), (_WS, 0, 0),
            (_LIT, ":", 0), (_WS, 0, 0), (_LIT, '"', 0),
        ]  # fmt: skip
        if self.names is None:  # any name, any arguments
            parts += [(_ANY_NAME, 0, 0), *self._middle((_OBJ_OPEN, 0, 0))]
        else:  # the arguments follow the name: see `_after_name`
            parts.append((_NAME, "", 0))
        parts += [(_WS, 0, 0), (_LIT, "}", 0), (_WS, 0, 0), (_LIT, CLOSE_TAG, 0)]
        stack = _BOTTOM
        for symbol, x, y in reversed(parts):
            stack = self.push(stack, symbol, x, y)
        return stack

    @staticmethod
    def _middle(arguments: tuple) -> list[tuple]:
        """From after the name's closing quote to the arguments object."""
        return [
            (_WS, 0, 0), (_LIT, ",", 0), (_WS, 0, 0), (_LIT, '"arguments"', 0), (_WS, 0, 0),
            (_LIT, ":", 0), (_WS, 0, 0), arguments,
        ]  # fmt: skip

    def _after_name(self, name: str, below: tuple) -> tuple:
        schema = self.schemas[name]
        arguments = (_OBJ_OPEN, 0, 0) if schema is None else (_ARGS_OPEN, schema, 0)
        for symbol, x, y in reversed(self._middle(arguments)):
            below = self.push(below, symbol, x, y)
        return below

    def symbol_cost(self, symbol: int, x: Any, y: int) -> int:
        if symbol in _UNIT_COST:
            return 1
        if symbol == _LIT:
            return len(x) - y
        if symbol == _STR:
            return 1 + _ESCAPE_COST[y]
        if symbol == _VSTR:
            return 0 if y >= _PENDING else 1 + _ESCAPE_COST[y]
        if symbol == _ANY_NAME:
            return (2 if x == 0 else 1) + _ESCAPE_COST[y]
        if symbol == _NAME:
            return self.name_rest[x] + 1 + _MIDDLE_COST
        if symbol in (_NUM, _INUM):
            return 0 if _NUM_DONE[x] else 1
        if symbol == _OBJ_OPEN:
            return 2
        if symbol == _ARGS_OPEN:
            return x.open_cost()
        if symbol in (_ARGS_FIRST, _ARGS_NEXT):
            return 1 + x.missing(y, symbol == _ARGS_FIRST)
        if symbol == _KEY:
            return x.key(y[1], y[0])[0]
        if symbol == _TVALUE:
            return TYPE_COST[y]
        return 0  # _WS, _END

    def push(self, below: tuple, symbol: int, x: Any = 0, y: int = 0) -> tuple:
        return (symbol, x, y, self.symbol_cost(*below[:3]) + below[3], below)

    def cost(self, state: State) -> int:
        mode, k, stack = state
        if mode == CALL:
            return self.symbol_cost(stack[0], stack[1], stack[2]) + stack[3]
        if mode == START:
            return len(OPEN_TAG) - k + self.call_cost
        return 0

    def run(self, state: State, text: str) -> State | None:
        for ch in text:
            state = self.step(state, ch)
            if state is None:
                return None
        return state

    def step(self, state: State, ch: str) -> State | None:
        mode, k, stack = state
        if mode == CALL:
            stack = self._step_call(stack, ch)
            if stack is None:
                return None
            return self.text_states[0] if stack is _BOTTOM else (CALL, 0, stack)
        if ch == OPEN_TAG[k]:
            if k + 1 < len(OPEN_TAG):
                return (self.text_states if mode == TEXT else self.start_states)[k + 1]
            return None if self.no_calls else self.call_start
        if mode == START:
            return None
        return self.text_states[1 if ch == "<" else 0]  # '<' occurs in the tag only at 0

    def _step_call(self, stack: tuple, ch: str) -> tuple | None:
        """The stack after `ch`, or None if `ch` is not allowed. Nullable symbols on top
        (whitespace, a finished number) give way to the symbol under them."""
        while True:
            symbol, x, y, below_cost, below = stack
            if symbol == _WS:
                if ch not in _JSON_WS:
                    stack = below
                    continue
                return (symbol, x + 1, y, below_cost, below) if x < self.max_ws else None
            if symbol in (_STR, _ANY_NAME):
                return self._step_string(stack, ch)
            if symbol == _VSTR:
                return self._step_value_string(stack, ch)
            if symbol == _LIT:
                if ch != x[y]:
                    return None
                return below if y + 1 == len(x) else (symbol, x, y + 1, below_cost, below)
            if symbol == _KEY:
                return self._step_key(stack, ch)
            if symbol in (_NUM, _INUM):
                after = self._step_number(x, y, ch)
                if symbol == _INUM and after in (_N_DOT, _N_E):
                    after = None
                if after is not None:
                    return (symbol, after, y + 1, below_cost, below)
                if not _NUM_DONE[x]:
                    return None
                stack = below
                continue
            if symbol == _NAME:  # an escaped quote extends, a bare one closes: never both
                prefix = x + ch
                if prefix in self.name_rest:
                    return (symbol, prefix, 0, below_cost, below)
                if ch != '"' or x not in self.names:
                    return None
                return self._after_name(x, below)
            if symbol == _ARR_FIRST and ch != "]":
                stack = self.push(self.push(self.push(below, _ARR_NEXT, x), _WS), _VALUE, x)
                continue
            if symbol >= _ARGS_OPEN:
                return self._step_args(symbol, x, y, below, ch)
            return self._step_structure(symbol, x, below, ch)

    def _step_args(self, symbol: int, x: Any, y: Any, below: tuple, ch: str) -> tuple | None:
        """Schema-aware `arguments` (model/constrained_schema.py): x the schema, y the mask."""
        if symbol == _TVALUE:
            return self._start_typed(x, y, below, ch)
        if symbol == _ARGS_OPEN:
            return self.push(self.push(below, _ARGS_FIRST, x, 0), _WS) if ch == "{" else None
        if ch == "}":
            return below if x.required & ~y == 0 else None
        if symbol == _ARGS_FIRST and ch == '"':
            return self.push(below, _KEY, x, (y, "")) if x.key("", y) is not None else None
        if symbol == _ARGS_NEXT and ch == ",":
            if x.key("", y) is None:
                return None
            return self.push(self.push(self.push(below, _KEY, x, (y, "")), _LIT, '"'), _WS)
        return None

    def _step_key(self, stack: tuple, ch: str) -> tuple | None:
        """A top-level key of the arguments: a property not yet written (or, in an open schema,
        any other key without escapes); its closing quote pushes its typed value."""
        _, schema, (mask, prefix), below_cost, below = stack
        key = prefix + ch
        if key in schema.prefixes and schema.key(key, mask) is not None:
            return (_KEY, schema, (mask, key), below_cost, below)
        i = schema.index.get(prefix)
        if ch == '"' and (i is None or not mask >> i & 1) and (i is not None or schema.open):
            types = ANY if i is None else schema.types[i]
            stack = self.push(below, _ARGS_NEXT, schema, mask if i is None else mask | 1 << i)
            stack = self.push(stack, _WS)
            if types == ANY:
                stack = self.push(stack, _VALUE, 1)
            else:
                stack = self.push(stack, _TVALUE, _value_quote(schema, i), types)
            return self.push(self.push(self.push(stack, _WS), _LIT, ":"), _WS)
        if not schema.open or ch in '"\\' or ch < " " or len(key) > self.max_string:
            return None
        return (_KEY, schema, (mask, key), below_cost, below)

    def _start_typed(self, quote: Quote | None, types: int, below: tuple, ch: str) -> tuple | None:
        if not types & CHAR_TYPE.get(ch, 0):  # digits and '-': number or integer
            return None
        if ch in "{[":  # one level past max_depth at most: a typed value must be writable
            symbol = _OBJ_FIRST if ch == "{" else _ARR_FIRST
            return self.push(self.push(below, symbol, 2), _WS)
        stack = self._start_value(1, below, ch, quote)
        if stack is not None and stack[0] == _NUM and not types & NUMBER:
            return (_INUM, *stack[1:])  # integer only
        return stack

    def _step_structure(self, symbol: int, depth: int, below: tuple, ch: str) -> tuple | None:
        if symbol == _VALUE:
            return self._start_value(depth, below, ch)
        if symbol == _OBJ_OPEN:
            return self.push(self.push(below, _OBJ_FIRST, 1), _WS) if ch == "{" else None
        if symbol in (_OBJ_FIRST, _OBJ_NEXT) and ch == "}":
            return below
        if symbol in (_ARR_FIRST, _ARR_NEXT) and ch == "]":
            return below
        if symbol == _ARR_NEXT and ch == ",":
            stack = self.push(self.push(below, _ARR_NEXT, depth), _WS)
            return self.push(self.push(stack, _VALUE, depth), _WS)
        if (symbol == _OBJ_FIRST and ch == '"') or (symbol == _OBJ_NEXT and ch == ","):
            stack = self.push(self.push(below, _OBJ_NEXT, depth), _WS)
            stack = self.push(self.push(stack, _VALUE, depth), _WS)
            stack = self.push(self.push(stack, _LIT, ":"), _WS)
            if ch == ",":
                return self.push(self.push(self.push(stack, _STR), _LIT, '"'), _WS)
            return self.push(stack, _STR)
        return None

    def _start_value(self, depth: int, below: tuple, ch: str, quote: Quote | None = None) -> tuple | None:
        if ch == '"':
            if depth == 1:
                return self.push(below, _VSTR, (0, code_quotes.VALUE_START, quote))
            return self.push(below, _STR)
        if ch == "{" or ch == "[":
            if depth >= self.max_depth:
                return None
            return self.push(
                self.push(below, _OBJ_FIRST if ch == "{" else _ARR_FIRST, depth + 1), _WS
            )
        if ch in _DIGITS or ch == "-":
            state = _N_MINUS if ch == "-" else _N_ZERO if ch == "0" else _N_INT
            return self.push(below, _NUM, state, 1)
        literal = _LITERALS.get(ch)
        return None if literal is None else self.push(below, _LIT, literal, 1)

    def _step_number(self, state: int, length: int, ch: str) -> int | None:
        """The number state after `ch`, or None when `ch` does not continue the number."""
        if ch in _DIGITS:
            if state == _N_MINUS:
                return _N_ZERO if ch == "0" else _N_INT
            if state in (_N_INT, _N_FRAC, _N_EXP):
                return state if length < self.max_string else None
            return {_N_DOT: _N_FRAC, _N_E: _N_EXP, _N_ESIGN: _N_EXP}.get(state)
        if ch == "." and state in (_N_ZERO, _N_INT):
            return _N_DOT
        if ch in "eE" and state in (_N_ZERO, _N_INT, _N_FRAC):
            return _N_E
        if ch in "+-" and state == _N_E:
            return _N_ESIGN
        return None

    def _step_string(self, stack: tuple, ch: str) -> tuple | None:
        symbol, length, escape, below_cost, below = stack
        if escape == 1:
            if ch not in _ESCAPES:
                return None
            return (symbol, length, 2 if ch == "u" else 0, below_cost, below)
        if escape:
            if ch not in _HEX:
                return None
            return (symbol, length, escape + 1 if escape < 5 else 0, below_cost, below)
        if ch == '"':
            return None if symbol == _ANY_NAME and length == 0 else below
        if length >= self.max_string or ch < " ":
            return None
        if symbol == _ANY_NAME and (ch == "\\" or ch.isspace()):
            return None  # a name without tools: no escapes, no whitespace (never blank)
        return (symbol, length + 1, 1 if ch == "\\" else 0, below_cost, below)

    def _step_value_string(self, stack: tuple, ch: str) -> tuple | None:
        """A string value of the arguments object (`_VSTR`). Models copying code into an
        argument often leave its quotes unescaped, so a bare quote where code could have one
        waits for what follows: only `,` or `}` (after optional whitespace) close the string
        with it, as they would in valid JSON; any other character makes it, and the whitespace
        after it, part of the string. Where code could have no quote, it closes the string.
        model/code_quotes.py states the rule; model/toolcalls.py reads text back by it."""
        symbol, (length, context, quote), state, below_cost, below = stack
        if state < _PENDING:
            if ch == '"' and not state:
                if not code_quotes.may_be_literal(context):
                    return _closed(quote, below)
                return (symbol, (length, context, quote), _PENDING, below_cost, below)
            after = self._step_string((symbol, length, state, below_cost, below), ch)
            if after is None:
                return None
            if quote is not None:
                quote = _quote_step(quote, state, ch)
                if quote is None:
                    return None
            if state == 1:
                context = code_quotes.after_escape(context)
            elif state or ch != "\\":  # a hex digit of `\uXXXX` or a plain character
                context = code_quotes.after_text(context, ch)
            return (symbol, (after[1], context, quote), after[2], below_cost, below)
        spaces, control = divmod(state - _PENDING, 2)
        if ch in _JSON_WS:
            if spaces >= self.max_ws:
                return None
            return (symbol, (length, context, quote), state + 2 + (ch != " " and not control),
                    below_cost, below)
        if ch in code_quotes.VALUE_CLOSERS:
            closed: tuple | None = _closed(quote, below)
            for _ in range(spaces):
                closed = self._step_call(closed, " ")
                if closed is None:
                    return None
            return self._step_call(closed, ch)
        length += 1 + spaces
        if control or length > self.max_string:
            return None  # a literal tab or newline must be escaped in a JSON string
        if quote is not None:
            quote = quote.add('"' + " " * spaces)
            if quote is None:
                return None
        context = code_quotes.after_literal_quote(context)
        return self._step_value_string((symbol, (length, context, quote), 0, below_cost, below), ch)

    def next_char(self, state: State) -> str | None:
        """The first character of the shortest way to close `state` (None: nothing to close)."""
        mode, k, stack = state
        if mode != CALL:
            return OPEN_TAG[k] if mode == START else None
        while (stack[0] == _WS or (stack[0] in (_NUM, _INUM) and _NUM_DONE[stack[1]])
               or (stack[0] == _VSTR and stack[2] >= _PENDING)):
            stack = stack[4]
        symbol, x, y = stack[0], stack[1], stack[2]
        if symbol == _VSTR:
            if y == 1 and x[2] is not None:  # after a backslash in a quoted value
                return x[2].escapes()[0]
            symbol = _STR
        if symbol >= _ARGS_OPEN:
            return self._next_args_char(symbol, x, y)
        if symbol == _LIT:
            return x[y]
        if symbol == _NAME:
            return self.name_next[x]
        if symbol in (_STR, _ANY_NAME):
            if y:
                return "n" if y == 1 else "0"
            return "f" if symbol == _ANY_NAME and x == 0 else '"'
        closers = {_OBJ_OPEN: "{", _OBJ_FIRST: "}", _OBJ_NEXT: "}", _ARR_FIRST: "]"}
        return closers.get(symbol, "]" if symbol == _ARR_NEXT else "0")  # _VALUE, _NUM: '0'

    @staticmethod
    def _next_args_char(symbol: int, x: Any, y: Any) -> str:
        if symbol == _TVALUE:
            return TYPE_FIRST[y]
        if symbol == _KEY:
            return x.key(y[1], y[0])[1]
        if symbol == _ARGS_OPEN:
            return "{"
        if x.required & ~y == 0:
            return "}"
        return '"' if symbol == _ARGS_FIRST else ","

    def extend_plain(self, state: State, text: str) -> State | bool | None:
        """`state` after `text` free of quotes, backslashes and control characters when `state`
        is inside string content (O(1)); False when it is not (run the characters instead)."""
        symbol, x, escape, below_cost, below = state[2]
        if symbol not in (_STR, _VSTR) or escape:
            return False
        length = (x[0] if symbol == _VSTR else x) + len(text)
        if length > self.max_string:
            return None
        if symbol == _VSTR:
            quote = x[2]
            if quote is not None:
                quote = quote.add(text)
                if quote is None:
                    return None
            x = (length, code_quotes.after_text(x[1], text), quote)
            return (CALL, 0, (symbol, x, 0, below_cost, below))
        return (CALL, 0, (symbol, length, 0, below_cost, below))


def _value_quote(schema: ArgSchema, i: int) -> Quote | None:
    """What the value of key `i` starts with: the call's `path` recorded, a quoted argument's
    sources (the file the call names, when it named one first), or nothing to check."""
    if i == schema.path_key and schema.quoted:
        return RECORD_PATH
    quoted = schema.quoted.get(i)
    return None if quoted is None else quoted.for_path(schema.path)


def _closed(quote: Quote | None, below: tuple) -> tuple:
    """The stack after a value closes: what was under it, its schema told the path when the
    value was the call's `path` (whitespace over the arguments' next-key node)."""
    if quote is None or quote.sources is not None:
        return below
    ws_symbol, x, y, ws_cost, args = below
    args = (args[0], args[1].with_path(quote.value), args[2], args[3], args[4])
    return (ws_symbol, x, y, ws_cost, args)


def _quote_step(quote: Quote, escape: int, ch: str) -> Quote | None:
    """`quote` after `ch` of a string value in escape state `escape` (0 none, 1 after `\\`,
    2-5 in `\\uXXXX`): a plain character extends it; a backslash needs an escape that continues
    the match; `\\u` is refused, or makes a recorded path unknown (model/constrained_quote.py)."""
    if quote.sources is None and (escape > 1 or (escape == 1 and ch == "u")):
        return Quote(None, UNKNOWN_PATH)
    if escape == 0:
        if ch != "\\":
            return quote.add(ch)
        return quote if quote.escapes() else None
    return quote.add(ESCAPED[ch]) if ch in quote.escapes() else None
