"""Tool-call parsing (model/toolcalls.py): the forgiving decoder, its errors, validation against
tools, and the streaming parser against the whole-text parser on random splits and garbage."""

from __future__ import annotations

import json
import random
import re
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from jinja2.sandbox import ImmutableSandboxedEnvironment

from model.toolcalls import (
    CLOSE_TAG,
    OPEN_TAG,
    ParsedMessage,
    StreamingToolCallParser,
    TextDelta,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallFailed,
    ToolCallFinished,
    ToolCallStarted,
    collect,
    normalize_content,
    parse_tool_calls,
    render_tool_calls,
    tool_specs,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {"type": "object", "required": ["path"]},
        },
    },
    {"type": "function", "function": {"name": "grep", "parameters": {"required": ["pattern"]}}},
    {"type": "function", "function": {"name": "list_dir"}},
]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def block(body: str) -> str:
    return f"{OPEN_TAG}{body}{CLOSE_TAG}"


def call_tuples(message: ParsedMessage) -> list[tuple[str, dict]]:
    return [(c.name, c.arguments) for c in message.tool_calls]


def summary(message: ParsedMessage) -> tuple:
    """Everything but the random ids."""
    calls = [(c.name, c.arguments, c.raw) for c in message.tool_calls]
    errors = [(e.index, e.message, e.raw) for e in message.errors]
    return message.content, calls, errors


def stream(text: str, cuts: list[int], tools: list | None = None) -> list:
    parser = StreamingToolCallParser(tools=tools)
    events, last = [], 0
    for cut in sorted(cuts):
        events += parser.feed(text[last:cut])
        last = cut
    return events + parser.feed(text[last:]) + parser.finish()


# --- the whole-text parser -------------------------------------------------------------------


def test_parallel_calls_and_content():
    text = (
        "Let me look.\n"
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "src/a.py"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "grep", "arguments": {"pattern": "foo"}}\n</tool_call>'
    )
    message = parse_tool_calls(text, tools=TOOLS)
    assert message.content == "Let me look."
    assert call_tuples(message) == [
        ("read_file", {"path": "src/a.py"}),
        ("grep", {"pattern": "foo"}),
    ]
    assert message.errors == []
    ids = [c.id for c in message.tool_calls]
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", i) for i in ids) and len(set(ids)) == 2
    assert message.tool_calls[0].arguments_json == '{"path": "src/a.py"}'
    assert message.tool_calls[0].to_openai()["function"] == {
        "name": "read_file",
        "arguments": '{"path": "src/a.py"}',
    }


def test_plain_text_and_empty():
    assert summary(parse_tool_calls("  just text\n")) == ("just text", [], [])
    assert summary(parse_tool_calls("")) == ("", [], [])


