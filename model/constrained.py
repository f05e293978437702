"""Constrained decoding for tool calls: every `<tool_call>` block the model opens is well-formed.

Once the output holds `<tool_call>`, the continuation must be optional whitespace, a JSON object
`{"name": N, "arguments": A}` (in this order; N a tool name, or without tools any non-empty
string free of whitespace and escapes; A an object whose top level follows N's schema: known
keys once each, their types, every required key; model/constrained_schema.py), whitespace and
exactly `</tool_call>`; then free text again. `parse_tool_calls` (model/toolcalls.py) reads
every such block back without an error. Use from a sampler:

    table = TokenTable(tok.token_strings(), eos_token_ids=tok.stop_token_ids,
                       special_token_ids=tok.special_token_ids)      # once per vocabulary
    c = ToolCallConstraint(table, tools=tools, mode="auto")          # once per request
    for step in range(max_tokens):
        tokens_left = max_tokens - step                   # counts the token being chosen
        token = sample(logits)
        if c.is_constraining and not c.is_allowed(token, tokens_left):
            token = c.first_allowed(logits.argsort(descending=True).tolist(), tokens_left)
        c.advance(token)                                  # for EVERY generated token

`token_strings[i]` is token i decoded on its own; a partial UTF-8 byte reads as U+FFFD, which is
harmless (the grammar only looks at ASCII, and no ASCII hides inside a multi-byte character).
Special tokens (EOS, `<|im_end|>`) go in `eos_token_ids`/`special_token_ids`, whatever their
text; tokens with empty text count as special too. Special tokens are allowed outside calls
only. An added `<tool_call>` token must not be special: its text is what opens a call.

Modes: "auto" (calls optional), "required" (the output starts with `<tool_call>`; after the first
call, free text and more calls), "none" (no token may complete `<tool_call>`).

Budget: `tokens_left` is how many tokens may still be generated, this one included (None: no
limit). A token is allowed only if the shortest way to close what is open, counted in
characters each emitted as its own token (byte-level BPE vocabularies have every ASCII
character as a token; the constructor checks the ones it needs), fits in the tokens left after
it, so a call is closed even when `max_tokens` cuts generation. If that is already impossible
(mode "required" with fewer tokens than the shortest call), tokens that shorten the way are
allowed. String and number length (`max_string_chars`), nesting depth (`max_depth`) and
whitespace runs (`max_whitespace`) are capped, so a looping model is pushed to close.

How it works: a character-level pushdown automaton. A state is an immutable tuple
(mode, tag progress, stack), the stack a linked list of nodes (symbol, x, y, cost below, rest):
copying is free, and each node carries the closing cost of everything under it, so the cost of
a state is O(1). A token is checked by running its characters on the state; the result is
cached per token until the next `advance`. Free text without '<' and plain text inside a JSON
string (no quote, backslash or control character) take O(1) fast paths.

Measured (CPython 3.11, one core, SmolLM2's 49152-token vocabulary, a 3-call message tokenized
into 198 tokens): one uncached `is_allowed` costs about 0.2 us in free text, about 1 us inside a
string, and inside a call 1.3 us median, 1.6 us mean, 6 us at most (about 1 us per character
run through the automaton); `is_allowed` plus `advance` averages 3 us per token over the whole
message. Building the `TokenTable` takes 50-80 ms: share one per vocabulary.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from model.constrained_schema import ANY, CHAR_TYPE, NUMBER, TYPE_COST, TYPE_FIRST, ArgSchema
from model.token_table import TokenTable
from model.toolcalls import CLOSE_TAG, OPEN_TAG, tool_specs

Mode = Literal["auto", "required", "none"]
State = tuple[int, int, Any]

_TEXT, _START, _CALL = 0, 1, 2  # outside calls / required mode before the first call / in a call

# Grammar symbols. Node layout: (symbol, x, y, cost of the nodes below, node below).
(_END, _WS, _LIT, _VALUE, _OBJ_OPEN, _OBJ_FIRST, _OBJ_NEXT, _ARR_FIRST, _ARR_NEXT) = range(9)
(_STR, _ANY_NAME, _NAME, _NUM, _INUM) = range(9, 14)
(_ARGS_OPEN, _ARGS_FIRST, _ARGS_NEXT, _KEY, _TVALUE) = range(14, 19)  # schema-aware arguments
# _WS: x = run length. _LIT: x = literal, y = offset. _VALUE/_OBJ_*/_ARR_*: x = depth.
# _STR/_ANY_NAME: x = length, y = escape state (0 none, 1 after '\', 2..5 after '\u' + y-2 hex).
# _NAME: x = prefix of a tool name (JSON-escaped). _NUM/_INUM (integer): x = state, y = length.
# _ARGS_*: x = ArgSchema, y = mask of keys seen. _KEY: x = ArgSchema, y = (mask, key prefix).
# _TVALUE: x = depth, y = mask of allowed types (model/constrained_schema.py).
_N_MINUS, _N_ZERO, _N_INT, _N_DOT, _N_FRAC, _N_E, _N_ESIGN, _N_EXP = range(8)
_NUM_DONE = (False, True, True, False, True, False, False, True)  # may end here
_ESCAPE_COST = (0, 1, 4, 3, 2, 1)
_MIDDLE_COST = len(',"arguments":')
_UNIT_COST = frozenset({_VALUE, _OBJ_FIRST, _OBJ_NEXT, _ARR_FIRST, _ARR_NEXT})

_BOTTOM = (_END, 0, 0, 0, None)
_JSON_WS = frozenset(" \t\n\r")
_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_ESCAPES = frozenset('"\\/bfnrtu')
_LITERALS = {"t": "true", "f": "false", "n": "null"}
_MISS = object()


class _Grammar:
    """The automaton: `step` a state by one character, `cost` to close it, `next_char` of the
    shortest way to close it."""

    def __init__(
        self,
        specs: Mapping[str, Mapping[str, Any]] | None,
        no_calls: bool,
        max_string_chars: int,
        max_depth: int,
        max_whitespace: int,
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
        self.text_states = tuple((_TEXT, k, None) for k in range(len(OPEN_TAG)))
        self.start_states = tuple((_START, k, None) for k in range(len(OPEN_TAG)))
        self.call_start: State = (_CALL, 0, self._skeleton())
        self.call_cost = self.cost(self.call_start)

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
        if mode == _CALL:
            return self.symbol_cost(stack[0], stack[1], stack[2]) + stack[3]
        if mode == _START:
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
        if mode == _CALL:
            stack = self._step_call(stack, ch)
            if stack is None:
                return None
            return self.text_states[0] if stack is _BOTTOM else (_CALL, 0, stack)
        if ch == OPEN_TAG[k]:
            if k + 1 < len(OPEN_TAG):
                return (self.text_states if mode == _TEXT else self.start_states)[k + 1]
            return None if self.no_calls else self.call_start
        if mode == _START:
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
            stack = (
                self.push(stack, _VALUE, 1) if types == ANY else self.push(stack, _TVALUE, 1, types)
            )
            return self.push(self.push(self.push(stack, _WS), _LIT, ":"), _WS)
        if not schema.open or ch in '"\\' or ch < " " or len(key) > self.max_string:
            return None
        return (_KEY, schema, (mask, key), below_cost, below)

    def _start_typed(self, depth: int, types: int, below: tuple, ch: str) -> tuple | None:
        if not types & CHAR_TYPE.get(ch, 0):  # digits and '-': number or integer
            return None
        if ch in "{[":  # one level past max_depth at most: a typed value must be writable
            symbol = _OBJ_FIRST if ch == "{" else _ARR_FIRST
            return self.push(self.push(below, symbol, depth + 1), _WS)
        stack = self._start_value(depth, below, ch)
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

    def _start_value(self, depth: int, below: tuple, ch: str) -> tuple | None:
        if ch == '"':
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

    def next_char(self, state: State) -> str | None:
        """The first character of the shortest way to close `state` (None: nothing to close)."""
        mode, k, stack = state
        if mode != _CALL:
            return OPEN_TAG[k] if mode == _START else None
        while stack[0] == _WS or (stack[0] in (_NUM, _INUM) and _NUM_DONE[stack[1]]):
            stack = stack[4]
        symbol, x, y = stack[0], stack[1], stack[2]
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


class ToolCallConstraint:
    """Per-request constraint state; see the module docstring for the contract and usage."""

    def __init__(
        self,
        token_strings: Sequence[str] | TokenTable,
        tools: Iterable[Mapping[str, Any]] | None = None,
        mode: Mode = "auto",
        eos_token_ids: Iterable[int] = (),
        special_token_ids: Iterable[int] = (),
        *,
        max_string_chars: int = 4096,
        max_depth: int = 32,
        max_whitespace: int = 64,
    ) -> None:
        if mode not in ("auto", "required", "none"):
            raise ValueError(f"mode must be 'auto', 'required' or 'none', got {mode!r}")
        if min(max_string_chars, max_depth, max_whitespace) < 1:
            raise ValueError(
                f"max_string_chars={max_string_chars}, max_depth={max_depth} and "
                f"max_whitespace={max_whitespace} must all be at least 1"
            )
        specs = tool_specs(tools) if tools is not None else None
        if mode == "required" and specs == {}:
            raise ValueError("mode 'required' needs at least one tool, got an empty tools list")
        if isinstance(token_strings, TokenTable):
            table = token_strings
            if eos_token_ids or special_token_ids:
                raise ValueError("give eos/special token ids to the TokenTable, not here")
        else:
            table = TokenTable(token_strings, eos_token_ids, special_token_ids)
        self.table = table
        self.mode = mode
        self._grammar = _Grammar(
            specs, mode == "none" or specs == {}, max_string_chars, max_depth, max_whitespace
        )
        self._check_single_chars()
        grammar = self._grammar
        self._state: State = (
            grammar.start_states[0] if mode == "required" else grammar.text_states[0]
        )
        self._text0 = grammar.text_states[0]
        self._cache: dict[int, State | None] = {}

    def _check_single_chars(self) -> None:
        needed = set(OPEN_TAG + CLOSE_TAG + '{}[]":,0nf "name" "arguments" true false null')
        for name, schema in self._grammar.schemas.items():
            needed.update(name + (schema.key_chars() if schema is not None else ""))
        missing = sorted(needed - set(self.table.char_ids))
        if missing:
            raise ValueError(f"the vocabulary lacks single-character tokens for {missing!r}")

    @property
    def is_constraining(self) -> bool:
        """True when some token may be rejected now: inside a call, after a partial
        `<tool_call>`, before the first call in mode "required", or when the vocabulary has
        tokens holding the whole tag. When False every token is allowed."""
        mode, k, _ = self._state
        return mode != _TEXT or k > 0 or bool(self.table.opening_ids)

    @property
    def in_call(self) -> bool:
        """Inside a `<tool_call>` block right now."""
        return self._state[0] == _CALL

    def is_allowed(self, token_id: int, tokens_left: int | None = None) -> bool:
        """Whether emitting `token_id` keeps the output valid and closable within
        `tokens_left` tokens (this one included; None: no limit)."""
        state = self._state
        table = self.table
        if state is self._text0 and not table.has_lt[token_id]:
            return True
        if table.special[token_id]:
            return state[0] == _TEXT
        after = self._after(token_id)
        if after is None:
            return False
        if tokens_left is None:
            return True
        cost = self._grammar.cost(after)
        # Fits the tokens left after this one; once that is impossible, any progress will do.
        return cost < tokens_left or cost < self._grammar.cost(state)

    def advance(self, token_id: int) -> None:
        """Record an emitted token. Raises ValueError for a token the grammar forbids."""
        state = self._state
        table = self.table
        if state is self._text0 and not table.has_lt[token_id]:
            return
        if table.special[token_id]:
            if state[0] != _TEXT:
                raise ValueError(f"special token {token_id} is not allowed {self._where()}")
            return
        after = self._after(token_id)
        if after is None:
            text = table.strings[token_id]
            raise ValueError(f"token {token_id} ({text!r}) is not allowed {self._where()}")
        self._state = after
        self._cache.clear()

    def only_allowed(self, token_id: int, preferred: Iterable[int], tokens_left: int | None = None) -> bool:
        """Whether `token_id` is the one token allowed now (a forced token). `preferred` (the
        model's likeliest) are tried first, so the usual answer, another is allowed, comes after
        a few checks; then the special tokens, then the characters the grammar takes here: each
        as its own token, then every token it starts (a token whose first character is refused
        is refused), not the whole vocabulary."""
        table = self.table

        def another(ids: Iterable[int]) -> bool:
            return any(other != token_id and self.is_allowed(other, tokens_left) for other in ids)

        if another(preferred) or another(table.special_ids):
            return False
        firsts = [ch for ch in table.by_first_char if self._grammar.step(self._state, ch) is not None]
        if another(table.char_ids[ch] for ch in firsts if ch in table.char_ids):
            return False
        return not another(other for ch in firsts for other in table.by_first_char[ch])

    def first_allowed(self, candidate_ids: Iterable[int], tokens_left: int | None = None) -> int:
        """The first allowed id among candidates (in preference order). If none is, the next
        character of the shortest completion (or EOS outside calls): never fails."""
        for token_id in candidate_ids:
            if self.is_allowed(token_id, tokens_left):
                return token_id
        return self.fallback_token(tokens_left)

    def fallback_token(self, tokens_left: int | None = None) -> int:
        """An allowed token for when the model proposes none: the shortest way forward."""
        table = self.table
        char = self._grammar.next_char(self._state)
        if char is None:  # free text: ending is always valid, else a space breaks a partial tag
            if table.eos_token_ids:
                return table.eos_token_ids[0]
            char = " "
        token_id = table.char_ids.get(char)
        if token_id is not None and self.is_allowed(token_id, tokens_left):
            return token_id
        for token_id in range(len(table)):  # unreachable with the single-character tokens
            if self.is_allowed(token_id, tokens_left):
                return token_id
        raise RuntimeError(f"no token is allowed {self._where()}")

    def remaining_cost(self) -> int:
        """Fewest characters (single-character tokens) that close what is open now."""
        return self._grammar.cost(self._state)

    def _after(self, token_id: int) -> State | None:
        after = self._cache.get(token_id, _MISS)
        if after is _MISS:
            after = self._run(token_id)
            self._cache[token_id] = after
        return after

    def _run(self, token_id: int) -> State | None:
        state, text = self._state, self.table.strings[token_id]
        if state[0] == _CALL and self.table.plain[token_id]:
            symbol, length, escape, below_cost, below = state[2]
            if symbol == _STR and not escape:  # plain string content
                length += len(text)
                if length > self._grammar.max_string:
                    return None
                return (_CALL, 0, (symbol, length, 0, below_cost, below))
        return self._grammar.run(state, text)

    def _where(self) -> str:
        mode, k, _ = self._state
        if mode == _CALL:
            return f"inside a tool call (shortest close: {self.remaining_cost()} characters)"
        if mode == _START:
            return f"here: mode 'required' needs the output to start with {OPEN_TAG!r}"
        return "outside tool calls" if k == 0 else f"after {OPEN_TAG[:k]!r}"
