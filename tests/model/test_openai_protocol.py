"""model/openai_protocol.py without a server: request normalisation, tool-call text splitting
(whole or streamed in any pieces), and response objects checked against the openai package's own
types. Run: .venv/bin/python -m pytest tests/model/test_openai_protocol.py -q"""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from model.openai_protocol import (
    ProtocolError,
    ResponseMeta,
    TokenText,
    ToolTextSplitter,
    chat_chunk,
    chat_completion,
    finish_reason,
    parse_chat_request,
    split_tool_text,
    tool_call_delta,
    usage,
)
from model.toolcalls import ToolCall

TOOLS = [
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "grep", "description": "search"}},
]
TEXT = (
    "Let me look.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.py\"}}\n"
    "</tool_call>\nand\n<tool_call>\n{\"name\": \"grep\", \"arguments\": {\"pattern\": \"x<y\"}}\n</tool_call>"
)


def body(**fields):
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}


def test_request_is_normalised():
    req = parse_chat_request(body(
        messages=[
            {"role": "developer", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
            {"role": "user", "content": "read a.py"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}},
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "print(1)"},
        ],
        tools=TOOLS, tool_choice={"type": "function", "function": {"name": "grep"}},
        max_completion_tokens=7, stop="END", stream=True, stream_options={"include_usage": True},
        logprobs=True, top_logprobs=2, parallel_tool_calls=False, user="me", frequency_penalty=0,
    ))
    assert req.messages[0] == {"role": "system", "content": "be brief"}
    assert req.messages[2]["tool_calls"][0]["function"]["arguments"] == {"path": "a.py"}
    assert req.messages[3]["tool_call_id"] == "c1"
    assert (req.tool_choice, req.tool_name, req.max_tokens, req.stop) == ("required", "grep", 7, ["END"])
    assert req.stream and req.include_usage and req.logprobs and req.top_logprobs == 2
    assert req.constrained_tool_calls and req.parses_tool_calls
    params = req.sampling_params(7)
    assert params.stop == ["END", "</tool_call>"] and params.max_tokens == 7 and params.temperature == 1.0


def test_defaults_without_tools():
    req = parse_chat_request(body())
    assert req.tool_choice == "none" and not req.constrained_tool_calls and not req.parses_tool_calls
    assert (req.temperature, req.top_p, req.max_tokens, req.stream) == (1.0, 1.0, None, False)
    none = parse_chat_request(body(tools=TOOLS, tool_choice="none"))
    assert none.constrained_tool_calls and not none.parses_tool_calls  # tools known, calls barred


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"messages": [{"role": "user"}]}, "messages[0].content"),
        ({"messages": [{"role": "assistant"}]}, "messages[0].content"),
        ({"tools": [{"type": "function", "function": {"name": "a"}}] * 2}, "tools[1].function.name"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {}}}, "tool_choice"),
        ({"stream": True, "stream_options": []}, "stream_options"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"seed": 2**70}, "seed"),
        ({"stop": ["a"] * 17}, "stop"),
    ],
)
def test_invalid_fields_are_named(fields, param):
    with pytest.raises(ProtocolError) as err:
        parse_chat_request(body(**fields))
    assert err.value.param == param and err.value.status == 400
    assert param in err.value.message
    assert err.value.body()["error"]["type"] == "invalid_request_error"


def test_splitter_keeps_text_calls_and_broken_blocks():
    content, calls = split_tool_text(TEXT)
    assert content == "Let me look.\nand"
    assert [(c.name, c.arguments) for c in calls] == [("read_file", {"path": "a.py"}), ("grep", {"pattern": "x<y"})]
    broken = "A\n<tool_call>\n{not json}\n</tool_call>\nB"
    content, calls = split_tool_text(broken)
    assert calls == [] and content == "A\n<tool_call>\n{not json}\n</tool_call>\nB"
    assert split_tool_text(TEXT, parse=False) == (TEXT, [])
    assert len(split_tool_text(TEXT, parallel=False)[1]) == 1


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(0, len(TEXT)), max_size=12))
def test_splitter_streamed_in_any_pieces_equals_whole(cuts):
    bounds = [0, *sorted(cuts), len(TEXT)]
    splitter = ToolTextSplitter()
    items = [i for a, b in itertools.pairwise(bounds) for i in splitter.feed(TEXT[a:b])] + splitter.finish()
    content = "".join(i for i in items if isinstance(i, str))
    assert "<" not in content
    whole_content, whole_calls = split_tool_text(TEXT)
    assert content == whole_content
    assert [c.arguments for c in splitter.calls] == [c.arguments for c in whole_calls]


def test_finish_reasons():
    assert finish_reason("stop", True) == "tool_calls"
    assert finish_reason("stop", False) == "stop"
    assert finish_reason("length", True) == "length"


class _Tok:
    def __init__(self) -> None:
        self.id_to_bytes = [b"a", b"\xe2", b"<|im_end|>"]

    def token_strings(self):
        return ["a", "\ufffd", "<|im_end|>"]


def test_responses_validate_as_openai_types():
    meta = ResponseMeta(model="m")
    text = TokenText(_Tok())
    logprobs = text.logprobs([0, 1, 2], [-0.5, -math.inf, -1.0], [[(0, -0.5), (1, -2.0)]] * 3)
    assert logprobs[1]["logprob"] == -9999.0 and logprobs[1]["bytes"] == [0xE2]
    json.dumps(logprobs, allow_nan=False)
    call = ToolCall("read_file", {"path": "a.py"})
    body = chat_completion(
        meta, content="", tool_calls=[call], finish_reason="tool_calls", usage=usage(5, 3),
        logprobs=logprobs, extra_choice={"token_ids": [0, 1, 2]}, extra={"prompt_token_ids": [9]},
    )
    parsed = ChatCompletion.model_validate(body)
    assert parsed.choices[0].message.content is None
    assert parsed.choices[0].message.tool_calls[0].function.arguments == '{"path": "a.py"}'
    assert parsed.usage.total_tokens == 8 and parsed.choices[0].token_ids == [0, 1, 2]
    assert parsed.choices[0].logprobs.content[0].top_logprobs[1].token == "\ufffd"
    chunk = ChatCompletionChunk.model_validate(
        chat_chunk(meta, {"tool_calls": [tool_call_delta(0, call)]}, include_usage=True)
    )
    assert chunk.choices[0].delta.tool_calls[0].function.name == "read_file" and chunk.usage is None
    last = ChatCompletionChunk.model_validate(chat_chunk(meta, None, usage=usage(5, 3), include_usage=True))
    assert last.choices == [] and last.usage.completion_tokens == 3 and last.id == meta.id