@pytest.mark.parametrize(
    ("text", "segments", "content"),
    [
        ("A " + block("{}") + " B", ["A ", " B"], "A\nB"),
        ("  \n" + block("{}") + "\n\n  tail  ", ["  \n", "\n\n  tail  "], "tail"),
        ("x\n\n  y\n" + block("{}"), ["x\n\n  y\n", ""], "x\n\n  y"),
        (block("{}") + "\n" + block("{}"), ["", "\n", ""], ""),
    ],
)
def test_content_normalisation_is_defined_per_segment(text, segments, content):
    assert normalize_content(segments) == content
    assert parse_tool_calls(text).content == content
    events = stream(text, list(range(len(text))))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == content


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"name": "grep", "arguments": "{\\"pattern\\": \\"x\\"}"}', ("grep", {"pattern": "x"})),
        ('{"name": "grep", "parameters": {"pattern": "x"}}', ("grep", {"pattern": "x"})),
        ('{"name": "list_dir"}', ("list_dir", {})),
        ('{"name": "list_dir", "arguments": null}', ("list_dir", {})),
        ('{"name": "list_dir", "arguments": ""}', ("list_dir", {})),
        (
            '\n```json\n{"name": "grep", "arguments": {"pattern": "x"}}\n```\n',
            ("grep", {"pattern": "x"}),
        ),
        ('{"name": "grep", "arguments": {"pattern": "x",},}', ("grep", {"pattern": "x"})),
        ('{"name": "grep", "arguments": {"pattern": [1, 2,]}}', ("grep", {"pattern": [1, 2]})),
        ('{"name": "grep", "arguments": {"pattern": ",}"}}', ("grep", {"pattern": ",}"})),
        ('{"name": "grep", "arguments": {"pattern": "x"}}}\n"', ("grep", {"pattern": "x"})),
        (
            '{"name": "grep", "arguments": {"pattern": "x"}} and then some',
            ("grep", {"pattern": "x"}),
        ),
        ('{"name": "grep", "arguments": {"pattern": "a\nb"}}', ("grep", {"pattern": "a\nb"})),
        (
            '{"function": {"name": "grep", "arguments": {"pattern": "x"}}}',
            ("grep", {"pattern": "x"}),
        ),
        ('{"name": " grep ", "arguments": {"pattern": "x"}}', ("grep", {"pattern": "x"})),
        ('{"name": "grep", "arguments": "{\\"pattern\\": \\"x\\",}"}', ("grep", {"pattern": "x"})),
    ],
)
def test_forgiving_where_unambiguous(body, expected):
    message = parse_tool_calls("ok " + block(body), tools=TOOLS)
    assert message.errors == []
    assert call_tuples(message) == [expected]
    assert message.tool_calls[0].raw == block(body)
    assert message.content == "ok"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (
            '{"name": "grep", "arguments": {"n": 1 "x": 2}}',
            "is not valid JSON: Expecting ',' delimiter at char",
        ),
        ('["grep", {"pattern": "x"}]', "must be one JSON object, not an array; put each call"),
        ('{"name": "a"}, {"name": "b"}', "holds more than one call; put each call in its own"),
        ('"grep"', "must be a JSON object, not a string"),
        ("42", "must be a JSON object, not a number"),
        ("grep pattern=x", "is not a JSON object"),
        ('{"arguments": {"pattern": "x"}}', 'has no "name"'),
        ('{"name": 3, "arguments": {}}', '"name" must be a non-empty string, got 3'),
        ('{"name": "", "arguments": {}}', '"name" must be a non-empty string'),
        ('{"name": "grep", "arguments": [1]}', '"arguments" must be a JSON object, not an array'),
        ('{"name": "grep", "arguments": 7}', '"arguments" must be a JSON object, not a number'),
        ('{"name": "grep", "arguments": "[1]"}', "is a string holding an array"),
        ('{"name": "grep", "arguments": "nope"}', "is a string that is not a JSON object"),
        (
            '{"name": "grep", "arguments": {}, "parameters": {}}',
            'both "arguments" and "parameters"',
        ),
        ("", "is empty"),
        ("  \n ", "is empty"),
        (
            '{"name": "a", "arguments": {}}\n{"name": "b", "arguments": {}}',
            "holds more than one call",
        ),
    ],
)
def test_errors_tell_the_model_what_is_wrong(body, fragment):
    text = "before " + block('{"name": "list_dir"}') + block(body) + " after"
    message = parse_tool_calls(text)
    assert call_tuples(message) == [("list_dir", {})]
    assert len(message.errors) == 1
    error = message.errors[0]
    assert error.index == 1 and error.raw == block(body) and error.call is None
    assert error.message.startswith("tool call 2")
    assert fragment in error.message, error.message
    assert str(error) == error.message
    assert message.content == "before\nafter"


def test_invalid_json_message_points_at_the_char():
    body = '{"name": "grep" "arguments": {}}'
    (error,) = parse_tool_calls(block(body)).errors
    assert error.message.startswith(
        "tool call 1 is not valid JSON: Expecting ',' delimiter at char 16"
    )
    assert "near" in error.message


