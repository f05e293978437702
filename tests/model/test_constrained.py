"""Constrained tool-call decoding (model/constrained.py): the grammar, the budget, the modes, and
random "models" driven through it, whose output must always parse (model/toolcalls.py)."""

from __future__ import annotations

import json
import random
import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model.constrained import ToolCallConstraint
from model.constrained_schema import ANY, BOOLEAN, INTEGER, NULL, NUMBER, STRING, type_mask
from model.token_table import TokenTable
from model.toolcalls import (
    CLOSE_TAG,
    OPEN_TAG,
    StreamingToolCallParser,
    ToolCall,
    ToolCallFailed,
    ToolCallFinished,
    ToolCallStarted,
    parse_tool_calls,
    render_tool_calls,
    tool_specs,
)

EOS, IM_START = 0, 1
E_ACUTE, NIHON = "\u00e9", "\u65e5\u672c"  # non-ASCII pieces, written ASCII-only
PIECES = [
    '{"', '":', ' "', '", "', '": {', "}}", "}\n", "[", "],", CLOSE_TAG, OPEN_TAG, "<tool",
    "_call>", "_call>\n{", "_call>!", "<", "</", "name", '"name"', '"arguments"', "\n", "  ",
    "true", "null", "-1", ".5", "e+", "\\u00", "\\n", "\\", E_ACUTE, NIHON, "read_file", "grep",
    "Hello", " world", '"read_file"', ' {"name": "grep", "arguments": {}}\n', '"path"', "path",
    '"count": ', "false", '"tags": [', '"mode"',
]  # fmt: skip
CHARS = [chr(i) for i in range(32, 127)] + ["\t", "\n", "\r", "\x0b", "\x0c", "\x7f"]
VOCAB = ["", "<|im_start|>", *CHARS, *PIECES]
IDS = {text: i for i, text in reversed(list(enumerate(VOCAB))) if text}
TABLE = TokenTable(VOCAB, eos_token_ids=[EOS], special_token_ids=[IM_START])
TOOLS = [
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "grep"}},
    {"name": "g"},
]
NAMES = {"read_file", "grep", "g"}
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make(**kwargs) -> ToolCallConstraint:
    kwargs.setdefault("tools", TOOLS)
    return ToolCallConstraint(TABLE, **kwargs)


def feed(c: ToolCallConstraint, text: str) -> ToolCallConstraint:
    for ch in text:
        c.advance(IDS[ch])
    return c


def accepts(text: str, **kwargs) -> bool:
    """Whether the constraint takes `text` one character at a time."""
    c = make(**kwargs)
    for ch in text:
        if not c.is_allowed(IDS[ch]):
            return False
        c.advance(IDS[ch])
    return True


def tokenize(text: str) -> list[int]:
    """Greedy longest match over VOCAB."""
    ids, i = [], 0
    while i < len(text):
        length = max(n for n in range(1, 40) if text[i : i + n] in IDS)
        ids.append(IDS[text[i : i + length]])
        i += length
    return ids


CALL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'


# --- the grammar -----------------------------------------------------------------------------


def test_rendered_call_is_accepted_by_tokens_and_by_characters():
    text = "Sure.\n" + render_tool_calls(
        [ToolCall("read_file", {"path": E_ACUTE + "/a.py", "n": [1, -2.5e3]})]
    )
    for ids in (tokenize(text), [IDS[ch] for ch in text]):
        c = make()
        for token in ids:
            assert c.is_allowed(token, 10_000), (VOCAB[token], c._where())
            c.advance(token)
        assert not c.in_call and c.remaining_cost() == 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)  # fmt: skip


@SETTINGS
@given(
    name=st.sampled_from(sorted(NAMES)),
    arguments=st.dictionaries(st.text(max_size=5), json_values, max_size=4),
    indent=st.sampled_from([None, 1, 2]),
)
def test_any_json_arguments_are_accepted(name, arguments, indent):
    # ensure_ascii: every character of the text then has a single-character token
    body = {"name": name, "arguments": arguments}
    text = f"{OPEN_TAG}\n{json.dumps(body, indent=indent)}\n{CLOSE_TAG} after"
    assert accepts(text)
    assert accepts(text, tools=None)
    c = feed(make(), text)
    assert not c.in_call and c.remaining_cost() == 0
    assert parse_tool_calls(text).tool_calls[0].arguments == arguments


