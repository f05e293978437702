"""Tool calls in model text: the Hermes/Qwen `<tool_call>` block format, parsed whole or streamed.

The model writes each call as a JSON object between tags; several blocks in one message are
parallel calls:

    Let me look.
    <tool_call>
    {"name": "read_file", "arguments": {"path": "src/a.py"}}
    </tool_call>

Use:

    from model.toolcalls import parse_tool_calls, render_tool_calls, StreamingToolCallParser

    msg = parse_tool_calls(text, tools=tools)   # tools (OpenAI style) are optional
    msg.content, msg.tool_calls, msg.errors     # errors: blocks that could not be used
    render_tool_calls(msg.tool_calls)           # the canonical text, as the chat template writes it

    parser = StreamingToolCallParser(tools=tools)
    for delta in deltas:
        for event in parser.feed(delta): ...    # TextDelta, ToolCallStarted, ...
    for event in parser.finish(): ...

Rules (the same for both entry points: `parse_tool_calls` is the streaming parser fed once):

* A block opens at `<tool_call>` and ends at the first `</tool_call>` that is not inside a JSON
  string (so arguments may mention the tags), or at the next `<tool_call>` outside a string, or
  at the end of the text. String tracking ends at a raw newline (strict JSON strings hold none),
  so one broken string cannot swallow the rest of the message.
* A block's body is decoded forgivingly where the intent is unambiguous: a code fence around the
  JSON, trailing commas, junk after the object, raw newlines inside strings, `arguments` given as
  a string holding a JSON object, `parameters` as an alias, missing or null arguments (-> {}),
  an OpenAI-style `{"function": {...}}` wrapper, and an unclosed last block whose JSON is
  complete, and unescaped quotes inside a string value of the arguments object, read by the
  rule of model/code_quotes.py that model/constrained.py enforces: such a quote ends the string
  before `,` or `}` (after spaces; a newline ends it too), and is otherwise part of the string
  where code could have a quote (`"old_string": "return f"{x}""` reads as `return f"{x}"`).
  Anything else becomes a `ToolCallError` whose `message` tells the model what to fix
  and whose `raw` keeps the block's exact text, so nothing the model wrote is lost.
* `content` is `normalize_content(segments)`: the text segments outside the blocks, each
  `str.strip()`-ed, the empty ones dropped, the rest joined by one newline ("A <tool_call>...
  </tool_call> B" -> "A\nB"). The streaming parser emits exactly that text: it drops whitespace
  at a segment's start and holds whitespace back until non-whitespace text follows, so
  "".join(TextDelta texts) == content for any split of the input.
"""

from __future__ import annotations

import difflib
import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from model import code_quotes

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
FORMAT_HINT = 'Write {"name": "<tool>", "arguments": {...}} between <tool_call> and </tool_call>.'
ONE_PER_BLOCK = "put each call in its own <tool_call> block."

_DECODER = json.JSONDecoder(strict=False)  # strict=False: raw newlines inside strings are fine

# Block scanner phases: before the object's "{", inside the object, after its closing "}".
_PRE, _OBJECT, _AFTER = 0, 1, 2
_STOPS = (re.compile(r"[{<]"), re.compile(r"[^ \t\n\r]"), re.compile(r"<"))
_STRING_STOP = re.compile(r'["\\\n]')
_AFTER_QUOTE = re.compile(r"[^ \t\r]")  # what decides a bare quote in a value string
_ANOTHER_CALL = re.compile(r'\{\s*"(?:name|function)"\s*:')
_STRING_OR_TRAILING_COMMA = re.compile(r'("(?:[^"\\]|\\.)*")|,(\s*[}\]])', re.DOTALL)


def new_call_id() -> str:
    """A fresh OpenAI-style call id: `call_` and 24 hex digits."""
    return "call_" + uuid.uuid4().hex[:24]


@dataclass(slots=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = field(default_factory=new_call_id)
    raw: str = field(default="", repr=False, compare=False)
    """The block's exact text, tags included, when the call was parsed from model output."""

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)

    def to_openai(self) -> dict[str, Any]:
        """The call as an OpenAI `tool_calls` entry (arguments as a JSON string)."""
        function = {"name": self.name, "arguments": self.arguments_json}
        return {"id": self.id, "type": "function", "function": function}