def test_unclosed_last_block():
    complete = 'run it <tool_call>\n{"name": "grep", "arguments": {"pattern": "x"}}\n'
    message = parse_tool_calls(complete)
    assert call_tuples(message) == [("grep", {"pattern": "x"})] and message.errors == []
    assert message.tool_calls[0].raw == complete[len("run it ") :]
    cut = parse_tool_calls('run it <tool_call>\n{"name": "grep", "arguments": {"pat')
    assert cut.tool_calls == [] and len(cut.errors) == 1
    assert "has no </tool_call> and its JSON is incomplete" in cut.errors[0].message
    assert cut.errors[0].raw == '<tool_call>\n{"name": "grep", "arguments": {"pat'
    assert cut.content == "run it"
    bare = parse_tool_calls("hmm <tool_call>")
    assert bare.errors[0].raw == OPEN_TAG and "is empty" in bare.errors[0].message


def test_opening_tag_inside_a_block_starts_the_next_block():
    first = OPEN_TAG + '{"name": "grep", "arguments": {"pattern": "x"}}\n'
    message = parse_tool_calls(first + block('{"name": "list_dir"}'))
    assert call_tuples(message) == [("grep", {"pattern": "x"}), ("list_dir", {})]
    assert message.tool_calls[0].raw == first
    broken = OPEN_TAG + '{"name": "gr\n'  # the raw newline ends the broken string
    unclosed = parse_tool_calls(broken + block('{"name": "list_dir"}'))
    assert call_tuples(unclosed) == [("list_dir", {})]
    assert unclosed.errors[0].index == 0 and unclosed.errors[0].raw == broken
    # On one line the tag is still inside the broken string: one failed block, nothing lost.
    same_line = OPEN_TAG + '{"name": "gr' + block('{"name": "list_dir"}')
    assert summary(parse_tool_calls(same_line))[1:] == (
        [],
        [(0, parse_tool_calls(same_line).errors[0].message, same_line)],
    )


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"old_string": "    return f"{x} {u}"", "new_string": "    if a == "b":"}',
         {"old_string": '    return f"{x} {u}"', "new_string": '    if a == "b":'}),
        ('{"q": "d["k"] + " ".join(w)" , "n": ["x"]}', {"q": 'd["k"] + " ".join(w)', "n": ["x"]}),
        ('{"q": "a\\"b "c"}', {"q": 'a"b "c'}),
        ('{"q": "say "</tool_call>" ok"}', {"q": 'say "</tool_call>" ok'}),
        ('{"q": "x"\n}', {"q": "x"}),
    ],
)  # fmt: skip
def test_bare_quotes_in_a_value_are_literal_unless_the_value_ends_there(arguments, expected):
    """A model copying code into an argument leaves its quotes unescaped: a bare quote inside an
    object's string value ends it only before `,` or `}` (model/constrained.py allows the same),
    whole or streamed in any split, and the raw text is kept as written."""
    body = '{"name": "edit_file", "arguments": ' + arguments + "}"
    text = "ok " + block(body) + " done"
    message = parse_tool_calls(text)
    assert message.errors == [] and call_tuples(message) == [("edit_file", expected)]
    assert message.tool_calls[0].raw == block(body) and message.content == "ok\ndone"
    for cut in range(len(text)):
        assert summary(collect(stream(text, [cut]))) == summary(message)
    assert summary(collect(stream(text, list(range(len(text)))))) == summary(message)


def test_tags_inside_json_strings_are_content():
    arguments = {"content": f"use {OPEN_TAG} and {CLOSE_TAG} like <tool_call>{{}}</tool_call>"}
    text = render_tool_calls([ToolCall("write", arguments)]) + " done"
    message = parse_tool_calls(text)
    assert call_tuples(message) == [("write", arguments)]
    assert message.content == "done"
    escaped = block('{"name": "w", "arguments": {"q": "\\"</tool_call>\\\\"}}') + "x"
    assert call_tuples(parse_tool_calls(escaped)) == [("w", {"q": '"</tool_call>\\'})]