@pytest.mark.parametrize(
    ("prefix", "good", "bad"),
    [
        ("<tool_call>", [" ", "\n", "{"], ["x", "[", '"', CLOSE_TAG]),
        ("<tool_call>{", ['"name"', " "], ['"arguments"', "}", "name"]),
        ('<tool_call>{"name": "', ["read_file", "r", "g"], ["x", '"', "R"]),
        ('<tool_call>{"name": "read', ["_"], ['"', "e", " "]),
        ('<tool_call>{"name": "g', ['"', "r"], ["x"]),
        ('<tool_call>{"name": "grep"', [",", " "], ["}", ":"]),
        ('<tool_call>{"name": "grep", "arguments": ', ["{"], ["[", '"', "1", "null"]),
        ('<tool_call>{"name": "grep", "arguments": {', ['"', "}", " "], ["1", "a", ","]),
        ('<tool_call>{"name": "grep", "arguments": {"a": ', ['"', "-1", "[", "{", "t", "n", "f"], ["}", "x", "+"]),
        ('<tool_call>{"name": "grep", "arguments": {"a": "', [E_ACUTE, NIHON, "\\", "<", CLOSE_TAG], ["\n", "\t"]),
        ('<tool_call>{"name": "grep", "arguments": {"a": "\\', ["n", '"', "u", "/"], ["x", "'"]),
        ('<tool_call>{"name": "grep", "arguments": {"a": "\\u00', ["e", "F", "9"], ["g", '"']),
        ('<tool_call>{"name": "grep", "arguments": {"a": 0', [".", "e", "}", ","], ["1", "x"]),
        ('<tool_call>{"name": "grep", "arguments": {"a": "x = "', ["}", ",", " ", "\n", "y", "{", '"', "<"], []),
        ('<tool_call>{"name": "grep", "arguments": {"a": "x = " ', ["}", ",", "y", "(", " "], []),
        ('<tool_call>{"name": "grep", "arguments": {"a": "x = "\n', ["}", ",", " "], ["y", '"']),
        ('<tool_call>{"name": "grep", "arguments": {"a": "x = "y', ['"', "}"], ["\n"]),
        ('<tool_call>{"name": "grep", "arguments": {"a": "f(x)"', ["}", ",", " ", "\n"], ["y", "{", '"', "<", "&"]),
        ('<tool_call>{"name": "grep", "arguments": {"a": "f("x")"', ["}", ",", " "], ["y", '"']),
        ('<tool_call>{"name": "grep", "arguments": {"a": "f(x)" ', ["}", ",", " "], ["y", "&"]),
        ('<tool_call>{"name": "grep", "arguments": {"a": {"b": "x"', ["}", ","], ["y"]),
        ('<tool_call>{"name": "grep", "arguments": {"a": ["x"', ["]", ","], ["y"]),
        ('<tool_call>{"name": "grep", "arguments": {"a"', [":"], ["y"]),
        ('<tool_call>{"name": "grep", "arguments": {"a": -', ["1", "0"], ["}", "."]),
        ('<tool_call>{"name": "grep", "arguments": {"a": 1.', ["5"], ["}", "e"]),
        ('<tool_call>{"name": "grep", "arguments": {"a": 1e', ["+", "5"], ["}"]),
        ('<tool_call>{"name": "grep", "arguments": {"a": tr', ["u"], ["e", "}"]),
        ('<tool_call>{"name": "grep", "arguments": {"a": [', ["]", "1", "[", " "], ["}", ","]),
        ('<tool_call>{"name": "grep", "arguments": {"a": [1', ["],", ",", "]"], ["}"]),
        ('<tool_call>{"name": "grep", "arguments": {"a": 1}', ["}", " "], [",", CLOSE_TAG]),
        ('<tool_call>{"name": "grep", "arguments": {}}', [CLOSE_TAG, "\n", "<", "</"], ["x", "}", OPEN_TAG]),
        (CALL, ["Hello", OPEN_TAG, CLOSE_TAG, "}}"], []),
    ],
)  # fmt: skip
def test_grammar(prefix, good, bad):
    c = feed(make(), prefix)
    for text in good:
        assert c.is_allowed(IDS[text]), (prefix, text)
    for text in bad:
        assert not c.is_allowed(IDS[text]), (prefix, text)


def test_a_bare_quote_in_an_argument_value_is_literal_unless_the_value_ends_there():
    """Code copied into an argument keeps its quotes unescaped: the quote waits for the next
    character, and the parser reads the text the same way."""
    c = make()
    text = ('<tool_call>{"name": "grep", "arguments": {"a": "    return f"{v}" if "x" in d else ", '
            '"b": "say "hi"" }}</tool_call>')
    for ch in text:
        c.advance(TABLE.char_ids[ch])
    assert not c.in_call
    assert [(call.name, call.arguments) for call in parse_tool_calls(text).tool_calls] == [("grep", {"a": '    return f"{v}" if "x" in d else ',
                                                             "b": 'say "hi"'})]
    pending = feed(make(), '<tool_call>{"name": "grep", "arguments": {"a": "x"  ')
    assert pending.remaining_cost() == len("}}</tool_call>")
    assert TABLE.strings[pending.fallback_token()] == "}"


identifiers = st.text("abfrxyz_0", min_size=1, max_size=4)
string_literals = st.builds(
    lambda prefix, opener, text: f'{opener}{prefix}"{text}"',
    st.sampled_from(["", "f", "rb"]), st.sampled_from(["(", " ", "[", " = ", "{"]),
    st.text("ab {}()=.:'-", max_size=6),
)  # fmt: skip
code_lines = st.lists(
    identifiers | string_literals | st.sampled_from([" ", "(", ")", "[", "]", ".", " + ", ", "]),
    max_size=8,
).map("".join).filter(lambda code: not re.search(r'"\s*[,}]', code))


@SETTINGS
@given(code=code_lines)
def test_code_copied_with_bare_quotes_reads_back_exactly(code):
    """A line of code with unescaped string literals, copied into an argument, is accepted
    character by character and read back as written (a quote before `,` or `}` would end the
    value: excluded here)."""
    text = f'<tool_call>{{"name": "grep", "arguments": {{"a": "{code}", "b": "{code}"}}}}</tool_call>'
    assert accepts(text), code
    assert call_arguments(text) == {"a": code, "b": code}
    for cut in range(0, len(text), 7):  # streamed in pieces, the quotes are read the same
        parser = StreamingToolCallParser()
        events = parser.feed(text[:cut]) + parser.feed(text[cut:]) + parser.finish()
        assert [e.call.arguments for e in events if isinstance(e, ToolCallFinished)] == [
            {"a": code, "b": code}
        ]


@SETTINGS
@given(code=code_lines, tail=st.text("ab&|=(", min_size=1, max_size=4))
def test_a_stray_quote_after_copied_code_closes_the_value(code, tail):
    """Where code could have no quote (after `)`, a word or `.`, no code string open), a bare
    quote closes the value: the model cannot run on past a copied line into a longer string."""
    prefix = f'<tool_call>{{"name": "grep", "arguments": {{"a": "{code} x)"'
    assert accepts(prefix)
    assert not feed(make(), prefix).is_allowed(IDS[tail[0]])
    assert not accepts(prefix + " " + tail)
    assert accepts(prefix + " }}</tool_call>")
    assert call_arguments(prefix + "}}</tool_call>") == {"a": code + " x)"}