@dataclass(slots=True)
class ToolCallError:
    index: int
    """Position of the block among all blocks of the message, from 0."""
    message: str
    """What was wrong, worded for the model ("tool call 2 is not valid JSON: ...")."""
    raw: str
    """The block's exact text, tags included (no closing tag when it had none)."""
    call: ToolCall | None = None
    """The decoded call when only the check against the tools failed."""

    def __str__(self) -> str:
        return self.message


@dataclass(slots=True)
class ParsedMessage:
    content: str
    tool_calls: list[ToolCall]
    errors: list[ToolCallError]


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    index: int


@dataclass(frozen=True, slots=True)
class ToolCallArgumentsDelta:
    index: int
    text: str
    """Raw block body as it streams (the JSON, plus any whitespace or fence around it)."""


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    index: int
    call: ToolCall


@dataclass(frozen=True, slots=True)
class ToolCallFailed:
    index: int
    error: ToolCallError


Event = TextDelta | ToolCallStarted | ToolCallArgumentsDelta | ToolCallFinished | ToolCallFailed


def tool_specs(tools: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Map tool name -> JSON schema of its parameters, from OpenAI-style tool definitions
    (`{"type": "function", "function": {"name", "parameters"}}`) or bare `{"name", "parameters"}`."""
    specs: dict[str, dict[str, Any]] = {}
    for tool in tools:
        function = tool.get("function", tool)
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or not name:
            raise ValueError(f"a tool definition needs a non-empty string name, got {tool!r}")
        specs[name] = dict(function.get("parameters") or {})
    return specs


def normalize_content(segments: Iterable[str]) -> str:
    """The message content made of the text segments outside the blocks (see the module doc)."""
    return "\n".join(s.strip() for s in segments if s.strip())


def parse_tool_calls(text: str, tools: Iterable[Mapping[str, Any]] | None = None) -> ParsedMessage:
    """Split a whole model message into content, tool calls and errors (see the module doc)."""
    parser = StreamingToolCallParser(tools=tools)
    return collect(parser.feed(text) + parser.finish())


def collect(events: Iterable[Event]) -> ParsedMessage:
    """Fold streaming events into the `ParsedMessage` they describe."""
    message = ParsedMessage(content="", tool_calls=[], errors=[])
    texts = []
    for event in events:
        if isinstance(event, TextDelta):
            texts.append(event.text)
        elif isinstance(event, ToolCallFinished):
            message.tool_calls.append(event.call)
        elif isinstance(event, ToolCallFailed):
            message.errors.append(event.error)
    message.content = "".join(texts)
    return message


def render_tool_calls(calls: Iterable[ToolCall | Mapping[str, Any]]) -> str:
    """The canonical block text for calls, one block per call, joined by newlines: exactly what
    model/chat_template.jinja writes after an assistant message's content (each block there is
    preceded by a newline). Accepts `ToolCall`s and OpenAI `tool_calls` entries; as in the
    template, string arguments are inserted verbatim and dicts as `json.dumps` (non-ASCII kept)."""
    blocks = []
    for call in calls:
        if isinstance(call, ToolCall):
            name, arguments = call.name, call.arguments
        else:
            function = call.get("function", call)
            name, arguments = function["name"], function.get("arguments")
        if isinstance(arguments, str) and arguments.strip():
            args_json = arguments
        elif isinstance(arguments, Mapping):
            args_json = json.dumps(dict(arguments), ensure_ascii=False)
        else:
            args_json = "{}"
        name_json = json.dumps(name, ensure_ascii=False)
        blocks.append(f'{OPEN_TAG}\n{{"name": {name_json}, "arguments": {args_json}}}\n{CLOSE_TAG}')
    return "\n".join(blocks)


class StreamingToolCallParser:
    """Incremental parser: `feed(delta)` and, once at the end, `finish()`; both return events.

    Any split of the text into deltas yields the same events up to how text and arguments are
    cut into deltas. A possible partial tag (`<tool_c`) is held back until decided, so a
    `TextDelta` never carries tag text. Each block gives `ToolCallStarted(i)`, zero or more
    `ToolCallArgumentsDelta(i, body_text)`, then `ToolCallFinished(i, call)` or
    `ToolCallFailed(i, error)`, with i counting blocks from 0.
    """

    def __init__(self, tools: Iterable[Mapping[str, Any]] | None = None) -> None:
        self._specs = tool_specs(tools) if tools is not None else None
        self._buf = ""
        self._pos = 0
        self._in_block = False
        self._index = -1
        self._body: list[str] = []
        self._phase = _PRE
        self._containers: list[str] = []  # the open "{" and "[" of the block's JSON
        self._value_next = False  # the last character outside strings was a ':'
        self._in_string = False
        self._value_string = False  # the string is an object's value: see `_scan_block`
        self._quote_at: int | None = None  # the body offset of a bare quote not yet decided
        self._quote_context = code_quotes.VALUE_START  # what a bare quote there may be
        self._literal_quotes: list[int] = []
        self._body_len = 0
        self._escape = False
        self._segment_started = False
        self._emitted_text = False
        self._pending_ws = ""
        self._finished = False

    def feed(self, delta: str) -> list[Event]:
        if self._finished:
            raise ValueError("feed() called after finish()")
        self._buf += delta
        events: list[Event] = []
        self._process(events, final=False)
        return events

    def finish(self) -> list[Event]:
        if self._finished:
            return []
        events: list[Event] = []
        self._process(events, final=True)
        if self._in_block:
            self._end_block(events, closed=False)
        self._pending_ws = ""  # trailing whitespace is not content
        self._finished = True
        return events

    def _process(self, events: list[Event], final: bool) -> None:
        """Scan `_buf` from `_pos` on, then keep only what is held back (a partial tag)."""
        while self._pos < len(self._buf):
            scan = self._scan_block if self._in_block else self._scan_text
            if not scan(events, final):
                break
        self._buf, self._pos = self._buf[self._pos :], 0

    def _scan_text(self, events: list[Event], final: bool) -> bool:
        """Emit text up to the next opening tag; True when a block started (scan on)."""
        buf, start = self._buf, self._pos
        i = start
        while (j := buf.find("<", i)) >= 0:
            if buf.startswith(OPEN_TAG, j):
                self._text(buf[start:j], events)
                self._pos = j + len(OPEN_TAG)
                self._start_block(events)
                return True
            if not final and len(buf) - j < len(OPEN_TAG) and OPEN_TAG.startswith(buf[j:]):
                self._text(buf[start:j], events)
                self._pos = j
                return False
            i = j + 1
        self._text(buf[start:], events)
        self._pos = len(buf)
        return False

    def _scan_block(self, events: list[Event], final: bool) -> bool:
        """Consume block body up to a tag; True when the block ended (scan on)."""
        buf, i, n = self._buf, self._pos, len(self._buf)
        while i < n:
            if self._escape:
                self._escape, i = False, i + 1
                self._quote_context = code_quotes.after_escape(self._quote_context)
                continue
            if self._quote_at is not None:  # a bare quote in a value string: what follows decides
                m = _AFTER_QUOTE.search(buf, i)
                if m is None:
                    break
                i = m.start()
                if buf[i] in code_quotes.VALUE_CLOSERS or buf[i] == "\n":  # or a raw newline
                    self._in_string = False
                else:
                    self._literal_quotes.append(self._quote_at)
                    self._quote_context = code_quotes.after_literal_quote(self._quote_context)
                self._quote_at = None
                continue
            if self._in_string:
                m = _STRING_STOP.search(buf, i)
                if self._value_string:
                    end = n if m is None else m.start()
                    tail = buf[max(i, end - 3) : end]  # all that decides (`after_text`)
                    self._quote_context = code_quotes.after_text(self._quote_context, tail)
                if m is None:
                    break
                i = m.end()
                if m.group() == "\\":
                    self._escape = True
                elif (m.group() == '"' and self._value_string
                      and code_quotes.may_be_literal(self._quote_context)):
                    self._quote_at = self._body_len + m.start() - self._pos
                else:  # the closing quote, or a raw newline that no JSON string may hold
                    self._in_string = False
                continue
            m = _STOPS[self._phase].search(buf, i)
            if m is None:
                break
            j = m.start()
            c, i = buf[j], j + 1
            if c == "<":
                ended = self._at_tag(j, events, final)
                if ended is not None:
                    return ended
            else:
                self._structure(c)
        self._body_text(buf[self._pos :], events)
        self._pos = n
        return False

    def _structure(self, c: str) -> None:
        """Track the block's JSON outside strings: which strings are values of the arguments
        object, where the object ends. In such a value a bare quote that model/code_quotes.py
        reads as literal is escaped before the block is decoded. That is how model/constrained.py
        lets a model copy code with quotes into an argument; valid JSON reads the same."""
        containers = self._containers
        if c == '"':
            self._in_string = True
            self._value_string = self._value_next and containers == ["{", "{"]
            self._quote_context = code_quotes.VALUE_START
        elif c in "{[":
            containers.append(c)
            self._phase = _OBJECT
        elif c in "}]":
            if containers:
                containers.pop()
            if not containers:
                self._phase = _AFTER
        self._value_next = c == ":"

    def _at_tag(self, j: int, events: list[Event], final: bool) -> bool | None:
        """At a '<' outside strings: end the block, hold a partial tag, or None to go on."""
        buf = self._buf
        closed = buf.startswith(CLOSE_TAG, j)
        if closed or buf.startswith(OPEN_TAG, j):
            self._body_text(buf[self._pos : j], events)
            self._pos = j + len(CLOSE_TAG if closed else OPEN_TAG)
            self._end_block(events, closed=closed)
            if not closed:
                self._start_block(events)
            return True
        if not final and len(buf) - j < len(CLOSE_TAG):
            tail = buf[j:]
            if CLOSE_TAG.startswith(tail) or OPEN_TAG.startswith(tail):
                self._body_text(buf[self._pos : j], events)
                self._pos = j
                return False
        return None

    def _text(self, text: str, events: list[Event]) -> None:
        """Emit text so that the deltas add up to `normalize_content` of the segments."""
        if not self._segment_started:
            text = text.lstrip()
            if not text:
                return
            self._segment_started = True
            self._pending_ws = "\n" if self._emitted_text else ""
        body = text.rstrip()
        if not body:
            self._pending_ws += text  # maybe trailing: held until more text follows
            return
        events.append(TextDelta(self._pending_ws + body))
        self._pending_ws = text[len(body) :]
        self._emitted_text = True

    def _start_block(self, events: list[Event]) -> None:
        self._in_block = True
        self._segment_started, self._pending_ws = False, ""
        self._index += 1
        self._body = []
        self._phase, self._containers, self._value_next = _PRE, [], False
        self._in_string, self._value_string, self._escape = False, False, False
        self._quote_at = None
        self._literal_quotes, self._body_len = [], 0
        events.append(ToolCallStarted(self._index))

    def _body_text(self, text: str, events: list[Event]) -> None:
        if text:
            self._body.append(text)
            self._body_len += len(text)
            events.append(ToolCallArgumentsDelta(self._index, text))

    def _end_block(self, events: list[Event], closed: bool) -> None:
        self._in_block = False
        body = "".join(self._body)
        raw = OPEN_TAG + body + (CLOSE_TAG if closed else "")
        escaped = self._escape_literal_quotes(body)
        result = decode_block(escaped, self._index, closed=closed, specs=self._specs)
        if not isinstance(result, ToolCall) and self._literal_quotes:  # the error as written
            result = decode_block(body, self._index, closed=closed, specs=self._specs)
        if isinstance(result, ToolCall):
            result.raw = raw
            events.append(ToolCallFinished(self._index, result))
        else:
            error = ToolCallError(self._index, result[0], raw, call=result[1])
            if error.call is not None:
                error.call.raw = raw
            events.append(ToolCallFailed(self._index, error))

    def _escape_literal_quotes(self, body: str) -> str:
        """`body` with the quotes `_structure` judged literal escaped."""
        for at in reversed(self._literal_quotes):
            body = body[:at] + "\\" + body[at:]
        return body


def decode_block(
    body: str, index: int, closed: bool = True, specs: Mapping[str, Mapping[str, Any]] | None = None
) -> ToolCall | tuple[str, ToolCall | None]:
    """Decode one block body into a call, or (message, call-or-None) saying what is wrong."""
    number = index + 1
    obj = _load_object(body, number, closed)
    if isinstance(obj, str):
        return obj, None
    call = _to_call(obj, number)
    if isinstance(call, str):
        return call, None
    if specs is not None:
        problem = _check_against_tools(call, number, specs)
        if problem is not None:
            return problem, call
    return call


def _load_object(body: str, number: int, closed: bool) -> dict[str, Any] | str:
    text = body.strip()
    if text.startswith("```"):  # a code fence: drop the opening line and a closing fence
        newline = text.find("\n")
        text = "" if newline < 0 else text[newline + 1 :].rstrip()
        text = text.removesuffix("```").strip()
    if not text:
        return f"tool call {number} is empty. {FORMAT_HINT}"
    if not text.startswith("{"):
        try:
            value = json.loads(text, strict=False)
        except (json.JSONDecodeError, RecursionError):
            return f"tool call {number} is not a JSON object (near {text[:40]!r}). {FORMAT_HINT}"
        if isinstance(value, list):
            return f"tool call {number} must be one JSON object, not an array; {ONE_PER_BLOCK}"
        return f"tool call {number} must be a JSON object, not {_json_kind(value)}. {FORMAT_HINT}"
    try:
        obj, end = _DECODER.raw_decode(text)
    except json.JSONDecodeError as error:
        fixed = _drop_trailing_commas(text)
        try:
            obj, end = _DECODER.raw_decode(fixed)
        except (json.JSONDecodeError, RecursionError):
            return _json_error(number, error, closed)
        text = fixed
    except RecursionError:
        return f"tool call {number} nests arrays or objects too deeply to read."
    if _ANOTHER_CALL.search(text, end):
        return f"tool call {number} holds more than one call; {ONE_PER_BLOCK}"
    return obj


def _json_error(number: int, error: json.JSONDecodeError, closed: bool) -> str:
    near = error.doc[max(0, error.pos - 25) : error.pos + 25]
    where = f"{error.msg} at char {error.pos} (near {near!r})"
    if not closed:
        return f"tool call {number} has no </tool_call> and its JSON is incomplete: {where}"
    return f"tool call {number} is not valid JSON: {where}"


def _drop_trailing_commas(text: str) -> str:
    def keep_strings(m: re.Match[str]) -> str:
        return m.group(1) if m.group(1) is not None else m.group(2)

    return _STRING_OR_TRAILING_COMMA.sub(keep_strings, text)


def _json_kind(value: Any) -> str:
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return kinds.get(type(value), "a number")


def _to_call(obj: dict[str, Any], number: int) -> ToolCall | str:
    if "name" not in obj and isinstance(obj.get("function"), dict):
        obj = obj["function"]  # {"type": "function", "function": {...}}
    name = obj.get("name")
    if name is None:
        return f'tool call {number} has no "name". {FORMAT_HINT}'
    if not isinstance(name, str) or not name.strip():
        shown = json.dumps(name, ensure_ascii=False)
        return f'tool call {number}: "name" must be a non-empty string, got {shown}.'
    name = name.strip()
    if "arguments" in obj and "parameters" in obj:
        return f'tool call {number} ({name}) has both "arguments" and "parameters"; keep one.'
    arguments = obj.get("arguments", obj.get("parameters"))
    if isinstance(arguments, str):
        arguments = _arguments_from_string(arguments)
        if isinstance(arguments, str):
            return f'tool call {number} ({name}): "arguments" {arguments}'
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        kind = _json_kind(arguments)
        return f'tool call {number} ({name}): "arguments" must be a JSON object, not {kind}.'
    return ToolCall(name=name, arguments=arguments)


def _arguments_from_string(text: str) -> Any:
    """Arguments written as a JSON string holding an object; a str return is a complaint."""
    if not text.strip():
        return {}
    problem = ""
    for candidate in (text, _drop_trailing_commas(text)):
        try:
            value = json.loads(candidate, strict=False)
        except json.JSONDecodeError as error:
            problem = problem or f"{error.msg} at char {error.pos}"
            continue
        except RecursionError:
            return "is a string that nests arrays or objects too deeply to read."
        if isinstance(value, dict):
            return value
        return f"is a string holding {_json_kind(value)}; it must be a JSON object."
    return f"is a string that is not a JSON object ({problem}); give an object instead."


def _check_against_tools(
    call: ToolCall, number: int, specs: Mapping[str, Mapping[str, Any]]
) -> str | None:
    if call.name not in specs:
        close = difflib.get_close_matches(call.name, list(specs), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        available = ", ".join(specs) or "(none)"
        return (
            f"tool call {number} calls unknown tool {call.name!r}.{hint} "
            f"Available tools: {available}."
        )
    required = specs[call.name].get("required") or []
    missing = [key for key in _as_str_list(required) if key not in call.arguments]
    if missing:
        listed = ", ".join(missing)
        return f"tool call {number} ({call.name}) is missing required argument(s): {listed}."
    return None


def _as_str_list(value: Any) -> Sequence[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