def test_a_broken_string_does_not_swallow_the_rest():
    text = (
        block('{"name": "grep", "arguments": {"pattern": "oops}}\n')
        + "\nmiddle\n"
        + block('{"name": "list_dir"}')
    )
    message = parse_tool_calls(text)
    assert call_tuples(message) == [("list_dir", {})]
    assert message.content == "middle"
    assert message.errors[0].message.startswith("tool call 1 is not valid JSON")


def test_unicode():
    arguments = {
        "path": "donn\u00e9es/\u65e5\u672c\u8a9e.txt",
        "emoji": "\U0001f642",
        "escaped": "\u00e9",
    }
    text = "Voil\u00e0 \U0001f642\n" + render_tool_calls([ToolCall("read_file", arguments)])
    message = parse_tool_calls(text, tools=TOOLS)
    assert message.content == "Voil\u00e0 \U0001f642" and call_tuples(message) == [
        ("read_file", arguments)
    ]
    assert call_tuples(
        parse_tool_calls(block('{"name": "x", "arguments": {"a": "\\u00e9\\ud83d\\ude42"}}'))
    ) == [("x", {"a": "\u00e9\U0001f642"})]


def test_validation_against_tools():
    text = (
        block('{"name": "read_fle", "arguments": {"path": "a"}}')
        + block('{"name": "grep", "arguments": {}}')
        + block('{"name": "frobnicate"}')
        + block('{"name": "list_dir"}')
    )
    message = parse_tool_calls(text, tools=TOOLS)
    assert call_tuples(message) == [("list_dir", {})]
    unknown, missing, far = message.errors
    assert unknown.message == (
        "tool call 1 calls unknown tool 'read_fle'. Did you mean 'read_file'? "
        "Available tools: read_file, grep, list_dir."
    )
    assert unknown.call is not None and unknown.call.arguments == {"path": "a"}
    assert unknown.call.raw == unknown.raw
    assert missing.message == "tool call 2 (grep) is missing required argument(s): pattern."
    assert "Did you mean" not in far.message and far.index == 2
    assert (
        parse_tool_calls(block('{"name": "x"}'), tools=[])
        .errors[0]
        .message.endswith("Available tools: (none).")
    )
    assert parse_tool_calls(block('{"name": "x"}')).errors == []  # no tools: no check


def test_tool_specs_accepts_bare_and_rejects_nameless():
    assert tool_specs([{"name": "a"}, {"function": {"name": "b", "parameters": {"x": 1}}}]) == {
        "a": {},
        "b": {"x": 1},
    }
    with pytest.raises(ValueError, match="non-empty string name"):
        tool_specs([{"type": "function", "function": {"parameters": {}}}])


def test_render_is_canonical():
    calls = [ToolCall("read_file", {"path": "a.py"}), ToolCall("grep", {})]
    expected = (
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "grep", "arguments": {}}\n</tool_call>'
    )
    assert render_tool_calls(calls) == expected
    openai = [c.to_openai() for c in calls]
    assert render_tool_calls(openai) == expected
    assert render_tool_calls([{"name": "grep", "arguments": ""}]) == expected.split("\n", 3)[3]
    assert render_tool_calls([]) == ""