def test_a_quote_in_an_open_code_string_and_after_escapes_may_be_literal():
    for value, expected in [
        ('f("x) y" z)', 'f("x) y" z)'),  # a quote closing a code string is literal
        ('f(\\"hi\\")"x', None),  # escaped quotes leave no code string open: `)"` closes
        ('a\\n"b" c', 'a\n"b" c'),  # after an escape, as at a line's start
    ]:
        text = f'<tool_call>{{"name": "grep", "arguments": {{"a": "{value}"}}}}</tool_call>'
        if expected is None:
            assert not accepts(text)
            continue
        assert accepts(text), value
        assert call_arguments(text) == {"a": expected}


def call_arguments(text: str) -> dict:
    message = parse_tool_calls(text)
    assert message.errors == [], message.errors
    return message.tool_calls[0].arguments


def test_free_text_and_tags_split_across_tokens():
    c = make()
    assert all(c.is_allowed(IDS[t]) for t in ["Hello", "<", "</", CLOSE_TAG, "}}", NIHON, "\\"])
    feed(c, "Hi <")
    assert c.is_allowed(IDS["<tool"]) and c.is_allowed(IDS["<"]) and c.is_allowed(IDS["Hello"])
    c.advance(IDS["<tool"])  # now "<<tool": the tag restarted at the second '<'
    assert c.is_allowed(IDS["_call>\n{"]) and not c.is_allowed(IDS["_call>!"])
    assert c.is_allowed(IDS["_call>"]) and c.is_allowed(IDS[" world"])
    assert c.is_allowed(EOS) and not c.in_call
    c.advance(IDS["_call>\n{"])
    assert c.in_call and not c.is_allowed(EOS) and not c.is_allowed(IM_START)


def test_a_whole_call_in_one_token_is_checked():
    c = make(tools=[{"name": "grep"}])
    assert c.is_allowed(IDS[' {"name": "grep", "arguments": {}}\n'])
    c.advance(IDS[OPEN_TAG])
    c.advance(IDS[' {"name": "grep", "arguments": {}}\n'])
    assert c.is_allowed(IDS[CLOSE_TAG])
    assert not feed(make(tools=[{"name": "read_file"}]), OPEN_TAG).is_allowed(
        IDS[' {"name": "grep", "arguments": {}}\n']
    )


