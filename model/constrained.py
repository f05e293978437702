"""Constrained decoding for tool calls: every `<tool_call>` block the model opens is well-formed.

Once the output holds `<tool_call>`, the continuation must be optional whitespace, a JSON object
`{"name": N, "arguments": A}` (in this order; N a tool name, or without tools any non-empty
string free of whitespace and escapes; A an object whose top level follows N's schema: known
keys once each, their types, every required key; model/constrained_schema.py), whitespace and
exactly `</tool_call>`; then free text again. `parse_tool_calls` (model/toolcalls.py) reads
every such block back without an error.

One leniency, for code copied into arguments: in a string value of the arguments object, a bare
`"` where code could have a quote closes the string only when `,` or `}` follows it (after
optional whitespace); before any other character it is a literal quote. Where code could have
none (after `x)` with no code string open) it closes the string (model/code_quotes.py). Small
models copying `return f"{x}"` from a file into `old_string` leave its quotes unescaped; strict
JSON forced the string shut at the first one (the warm-started composer-mini's edits of such
lines all failed, docs/benchmarks.md). Valid JSON reads the same, and the parser reads the
lenient text by the same rule. Use from a sampler:

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

Quoted arguments: `quotes={"edit_file": {"old_string": [text, ...]}}` makes that string argument
a verbatim piece of one of the texts (model/constrained_quote.py); keyed by path
(`{"a.py": text, ...}`), a piece of the file the call's `path` argument names when it was written
first. The agent passes the files it has read, so `old_string` always matches. Tools not offered
are skipped; a quoted key must be a string property of its tool's schema, other than `path`.

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

How it works: a character-level pushdown automaton (model/constrained_grammar.py) whose states
are immutable and cost O(1) to copy and to price. A token is checked by running its characters
on the state; the result is
cached per token until the next `advance`. Free text without '<' and plain text inside a JSON
string (no quote, backslash or control character) take O(1) fast paths.

Measured (CPython 3.11, one core, SmolLM2's 49152-token vocabulary, a 3-call message tokenized
into 198 tokens): one uncached `is_allowed` costs about 0.2 us in free text, about 1 us inside a
string, and inside a call 1.3 us median, 1.6 us mean, 6 us at most (about 1 us per character
run through the automaton); `is_allowed` plus `advance` averages 3 us per token over the whole
message. Building the `TokenTable` takes 50-80 ms: share one per vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from model.constrained_grammar import CALL, START, TEXT, Grammar, State
from model.token_table import TokenTable
from model.toolcalls import CLOSE_TAG, OPEN_TAG, tool_specs

Mode = Literal["auto", "required", "none"]
_MISS = object()


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
        quotes: Mapping[str, Mapping[str, Iterable[str] | Mapping[str, str]]] | None = None,
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
        self._grammar = Grammar(
            specs, mode == "none" or specs == {}, max_string_chars, max_depth, max_whitespace, quotes
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
        return mode != TEXT or k > 0 or bool(self.table.opening_ids)

    @property
    def in_call(self) -> bool:
        """Inside a `<tool_call>` block right now."""
        return self._state[0] == CALL

    def is_allowed(self, token_id: int, tokens_left: int | None = None) -> bool:
        """Whether emitting `token_id` keeps the output valid and closable within
        `tokens_left` tokens (this one included; None: no limit)."""
        state = self._state
        table = self.table
        if state is self._text0 and not table.has_lt[token_id]:
            return True
        if table.special[token_id]:
            return state[0] == TEXT
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
            if state[0] != TEXT:
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
        if state[0] == CALL and self.table.plain[token_id]:
            after = self._grammar.extend_plain(state, text)
            if after is not False:  # plain string content
                return after
        return self._grammar.run(state, text)

    def _where(self) -> str:
        mode, k, _ = self._state
        if mode == CALL:
            return f"inside a tool call (shortest close: {self.remaining_cost()} characters)"
        if mode == START:
            return f"here: mode 'required' needs the output to start with {OPEN_TAG!r}"
        return "outside tool calls" if k == 0 else f"after {OPEN_TAG[:k]!r}"