def test_render_matches_the_chat_template():
    template_path = Path(__file__).resolve().parents[2] / "model" / "chat_template.jinja"
    if not template_path.exists():
        pytest.skip("model/chat_template.jinja is not there")
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    calls = [
        ToolCall("read_file", {"path": "\u00e9/<a>.py"}),
        ToolCall("grep", {"pattern": "x", "n": [1]}),
    ]
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [c.to_openai() for c in calls],
        },
    ]
    rendered = env.from_string(template_path.read_text()).render(messages=messages)
    assistant = "<|im_start|>assistant\nLet me look.\n" + render_tool_calls(calls) + "<|endoftext|><|im_end|>"
    assert assistant in rendered
    reparsed = parse_tool_calls(
        assistant.removeprefix("<|im_start|>assistant").removesuffix("<|endoftext|><|im_end|>")
    )
    assert reparsed.content == "Let me look." and call_tuples(reparsed) == [
        (c.name, c.arguments) for c in calls
    ]


# --- streaming -------------------------------------------------------------------------------


def test_streaming_holds_back_partial_tags():
    parser = StreamingToolCallParser()
    assert parser.feed("Hello <tool_c") == [TextDelta("Hello")]
    events = parser.feed('all>{"name": "grep"')
    assert events == [ToolCallStarted(0), ToolCallArgumentsDelta(0, '{"name": "grep"')]
    assert parser.feed("}</tool") == [ToolCallArgumentsDelta(0, "}")]
    (done,) = parser.feed("_call> ")
    assert isinstance(done, ToolCallFinished) and done.call.name == "grep"
    assert parser.feed("<tool_calx") == [TextDelta("\n<tool_calx")]
    assert parser.feed(" <") == []
    assert parser.finish() == [TextDelta(" <")]
    assert parser.finish() == []
    with pytest.raises(ValueError, match="after finish"):
        parser.feed("x")


def test_streaming_events_are_ordered_and_bodies_complete():
    text = (
        'a<tool_call>{"name": "x"}</tool_call>b<tool_call>[1]</tool_call><tool_call>{"name": "y"}'
    )
    events = stream(text, list(range(0, len(text), 3)))
    kinds = [
        type(e).__name__ for e in events if not isinstance(e, TextDelta | ToolCallArgumentsDelta)
    ]
    assert kinds == [
        "ToolCallStarted", "ToolCallFinished", "ToolCallStarted", "ToolCallFailed",
        "ToolCallStarted", "ToolCallFinished",
    ]  # fmt: skip
    check_event_invariants(events)


def check_event_invariants(events: list) -> None:
    """Started(i) for i = 0, 1, ... in order; argument deltas only between Started(i) and the
    end of i; the deltas add up to the raw block minus its tags."""
    current, bodies = None, {}
    for event in events:
        if isinstance(event, ToolCallStarted):
            assert current is None and event.index == len(bodies)
            current, bodies[event.index] = event.index, ""
        elif isinstance(event, ToolCallArgumentsDelta):
            assert event.index == current and event.text
            bodies[current] += event.text
        elif isinstance(event, ToolCallFinished | ToolCallFailed):
            assert event.index == current
            raw = event.call.raw if isinstance(event, ToolCallFinished) else event.error.raw
            assert raw in (OPEN_TAG + bodies[current], OPEN_TAG + bodies[current] + CLOSE_TAG)
            current = None
        else:
            assert isinstance(event, TextDelta) and current is None and event.text
    assert current is None


# --- properties ------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
calls = st.builds(
    ToolCall,
    name=st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=12).filter(
        lambda s: s.strip() == s and s
    ),
    arguments=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
)
TEXT_PIECES = ["a", "b", " ", "\n", "<", ">", "/", "tool", "_call", "\u00e9", "\u65e5", "{", '"', CLOSE_TAG]  # fmt: skip
texts = st.lists(st.sampled_from(TEXT_PIECES), max_size=12).map("".join)
GARBAGE = [
    OPEN_TAG, CLOSE_TAG, "<tool", "_call>", "</", "<", ">", "{", "}", "[", "]", '"', "\\", "\n",
    " ", ":", ",", '"name"', '"arguments"', '"parameters"', '"grep"', "null", "1", "```", "x", "\u00e9",
]  # fmt: skip