def test_tools_none_allows_any_nonempty_name():
    name = "any.thing-" + E_ACUTE + "_1:x"
    assert accepts(f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>', tools=None)
    for name in ['""', ' ""', '"a b', '"\\n', '"\t', '"x\\']:
        assert not accepts('<tool_call>{"name": ' + name, tools=None), name
    assert accepts('<tool_call>{"name": "x', tools=None)
    assert not accepts('<tool_call>{"name": "x', tools=[{"name": "y"}])


def test_tool_names_that_need_escaping():
    tools = [{"name": 'say"hi\\'}]
    text = render_tool_calls([ToolCall('say"hi\\', {})])
    assert accepts(text, tools=tools)
    assert [c.name for c in parse_tool_calls(text).tool_calls] == ['say"hi\\']


def test_special_tokens():
    c = make()
    assert c.is_allowed(EOS) and c.is_allowed(IM_START)
    c.advance(IM_START)  # no text: the state does not move
    feed(c, OPEN_TAG)
    for token in (EOS, IM_START):
        assert not c.is_allowed(token, 1000)
        with pytest.raises(ValueError, match="not allowed inside a tool call"):
            c.advance(token)


def test_advance_rejects_forbidden_tokens():
    c = feed(make(), OPEN_TAG)
    with pytest.raises(ValueError, match=r"token \d+ \('x'\) is not allowed inside a tool call"):
        c.advance(IDS["x"])
    assert c.is_allowed(IDS["{"])  # the state is unchanged


# --- modes -----------------------------------------------------------------------------------


def test_mode_required_starts_with_a_call():
    c = make(mode="required")
    assert c.is_constraining
    for text in ["Hello", " ", "\n", "x", "</"]:
        assert not c.is_allowed(IDS[text])
    assert not c.is_allowed(EOS) and not c.is_allowed(IM_START)
    assert c.is_allowed(IDS["<"]) and c.is_allowed(IDS["<tool"]) and c.is_allowed(IDS[OPEN_TAG])
    feed(c, "<tool_c")
    assert not c.is_allowed(IDS["Hello"]) and c.is_allowed(IDS["a"])
    feed(c, CALL[len("<tool_c") :])
    assert c.is_allowed(IDS["Hello"]) and c.is_allowed(EOS) and c.is_allowed(IDS[OPEN_TAG])
    with pytest.raises(ValueError, match="at least one tool"):
        make(mode="required", tools=[])


def test_mode_none_never_opens_a_call():
    c = make(mode="none")
    assert not c.is_allowed(IDS[OPEN_TAG]) and c.is_allowed(IDS["<tool"])
    feed(c, "<tool")
    assert not c.is_allowed(IDS["_call>"]) and not c.is_allowed(IDS["_call>\n{"])
    assert c.is_allowed(IDS["Hello"]) and c.is_allowed(EOS)
    assert c.first_allowed([IDS["_call>"]]) == EOS
    no_tools = make(tools=[])  # an empty tools list leaves nothing to call
    assert not no_tools.is_allowed(IDS[OPEN_TAG])


def test_is_constraining():
    without_tag_token = ToolCallConstraint([t for t in VOCAB if OPEN_TAG not in t], tools=TOOLS)
    assert not without_tag_token.is_constraining
    without_tag_token.advance(without_tag_token.table.char_ids["<"])
    assert without_tag_token.is_constraining
    c = make()
    assert c.is_constraining  # the vocabulary has a token holding the whole tag
    feed(c, OPEN_TAG)
    assert c.is_constraining and c.in_call


# --- budget ----------------------------------------------------------------------------------


def test_budget_forces_the_close():
    c = feed(make(), '<tool_call>{"name": "grep", "arguments": {"a": ["x')
    cost = c.remaining_cost()
    assert cost == len('"]}}</tool_call>')
    assert c.is_allowed(IDS["y"], cost + 1) and not c.is_allowed(IDS["y"], cost)
    assert c.is_allowed(IDS['"'], cost) and not c.is_allowed(IDS["["], cost)
    out = []
    for left in range(cost, 0, -1):
        token = c.first_allowed([IDS["y"], IDS[","], IDS["]"]], left)
        out.append(VOCAB[token])
        c.advance(token)
    assert "".join(out) == '"]}}</tool_call>' and not c.in_call


def test_budget_in_free_text_blocks_calls_that_cannot_close():
    c = make(tools=[{"name": "g"}])
    cost = feed(make(tools=[{"name": "g"}]), OPEN_TAG).remaining_cost()
    assert cost == len('{"name":"g","arguments":{}}</tool_call>')
    assert c.is_allowed(IDS[OPEN_TAG], cost + 1) and not c.is_allowed(IDS[OPEN_TAG], cost)
    assert c.is_allowed(IDS["Hello"], 1) and c.is_allowed(IDS["<tool"], 1)
    assert c.first_allowed([IDS[OPEN_TAG]], 3) == EOS


def test_budget_already_too_small_still_makes_progress():
    c = make(mode="required")
    assert c.remaining_cost() > 5
    out = []
    for _ in range(c.remaining_cost()):
        token = c.first_allowed([IDS["Hello"]], 1)
        out.append(VOCAB[token])
        c.advance(token)
    assert "".join(out) == '<tool_call>{"name":"g","arguments":{}}</tool_call>'


def test_caps():
    c = feed(make(max_string_chars=5), '<tool_call>{"name": "grep", "arguments": {"a": "abcd')
    assert c.is_allowed(IDS["e"]) and not c.is_allowed(IDS[NIHON])
    feed(c, "e")
    assert not c.is_allowed(IDS["f"]) and not c.is_allowed(IDS["\\"]) and c.is_allowed(IDS['"'])
    c = feed(make(max_string_chars=3), '<tool_call>{"name": "grep", "arguments": {"a": 123')
    assert not c.is_allowed(IDS["4"]) and c.is_allowed(IDS["}"])
    c = feed(make(max_depth=2), '<tool_call>{"name": "grep", "arguments": {"a": [')
    assert not c.is_allowed(IDS["["]) and not c.is_allowed(IDS["{"]) and c.is_allowed(IDS["1"])
    c = feed(make(max_whitespace=3), "<tool_call>   ")
    assert not c.is_allowed(IDS[" "]) and c.is_allowed(IDS["{"])
    with pytest.raises(ValueError, match="at least 1"):
        make(max_depth=0)


def test_first_allowed_falls_back_to_the_shortest_completion():
    c = feed(make(), '<tool_call>{"name": "read_file", "arguments": {"p": ')
    assert c.first_allowed([IDS["x"], IDS["}"]], 100) == IDS["0"]
    assert c.first_allowed([IDS["x"], IDS['"']], 100) == IDS['"']
    assert c.first_allowed([], 100) == IDS["0"]


# --- a random "model" ------------------------------------------------------------------------

STRUCTURAL = [IDS[t] for t in PIECES] + [IDS[ch] for ch in '{}[]":, 0123456789tfn\\']


def drive(
    seed: int, mode: str, max_tokens: int, tools: list | None
) -> tuple[str, ToolCallConstraint, int]:
    """A random "model" proposing a few random ids, mostly structural pieces; the constraint
    picks. A streaming parser reads along: it is inside a block exactly when the constraint is
    inside a call."""
    rng = random.Random(seed)
    c = ToolCallConstraint(TABLE, tools=tools, mode=mode)  # type: ignore[arg-type]
    parser, open_blocks = StreamingToolCallParser(), 0
    cost0, out = c.remaining_cost(), []
    for step in range(max_tokens):
        left = max_tokens - step
        if cost0 <= max_tokens:
            assert c.remaining_cost() <= left
        pool = STRUCTURAL if rng.random() < 0.7 else range(len(VOCAB))
        candidates = [rng.choice(pool) for _ in range(rng.choice([1, 2, 5, 20]))]
        token = c.first_allowed(candidates, left)
        assert c.is_allowed(token, left)
        if c.in_call:
            assert token not in (EOS, IM_START)
        c.advance(token)
        if token == EOS:
            break
        out.append(TABLE.strings[token] if token != IM_START else "")
        for event in parser.feed(out[-1]):
            open_blocks += isinstance(event, ToolCallStarted)
            open_blocks -= isinstance(event, ToolCallFinished | ToolCallFailed)
        assert open_blocks == c.in_call
    return "".join(out), c, cost0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32),
    mode=st.sampled_from(["auto", "required", "none"]),
    max_tokens=st.integers(1, 400),
    with_tools=st.booleans(),
)
def test_random_model_output_always_parses(seed, mode, max_tokens, with_tools):
    tools = TOOLS if with_tools else None
    text, c, cost0 = drive(seed, mode, max_tokens, tools)
    if cost0 > max_tokens and (c.in_call or OPEN_TAG.startswith(text)):
        assert mode == "required"  # too few tokens for any call (unless long tokens helped)
        return
    assert not c.in_call
    message = parse_tool_calls(text, tools=tools)
    assert message.errors == [], (text, message.errors)
    assert {call.name for call in message.tool_calls} <= (
        NAMES if with_tools else {call.name for call in message.tool_calls}
    )
    assert all(call.name for call in message.tool_calls)
    if mode == "required":
        assert text.startswith(OPEN_TAG) and message.tool_calls
    if mode == "none":
        assert OPEN_TAG not in text and not message.tool_calls