@SETTINGS
@given(items=st.lists(texts | calls, max_size=6), data=st.data())
def test_valid_messages_parse_alike_for_any_split(items, data):
    text = "".join(render_tool_calls([i]) if isinstance(i, ToolCall) else i for i in items)
    segments, current = [], ""
    for item in items:
        if isinstance(item, ToolCall):
            segments.append(current)
            current = ""
        else:
            current += item
    segments.append(current)
    assume(all(OPEN_TAG not in segment for segment in segments))
    expected_calls = [(i.name, i.arguments) for i in items if isinstance(i, ToolCall)]

    whole = parse_tool_calls(text)
    assert whole.errors == []
    assert call_tuples(whole) == expected_calls
    assert whole.content == normalize_content(segments)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=12))
    events = stream(text, cuts)
    check_event_invariants(events)
    assert summary(collect(events)) == summary(whole)
    assert call_tuples(parse_tool_calls(render_tool_calls(whole.tool_calls))) == expected_calls


@SETTINGS
@given(pieces=st.lists(st.sampled_from(GARBAGE) | st.text(max_size=3), max_size=40), data=st.data())
def test_garbage_never_raises_never_loses_characters(pieces, data):
    text = "".join(pieces)
    whole = parse_tool_calls(text, tools=TOOLS)
    kept = Counter(whole.content)
    for raw in [c.raw for c in whole.tool_calls] + [e.raw for e in whole.errors]:
        kept += Counter(raw)
    assert non_space(kept) == non_space(Counter(text))
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=10))
    events = stream(text, cuts, tools=TOOLS)
    check_event_invariants(events)
    assert summary(collect(events)) == summary(whole)


def non_space(counter: Counter) -> Counter:
    return Counter({ch: n for ch, n in counter.items() if not ch.isspace()})


def test_one_character_at_a_time_matches_whole():
    rng = random.Random(0)
    for _ in range(200):
        text = "".join(rng.choice(GARBAGE) for _ in range(rng.randrange(30)))
        assert summary(collect(stream(text, list(range(len(text)))))) == summary(
            parse_tool_calls(text)
        )


def test_huge_inputs_are_linear():
    big = "x" * 2_000_000
    text = "start " + render_tool_calls([ToolCall("write", {"content": big, "tags": "<" * 1000})])
    start = time.thread_time()  # CPU time: other processes on a busy machine do not stretch it
    message = parse_tool_calls(text)
    assert message.tool_calls[0].arguments["content"] == big
    streamed = collect(stream(text, list(range(0, len(text), 65536))))
    assert streamed.tool_calls[0].arguments["content"] == big
    many = "".join(
        f"step {i} <<a>> " + render_tool_calls([ToolCall("grep", {"i": i})]) for i in range(5000)
    )
    parsed = parse_tool_calls(many)
    assert [c.arguments["i"] for c in parsed.tool_calls] == list(range(5000))
    assert parsed.content.count("<<a>>") == 5000
    assert parse_tool_calls("<" * 200_000 + "a").content == "<" * 200_000 + "a"
    assert time.thread_time() - start < 5, "parsing should be linear in the input"


def test_absurd_nesting_is_an_error_not_a_crash():
    deep = "[" * 100_000 + "]" * 100_000
    for body in [
        '{"name": "a", "arguments": {"x": ' + deep + "}}",
        '{"name": "a", "arguments": "{\\"x\\": ' + deep + '}"}',
        deep,
    ]:
        (error,) = parse_tool_calls(block(body)).errors
        assert "too deeply" in error.message or "not a JSON object" in error.message


def test_json_error_positions_are_relative_to_the_object():
    body = '  \n{"name": "grep", "arguments": {"pattern": "foo" "x": 1}}'
    (error,) = parse_tool_calls(block(body)).errors
    position = int(re.search(r"at char (\d+)", error.message).group(1))
    obj = body.strip()
    with pytest.raises(json.JSONDecodeError) as info:
        json.loads(obj)
    assert position == info.value.pos