def test_many_calls_from_a_biased_model():
    """A model that loves tags: many calls per message, all well-formed."""
    total = 0
    for seed in range(40):
        text, c, _ = drive(seed, "auto", 600, TOOLS)
        message = parse_tool_calls(text, tools=TOOLS)
        assert message.errors == [] and not c.in_call
        total += len(message.tool_calls)
    assert total > 40


# --- tables, errors, cost --------------------------------------------------------------------


@pytest.mark.parametrize("tokens_left", [None, 10_000])
def test_only_allowed_equals_a_scan_of_the_vocabulary(tokens_left):
    """At every state of a message with calls (its own tokens and character by character), for
    each allowed token: forced exactly when no other token of the vocabulary is allowed."""
    text = "Sure.\n" + render_tool_calls([ToolCall("read_file", {"path": E_ACUTE + "/a.py", "n": [1, -2.5e3]})])
    forced_seen = 0
    for ids in (tokenize(text), [IDS[ch] for ch in text]):
        c = make()
        for token in ids:
            allowed = [t for t in range(len(VOCAB)) if c.is_allowed(t, tokens_left)]
            for t in allowed:
                assert c.only_allowed(t, [], tokens_left) == (allowed == [t]), (VOCAB[t], c._where())
                assert not c.only_allowed(t, allowed, tokens_left) or allowed == [t]
            forced_seen += len(allowed) == 1
            c.advance(token)
    assert forced_seen > 10  # states with one allowed token were met


def test_token_table():
    assert TABLE.special[EOS] and TABLE.special[IM_START] and not TABLE.special[IDS["a"]]
    assert TABLE.has_lt[IDS["<tool"]] and not TABLE.has_lt[IDS["Hello"]]
    assert TABLE.plain[IDS[NIHON]] and not TABLE.plain[IDS['{"']] and not TABLE.plain[IDS["\n"]]
    assert TABLE.char_ids["\n"] == VOCAB.index("\n")
    assert TABLE.opening_ids == [IDS[OPEN_TAG]]
    assert TABLE.special_ids == [EOS, IM_START] and IDS["Hello"] in TABLE.by_first_char["H"]
    assert not any(TABLE.special[i] for ids in TABLE.by_first_char.values() for i in ids)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        TokenTable(["a"], eos_token_ids=[3])


def test_construction_errors():
    with pytest.raises(ValueError, match="mode must be"):
        make(mode="sometimes")
    with pytest.raises(ValueError, match="lacks single-character tokens"):
        ToolCallConstraint(["<tool_call>", "a"], tools=None)
    with pytest.raises(ValueError, match="give eos/special token ids to the TokenTable"):
        ToolCallConstraint(TABLE, eos_token_ids=[0])


def test_is_allowed_is_cheap():
    """Loose bound (real numbers are in the module docstring): a few microseconds a token, in
    this thread's CPU time, which other processes on a busy machine do not stretch."""
    text = "Looking.\n" + render_tool_calls(
        [ToolCall("grep", {"pattern": "def f\\(", "n": [1, 2.5]})] * 3
    )
    ids = tokenize(text)
    start = time.thread_time()
    for _ in range(20):
        c = make()
        for token in ids:
            assert c.is_allowed(token, 10_000)
            c.advance(token)
    per_token = (time.thread_time() - start) / (20 * len(ids))
    assert per_token < 100e-6, f"{per_token * 1e6:.1f} us per token"


# --- schema-aware arguments ------------------------------------------------------------------


def tool(name: str, properties: dict | None = None, required=(), **extra) -> dict:
    params = {"type": "object", **extra}
    if properties is not None:
        params["properties"] = properties
    if required:
        params["required"] = list(required)
    return {"type": "function", "function": {"name": name, "parameters": params}}


SCHEMA_TOOLS = [
    tool("read_file", {"path": {"type": "string"}, "count": {"type": "integer"}}, ["path"]),
    tool("find", {"path": {"type": "string"}, "tags": {"type": "array"}, "deep": {"type": "boolean"},
                  "mode": {"enum": ["a", "b"]}, "n": {"type": ["number", "null"]}, "opts": {"type": "object"}},
         ["tags", "deep"]),
    tool("loose", {"count": {"type": "integer"}}, ["count", "path"], additionalProperties=True),
    tool("only_required", None, ["path"]),
    tool("closed_empty", {}),
    {"name": "grep"},
]  # fmt: skip
ARGS = '<tool_call>{"name": "read_file", "arguments": {'
FIND = '<tool_call>{"name": "find", "arguments": {'
LOOSE = '<tool_call>{"name": "loose", "arguments": {'
_MATCHES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def check_arguments(call: ToolCall, tools: list) -> None:
    """Keys, value types and required keys of a call against its tool's schema."""
    params = tool_specs(tools)[call.name]
    props, required = params.get("properties"), params.get("required", [])
    assert set(required) <= set(call.arguments), call
    if props is not None and params.get("additionalProperties") is not True:
        assert set(call.arguments) <= set(props) | set(required), call
    for key, value in call.arguments.items():
        prop = (props or {}).get(key, {})
        if "type" in prop:
            types = [prop["type"]] if isinstance(prop["type"], str) else prop["type"]
            assert any(_MATCHES[t](value) for t in types), (key, value, prop)
        if "enum" in prop:
            assert isinstance(value, str), (key, value)


@pytest.mark.parametrize(
    ("prefix", "good", "bad"),
    [
        (ARGS, ['"path"', '"count": ', " ", '"'], ["}", '"mode"', "path", '"x']),
        (ARGS + '"p', ["a"], ['"', "x"]),
        (ARGS + '"path"', [":", " "], [","]),
        (ARGS + '"path": ', ['"'], ["0", "[", "{", "t", "n", "-1"]),
        (ARGS + '"path": "a"', ["}", "}}", ",", " "], []),
        (ARGS + '"path": "a", ', ['"count": ', '"'], ['"path"', "}"]),
        (ARGS + '"path": "a", "count": ', ["0", "-1", "1"], ['"', "true", "null", "[", "{"]),
        (ARGS + '"path": "a", "count": 1', ["0", "}"], [".5", "e+", ".", "e"]),
        (ARGS + '"path": "a", "count": 1}', ["}"], [","]),
        (ARGS + '"count": 1', [","], ["}", "}}"]),
        (ARGS + '"count": 1, ', ['"path"'], ['"count": ', "}"]),
        (FIND, ['"tags": [', '"mode"', '"'], ["}"]),
        (FIND + '"tags": ', ["[", " "], ['"', "{", "1", "n"]),
        (FIND + '"deep": ', ["t", "f", "false", "true"], ["n", '"', "0"]),
        (FIND + '"mode": ', ['"'], ["0", "n", "["]),
        (FIND + '"n": ', ["n", "null", "1", "-1", "5"], ['"', "t", "["]),
        (FIND + '"n": 1', [".5", "e+"], []),
        (FIND + '"opts": ', ["{"], ["[", '"', "1"]),
        (FIND + '"opts": {"x": [{"y": ', ['"', "1", "{", "null"], ["}"]),
        (FIND + '"tags": [], "deep": true', ["}"], []),
        (LOOSE, ['"path"', '"count": ', '"x', '"'], ["}"]),
        (LOOSE + '"x', ["y", "_", '"', "path"], ["\\", "\n"]),
        (LOOSE + '"path": ', ['"', "1", "[", "{", "null"], []),
        (LOOSE + '"path": 1, "path', ["s"], ['"']),
        (LOOSE + '"count": ', ["1"], ['"']),
        ('<tool_call>{"name": "only_required", "arguments": {', ['"path"', '"x'], ["}"]),
        ('<tool_call>{"name": "closed_empty", "arguments": {', ["}", " "], ['"']),
        ('<tool_call>{"name": "grep", "arguments": {', ['"', "}"], []),
    ],
)  # fmt: skip
def test_schema_grammar(prefix, good, bad):
    assert accepts(prefix, tools=SCHEMA_TOOLS), prefix
    for text in good:
        assert accepts(prefix + text, tools=SCHEMA_TOOLS), (prefix, text)
    for text in bad:
        assert not accepts(prefix + text, tools=SCHEMA_TOOLS), (prefix, text)


def test_schema_valid_calls_are_accepted():
    calls = [
        ToolCall("read_file", {"path": "a.py", "count": -3}),
        ToolCall("read_file", {"count": 0, "path": E_ACUTE}),
        ToolCall(
            "find", {"n": None, "deep": False, "tags": [1, {"a": []}], "mode": "b", "opts": {}}
        ),
        ToolCall("find", {"tags": [], "deep": True, "n": -2.5e3, "path": "x"}),
        ToolCall("loose", {"count": 1, "path": [True], "other": {"x": 1}}),
        ToolCall("only_required", {"path": 1, "else": "y"}),
        ToolCall("closed_empty", {}),
        ToolCall("grep", {"anything": [1]}),
    ]
    text = render_tool_calls(calls)
    assert accepts(text, tools=SCHEMA_TOOLS)
    message = parse_tool_calls(text, tools=SCHEMA_TOOLS)
    assert message.errors == [] and len(message.tool_calls) == len(calls)
    for call in message.tool_calls:
        check_arguments(call, SCHEMA_TOOLS)


def test_budget_adds_the_missing_required_keys():
    tools = [tool("t", {"path": {"type": "string"}, "n": {"type": "integer"}, "on": {"type": "boolean"},
                        "x": {"type": "null"}, "tags": {"type": "array"}}, ["path", "n", "on", "tags"])]  # fmt: skip
    c = make(tools=tools)
    shortest = (
        '<tool_call>{"name":"t","arguments":{"path":"","n":0,"on":false,"tags":[]}}</tool_call>'
    )
    assert c.remaining_cost() == 0 and feed(make(tools=tools), OPEN_TAG).remaining_cost() == len(
        shortest
    ) - len(OPEN_TAG)
    assert not c.is_allowed(IDS[OPEN_TAG], len(shortest) - len(OPEN_TAG))
    feed(c, '<tool_call>{"name": "t", "arguments": {"on": true, "path": "ab')
    cost = c.remaining_cost()
    assert cost == len('","n":0,"tags":[]}}</tool_call>')
    assert c.is_allowed(IDS["c"], cost + 1) and not c.is_allowed(IDS["c"], cost)
    out = []
    for left in range(cost, 0, -1):
        token = c.first_allowed([IDS["}"], IDS["c"], IDS["}}"], IDS["x"]], left)
        out.append(VOCAB[token])
        c.advance(token)
    assert "".join(out) == '","n":0,"tags":[]}}</tool_call>' and not c.in_call
    # mode "required" with too few tokens still writes a valid call, required keys included
    c, out = make(mode="required", tools=tools), []
    for _ in range(c.remaining_cost()):
        token = c.first_allowed([IDS["Hello"], IDS["}"]], 1)
        out.append(VOCAB[token])
        c.advance(token)
    assert "".join(out) == shortest


def test_tools_without_schemas_are_unchanged():
    for params in (None, {"type": "object"}, {"type": "object", "additionalProperties": False}):
        tools = [{"name": "g", **({"parameters": params} if params else {})}]
        c = feed(make(tools=tools), OPEN_TAG)
        assert c.remaining_cost() == len('{"name":"g","arguments":{}}</tool_call>')
        assert accepts(
            '<tool_call>{"name": "g", "arguments": {"a": {"b": [1]}, "c": "d"}}</tool_call>',
            tools=tools,
        )


def test_cheapest_name_counts_its_arguments():
    tools = [tool("ab", {"p": {"type": "string"}}, ["p"]), {"name": "abcd"}]
    c = feed(make(tools=tools), '<tool_call>{"name": "ab')
    assert c.remaining_cost() == len('cd","arguments":{}}</tool_call>')  # "abcd" is cheaper
    assert c.first_allowed([], 1000) == IDS["c"]
    assert c.is_allowed(IDS['"'])


def test_type_mask():
    assert type_mask({"type": "string"}) == STRING
    assert type_mask({"type": ["integer", "null"]}) == INTEGER | NULL
    assert (
        type_mask({"enum": ["a", "b"]}) == STRING
        and type_mask({"enum": [1, True]}) == INTEGER | BOOLEAN
    )
    assert type_mask({"type": "number"}) == NUMBER
    assert type_mask({}) == type_mask(None) == type_mask({"type": "weird"}) == ANY


def test_schema_key_characters_must_have_tokens():
    with pytest.raises(ValueError, match="lacks single-character tokens"):
        make(tools=[tool("g", {"\u00ff": {"type": "string"}})])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32),
    mode=st.sampled_from(["auto", "required"]),
    max_tokens=st.integers(1, 400),
)
def test_random_model_output_follows_the_schemas(seed, mode, max_tokens):
    text, c, cost0 = drive(seed, mode, max_tokens, SCHEMA_TOOLS)
    if cost0 > max_tokens and (c.in_call or OPEN_TAG.startswith(text)):
        assert mode == "required"
        return
    assert not c.in_call
    message = parse_tool_calls(text, tools=SCHEMA_TOOLS)
    assert message.errors == [], (text, message.errors)
    for call in message.tool_calls:
        check_arguments(call, SCHEMA_TOOLS)
    if mode == "required":
        assert message.tool_calls


def test_many_schema_calls_from_a_biased_model():
    calls = []
    for seed in range(40):
        text, c, _ = drive(seed, "auto", 600, SCHEMA_TOOLS)
        message = parse_tool_calls(text, tools=SCHEMA_TOOLS)
        assert message.errors == [] and not c.in_call, (text, message.errors)
        calls += message.tool_calls
    for call in calls:
        check_arguments(call, SCHEMA_TOOLS)
    assert len(calls) > 40 and len({call.name for call in calls}) >= 4
    assert any(call.arguments for call in calls)


# --- quoted arguments (model/constrained_quote.py) --------------------------------------------

EDIT_TOOLS = [
    tool("edit_file", {"path": {"type": "string"}, "old_string": {"type": "string"},
                       "new_string": {"type": "string"}, "n": {"type": "integer"}},
         ["path", "old_string", "new_string"]),
    {"name": "grep"},
]  # fmt: skip
SOURCE = 'def f(x):\n    return f"{x}" + \'a\\\\b\'\n\tpass\n'
OTHER = "y = [1, 2]\n"
EDIT = '<tool_call>{"name": "edit_file", "arguments": {"path": "a.py", "old_string": "'


def quoting(**kwargs) -> ToolCallConstraint:
    return make(tools=EDIT_TOOLS, quotes={"edit_file": {"old_string": [SOURCE, OTHER]}}, **kwargs)


def quoted_accepts(text: str) -> bool:
    c = quoting()
    for token in tokenize(text):
        if not c.is_allowed(token):
            return False
        c.advance(token)
    return True


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ('    return f"{x}"', True),  # bare quotes read as literal by the lenient rule
        ('    return f\\"{x}\\"', True),  # the same, escaped
        ("def f(x):\\n    ret", True),  # across a line break
        ("\\tpass\\n", True),
        ("+ 'a\\\\\\\\b'", True),  # the source's two backslashes, escaped
        ("y = [1, 2]", True),  # the other source
        ("", True),
        ("    return g", False),
        ("def f(x):\\t", False),  # the wrong escape
        ("+ 'a\\\\b'", False),  # \b is a backspace, not in the source
        ("\\u0009pass", False),  # \u is refused in a quoted value
        ("def f(x):\\n    return 1", False),
        ("2]\\ny", False),  # each piece is in a source, the whole is in none
    ],
)
def test_a_quoted_argument_stays_a_piece_of_its_sources(value, ok):
    assert quoted_accepts(EDIT + value) == ok, value
    if ok:
        text = EDIT + value + '", "new_string": "anything at all"}}</tool_call>'
        assert quoted_accepts(text)
        (call,) = parse_tool_calls(text, tools=EDIT_TOOLS).tool_calls
        assert call.arguments["old_string"] in SOURCE + "\0" + OTHER


def test_only_the_quoted_key_of_the_offered_tool_is_constrained():
    assert quoted_accepts('<tool_call>{"name": "edit_file", "arguments": {"path": "zzz", "new_string": "q'
                          '", "old_string": "pass"}}</tool_call>')  # fmt: skip
    assert quoted_accepts('<tool_call>{"name": "grep", "arguments": {"old_string": "zzz"}}</tool_call>')
    assert accepts(EDIT + "zzz", tools=EDIT_TOOLS)  # no quotes given
    unread = make(tools=EDIT_TOOLS, quotes={"edit_file": {"old_string": []}, "not_offered": {"a": ["x"]}})
    assert feed(unread, EDIT + "zzz").in_call  # no texts: nothing to copy from, not constrained
    for key in ("n", "missing"):
        with pytest.raises(ValueError, match="no string argument"):
            make(tools=EDIT_TOOLS, quotes={"edit_file": {key: [SOURCE]}})


def test_a_quoted_argument_never_leads_into_a_dead_end():
    """A backslash is taken only when an escape after it continues the match, and the shortest
    way forward after it is such an escape; closing stays allowed, at the grammar's cost."""
    c = feed(quoting(), EDIT + "def f(x):")
    assert c.is_allowed(IDS["\\"]) and not feed(quoting(), EDIT + "def f(x)").is_allowed(IDS["\\"])
    cost = c.remaining_cost()
    c.advance(IDS["\\"])
    assert TABLE.strings[c.fallback_token()] == "n"
    assert c.remaining_cost() == cost + 1  # the escape's letter
    assert c.first_allowed([IDS["x"], IDS["t"]], 100) == IDS["n"]
    closing = feed(quoting(), EDIT + "    retur")
    assert closing.first_allowed([IDS["x"], IDS['"']], 100) == IDS['"']
    assert closing.first_allowed([IDS["x"], IDS["q"]], 100) == IDS['"']  # the shortest way: close


def test_a_random_model_writes_only_quoted_old_strings():
    """A random model copying from a source with slips, from inside an old_string: every call
    parses, and every old_string written is a piece of a source (many of them long)."""
    escaped = json.dumps(SOURCE + OTHER)[1:-1]  # copied, escapes and all, from a cursor
    copied = []
    for seed in range(100):
        rng = random.Random(seed)
        c, out, max_tokens = feed(quoting(), EDIT), [EDIT], rng.randrange(60, 300)
        cursor = rng.randrange(len(escaped))
        for step in range(max_tokens):
            candidates = [rng.choice(STRUCTURAL if rng.random() < 0.5 else range(len(VOCAB)))
                          for _ in range(rng.choice([1, 3, 10]))]  # fmt: skip
            if rng.random() < 0.9:
                candidates.insert(0, IDS[escaped[cursor % len(escaped)]])
            token = c.first_allowed(candidates, max_tokens - step)
            cursor += token == candidates[0] or rng.random() < 0.05
            c.advance(token)
            if token == EOS:
                break
            out.append(TABLE.strings[token] if token != IM_START else "")
        text = "".join(out)
        message = parse_tool_calls(text, tools=EDIT_TOOLS)
        assert message.errors == [] and message.tool_calls, text
        for call in message.tool_calls:
            if call.name == "edit_file" and "old_string" in call.arguments:
                value = call.arguments["old_string"]
                assert value in SOURCE or value in OTHER, (value, text)
                copied.append(value)
    assert sum(len(v) > 10 for v in copied) >= 8, copied


@pytest.mark.parametrize(
    ("path", "value", "ok"),
    [
        ("a.py", "def f", True),
        ("a.py", "y = [1", False),  # in the other file: edit_file would not find it here
        ("sub/b.py", "y = [1", True),
        ("sub\\/b.py", "y = [1", True),  # the path as decoded
        ("sub/b.py", "def f", False),
        ("c.py", "y = [1", True),  # a file not read: any source
        ("\\u0061.py", "y = [1", True),  # a path written with \u: not matched, any source
    ],
)
def test_sources_keyed_by_path_follow_the_calls_path(path, value, ok):
    files = {"a.py": SOURCE, "sub/b.py": OTHER}
    c = make(tools=EDIT_TOOLS, quotes={"edit_file": {"old_string": files}})
    text = f'<tool_call>{{"name": "edit_file", "arguments": {{"path": "{path}", "old_string": "{value}'
    ok_so_far = True
    for token in tokenize(text):
        if not c.is_allowed(token):
            ok_so_far = False
            break
        c.advance(token)
    assert ok_so_far == ok, (path, value)
    # written before the path, the value may come from any file
    either = make(tools=EDIT_TOOLS, quotes={"edit_file": {"old_string": files}})
    assert feed(either, '<tool_call>{"name": "edit_file", "arguments": {"old_string": "' + value).in_call
    with pytest.raises(ValueError, match="no string argument"):
        make(tools=EDIT_TOOLS, quotes={"edit_file": {"path": files}})


def test_quoting_with_the_real_vocabulary_follows_the_path(real_tokenizer):
    """With SmolLM2's tokens (the path closed by `",`, the value opened by ` "`), the path is
    recorded and another file's line is refused token by token."""
    tok = real_tokenizer
    table = TokenTable(tok.token_strings(), [tok.eos_token_id], tok.special_token_ids)
    files = {"pkg/a.py": SOURCE, "pkg/b.py": OTHER}
    head = '<tool_call>\n{"name": "edit_file", "arguments": {"path": "pkg/b.py", "old_string": "'

    def written(value: str) -> str:
        c = ToolCallConstraint(table, tools=EDIT_TOOLS, quotes={"edit_file": {"old_string": files}})
        out = ""
        for token in tok.encode(head + value):
            if not c.is_allowed(token):
                return out
            c.advance(token)
            out += table.strings[token]
        return out

    assert written("y = [1, 2]") == head + "y = [1, 2]"
    refused = written("    return f")
    assert refused.startswith(head) and len(refused) < len(head + "    return f")
