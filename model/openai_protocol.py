"""The OpenAI chat-completions protocol: request validation into our types, and the response
objects (`chat.completion`, `chat.completion.chunk`, errors) shaped as the OpenAI API shapes them.

    from model.openai_protocol import parse_chat_request, ProtocolError
    try:
        request = parse_chat_request(body)          # body: the decoded JSON of the POST
    except ProtocolError as err:
        return err.status, err.body()               # {"error": {"message", "type", "param", "code"}}

Besides the OpenAI fields, a request may carry vendor fields: `return_token_ids` (vLLM's name: the
response gets `prompt_token_ids` and `choices[i].token_ids`), `return_routed_experts` (the
response gets `choices[i].routed_experts`, nested lists (positions, layers, k)),
`constrained_tool_calls` (default true when tools are in use: decode tool calls under
model/constrained.py's ToolCallConstraint), `quotes` (the files a tool argument is copied from,
model/quotes_protocol.py), `speculative` (prompt-lookup decoding on or off), and
vLLM's sampling extensions `ignore_eos`, `min_tokens`, `top_k` (-1 or 0: off) and
`repetition_penalty`. `usage.prompt_tokens_details.cached_tokens` counts the prompt tokens the
engine's prefix cache served.

The model writes tool calls as `<tool_call>` blocks; `ToolTextSplitter` turns its text, whole or
streamed, into content and `ToolCall`s, with undecodable blocks kept verbatim as content. Used by
model/serve.py; tested by tests/model/test_openai_protocol.py (`pytest tests/model -k protocol`).
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from model import quotes_protocol
from model.sampling import MAX_TOP_LOGPROBS, SamplingParams
from model.toolcalls import (
    CLOSE_TAG,
    StreamingToolCallParser,
    TextDelta,
    ToolCall,
    ToolCallFailed,
    ToolCallFinished,
)

ROLES = ("system", "user", "assistant", "tool")
ROLE_ALIASES = {"developer": "system"}
MAX_STOP_STRINGS = 16
MIN_LOGPROB = -9999.0
"""Logprobs below this (and -inf) are reported as this: JSON has no infinity."""

# Accepted for compatibility; only the value that changes nothing is allowed.
_NO_OP_FIELDS: dict[str, Any] = {
    "frequency_penalty": 0, "presence_penalty": 0, "logit_bias": {}, "user": None,
    "metadata": None, "store": False, "service_tier": None, "response_format": {"type": "text"},
}
_KNOWN_FIELDS = frozenset({
    "model", "messages", "tools", "tool_choice", "max_tokens", "max_completion_tokens",
    "temperature", "top_p", "seed", "stop", "n", "stream", "stream_options", "logprobs",
    "top_logprobs", "parallel_tool_calls", "return_token_ids", "return_routed_experts",
    "constrained_tool_calls", "quotes", "speculative", "ignore_eos", "min_tokens", "top_k", "repetition_penalty",
    *_NO_OP_FIELDS,
})


class ProtocolError(Exception):
    """A request the API refuses; `body()` is the OpenAI-shaped error object."""

    def __init__(
        self,
        message: str,
        param: str | None = None,
        *,
        code: str | None = None,
        status: int = 400,
        type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message, self.param, self.code, self.status, self.type = message, param, code, status, type

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


# ---- request validation -------------------------------------------------------------------------


@dataclass(kw_only=True)
class GenerationRequest:
    """What chat and text completions share (`generation_fields` reads it from a body)."""

    model: str
    tools: list[dict[str, Any]] | None = None
    tool_choice: str = "auto"
    """"auto", "none" or "required"; a named function is "required" with `tool_name` set."""
    tool_name: str | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    return_token_ids: bool = False
    return_routed_experts: bool = False
    constrained_tool_calls: bool = False
    quotes: quotes_protocol.Quotes = field(default_factory=dict)
    """Arguments the constraint keeps verbatim pieces of files (model/quotes_protocol.py)."""
    speculative: bool | None = None
    ignore_eos: bool = False
    min_tokens: int = 0
    top_k: int = 0
    repetition_penalty: float = 1.0

    def sampler(self, max_tokens: int, constraint: Any, stop: list[str], top_logprobs: int) -> SamplingParams:
        return SamplingParams(
            max_tokens=max_tokens, temperature=self.temperature, top_p=self.top_p, seed=self.seed,
            stop=stop, top_logprobs=top_logprobs,
            return_routing=self.return_routed_experts, speculative=self.speculative,
            constraint=constraint, ignore_eos=self.ignore_eos, min_tokens=min(self.min_tokens, max_tokens),
            top_k=self.top_k, repetition_penalty=self.repetition_penalty,
        )


@dataclass(kw_only=True)
class ChatRequest(GenerationRequest):
    messages: list[dict[str, Any]]
    """Plain chat-template messages: role, content as a string (or None), tool_calls with dict
    arguments, tool_call_id and name where given."""
    max_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    parallel_tool_calls: bool = True

    @property
    def parses_tool_calls(self) -> bool:
        """Whether tool calls are read out of the output. With tool_choice "none" the tools are
        still in the prompt (the model knows them) but the output is plain content."""
        return bool(self.tools) and self.tool_choice != "none"

    def sampling_params(self, max_tokens: int, constraint: Any = None) -> SamplingParams:
        """The engine's parameters. Without parallel tool calls, generation stops at the end of
        the first call (the parser takes a last block whose JSON is complete without its tag)."""
        stop = list(self.stop)
        if self.parses_tool_calls and not self.parallel_tool_calls:
            stop.append(CLOSE_TAG)
        return self.sampler(max_tokens, constraint, stop, self.top_logprobs)


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _invalid(param: str, expected: str, value: Any) -> ProtocolError:
    return ProtocolError(f"Invalid '{param}': expected {expected}, got {_show(value)}.", param)


def _bool(body: dict[str, Any], key: str, default: bool | None, param: str | None = None) -> bool | None:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _invalid(param or key, "a boolean", value)
    return value


def _int(body: dict[str, Any], key: str, lo: int, hi: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _invalid(key, f"an integer in [{lo}, {hi}]", value)
    return value


def _number(body: dict[str, Any], key: str, lo: float, hi: float, default: float, *, open_lo: bool = False) -> float:
    value = body.get(key)
    if value is None:
        return default
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value > hi or value < lo or (open_lo and value == lo):
        interval = f"{'(' if open_lo else '['}{lo:g}, {hi:g}]"
        raise _invalid(key, f"a number in {interval}", value)
    return float(value)


def _text(value: Any, param: str, *, allow_none: bool = False) -> str | None:
    """Message content: a string or a list of text parts, joined."""
    if value is None:
        if allow_none:
            return None
        raise ProtocolError(f"Missing '{param}': this message needs content.", param)
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise _invalid(param, "a string or a list of text parts", value)
    texts = []
    for i, part in enumerate(value):
        where = f"{param}[{i}]"
        if not isinstance(part, dict) or part.get("type") != "text":
            kind = part.get("type") if isinstance(part, dict) else part
            raise ProtocolError(
                f"Invalid '{where}': only text parts ({{\"type\": \"text\", \"text\": ...}}) are "
                f"supported, got {_show(kind)}.", where
            )
        if not isinstance(part.get("text"), str):
            raise _invalid(f"{where}.text", "a string", part.get("text"))
        texts.append(part["text"])
    return "".join(texts)


def _tool_calls(value: Any, param: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise _invalid(param, "a list of tool calls", value)
    calls = []
    for i, call in enumerate(value):
        where = f"{param}[{i}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise _invalid(f"{where}.function", "an object with name and arguments", function)
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise _invalid(f"{where}.function.name", "a non-empty string", name)
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as err:
                raise _invalid(f"{where}.function.arguments", f"a JSON object ({err.msg})", arguments) from None
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise _invalid(f"{where}.function.arguments", "a JSON object (as a string)", arguments)
        call_id = call.get("id")
        if call_id is not None and not isinstance(call_id, str):
            raise _invalid(f"{where}.id", "a string", call_id)
        calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
    return calls


def _message(value: Any, i: int) -> dict[str, Any]:
    param = f"messages[{i}]"
    if not isinstance(value, dict):
        raise _invalid(param, "a message object", value)
    role = ROLE_ALIASES.get(value.get("role"), value.get("role"))
    if role not in ROLES:
        raise _invalid(f"{param}.role", f"one of {', '.join(ROLES)}", value.get("role"))
    message: dict[str, Any] = {"role": role}
    has_calls = role == "assistant" and value.get("tool_calls") is not None
    message["content"] = _text(value.get("content"), f"{param}.content", allow_none=role == "assistant")
    if has_calls:
        message["tool_calls"] = _tool_calls(value["tool_calls"], f"{param}.tool_calls")
    elif role == "assistant" and message["content"] is None:
        raise ProtocolError(f"Missing '{param}.content': an assistant message needs content or tool_calls.", f"{param}.content")
    for key in ("name", "tool_call_id"):
        if value.get(key) is not None:
            if not isinstance(value[key], str):
                raise _invalid(f"{param}.{key}", "a string", value[key])
            message[key] = value[key]
    return message


def _tools(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _invalid("tools", "a list of function tools", value)
    tools, names = [], set()
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise _invalid(f"{where}.type", '"function"', tool.get("type") if isinstance(tool, dict) else tool)
        function = tool.get("function")
        if not isinstance(function, dict):
            raise _invalid(f"{where}.function", "an object with a name", function)
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise _invalid(f"{where}.function.name", "a non-empty string", name)
        if name in names:
            raise ProtocolError(f"Invalid '{where}.function.name': tool {name!r} is defined twice.", f"{where}.function.name")
        names.add(name)
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise _invalid(f"{where}.function.parameters", "a JSON schema object", parameters)
        if function.get("description") is not None and not isinstance(function["description"], str):
            raise _invalid(f"{where}.function.description", "a string", function["description"])
        tools.append({"type": "function", "function": {k: v for k, v in function.items() if v is not None}})
    return tools


def _tool_choice(value: Any, tools: list[dict[str, Any]] | None) -> tuple[str, str | None]:
    names = [t["function"]["name"] for t in tools or []]
    if value is None:
        return ("auto" if tools else "none"), None
    if value in ("auto", "none", "required"):
        if value != "none" and not tools:
            raise ProtocolError(f"Invalid 'tool_choice': {value!r} needs 'tools'.", "tool_choice")
        return value, None
    function = value.get("function") if isinstance(value, dict) and value.get("type") == "function" else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        expected = '"auto", "none", "required" or {"type": "function", "function": {"name": ...}}'
        raise _invalid("tool_choice", expected, value)
    if name not in names:
        raise ProtocolError(
            f"Invalid 'tool_choice': no tool named {name!r} in 'tools' ({', '.join(names) or 'none given'}).",
            "tool_choice",
        )
    return "required", name


def _stop(value: Any) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if (
        not isinstance(stops, list) or len(stops) > MAX_STOP_STRINGS
        or any(not isinstance(s, str) or not s for s in stops)
    ):
        raise _invalid("stop", f"a non-empty string or a list of at most {MAX_STOP_STRINGS}", value)
    return stops


def _check_fields(body: dict[str, Any], known: frozenset[str] = _KNOWN_FIELDS) -> None:
    unknown = sorted(k for k in body if k not in known)
    if unknown:
        raise ProtocolError(f"Unrecognized request argument supplied: {unknown[0]}.", unknown[0])
    for key, neutral in _NO_OP_FIELDS.items():
        value = body.get(key)
        if key in ("user", "metadata", "service_tier") or value is None or value == neutral:
            continue
        raise ProtocolError(f"Invalid '{key}': not supported by this server (only {_show(neutral)}).", key)
    n = body.get("n")
    if n is not None and n != 1:
        raise ProtocolError(f"Invalid 'n': only n=1 is supported (one choice per request), got {_show(n)}.", "n")


def parse_chat_request(body: Any) -> ChatRequest:
    """Validates a `/v1/chat/completions` body; raises ProtocolError naming the bad field."""
    if not isinstance(body, dict):
        raise ProtocolError(f"The request body must be a JSON object, got {_show(body)}.")
    _check_fields(body)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _invalid("model", "a model name", model)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _invalid("messages", "a non-empty list of messages", messages)
    logprobs = bool(_bool(body, "logprobs", False))
    top_logprobs = _int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS) or 0
    if top_logprobs and not logprobs:
        raise ProtocolError("Invalid 'top_logprobs': needs 'logprobs' set to true.", "top_logprobs")
    max_tokens = _int(body, "max_completion_tokens", 1, 2**31 - 1)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1, 2**31 - 1)
    return ChatRequest(
        model=model, messages=[_message(m, i) for i, m in enumerate(messages)], max_tokens=max_tokens,
        logprobs=logprobs, top_logprobs=top_logprobs,
        parallel_tool_calls=bool(_bool(body, "parallel_tool_calls", True)),
        **generation_fields(body),
    )


def _quotes(value: Any) -> quotes_protocol.Quotes:
    if value is None:
        return {}
    try:
        return quotes_protocol.decode(value)
    except ValueError as err:
        raise ProtocolError(f"Invalid 'quotes': {err}.", "quotes") from None


def generation_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The fields chat and text completions share: tools (and the constraint on their calls),
    sampling, streaming, and the vendor fields asking for token ids and routed experts."""
    tools = _tools(body.get("tools"))
    tool_choice, tool_name = _tool_choice(body.get("tool_choice"), tools)
    stream = bool(_bool(body, "stream", False))
    options = body.get("stream_options")
    if options is not None and not stream:
        raise ProtocolError("Invalid 'stream_options': only allowed when 'stream' is true.", "stream_options")
    if options is not None and not isinstance(options, dict):
        raise _invalid("stream_options", "an object", options)
    temperature = _number(body, "temperature", 0.0, 2.0, 1.0)
    speculative = _bool(body, "speculative", None)
    if speculative and temperature > 0:
        raise ProtocolError(
            f"Invalid 'speculative': speculative decoding is exact only for greedy decoding, "
            f"and temperature is {temperature:g} (set it to 0).", "speculative"
        )
    return {
        "tools": tools, "tool_choice": tool_choice, "tool_name": tool_name, "stream": stream,
        "include_usage": bool(_bool(options or {}, "include_usage", False, "stream_options.include_usage")),
        "temperature": temperature, "top_p": _number(body, "top_p", 0.0, 1.0, 1.0, open_lo=True),
        "seed": _int(body, "seed", -(2**63), 2**63 - 1), "stop": _stop(body.get("stop")),
        "return_token_ids": bool(_bool(body, "return_token_ids", False)),
        "return_routed_experts": bool(_bool(body, "return_routed_experts", False)),
        "constrained_tool_calls": bool(_bool(body, "constrained_tool_calls", bool(tools))) and bool(tools),
        "quotes": _quotes(body.get("quotes")),
        "speculative": speculative, "ignore_eos": bool(_bool(body, "ignore_eos", False)),
        "min_tokens": _int(body, "min_tokens", 0, 2**31 - 1) or 0,
        "top_k": max(0, _int(body, "top_k", -1, 2**31 - 1) or 0),  # vLLM's -1 and 0 both mean off
        "repetition_penalty": _number(body, "repetition_penalty", 0.0, 100.0, 1.0, open_lo=True),
    }


# ---- model text -> content and tool calls -------------------------------------------------------


class ToolTextSplitter:
    """Model text (fed whole or in deltas) -> content pieces and tool calls, in order.

    `feed`/`finish` return items: a `str` (content to append) or a `ToolCall`. A block that does
    not decode stays in the content verbatim, so nothing the model wrote is lost. With
    `parse=False` the text is content as it is."""

    def __init__(self, parse: bool = True, parallel: bool = True) -> None:
        self._parser = StreamingToolCallParser() if parse else None
        self._parallel = parallel
        self.calls: list[ToolCall] = []
        self._has_content = False
        self._after_raw = False

    def feed(self, text: str) -> list[str | ToolCall]:
        if self._parser is None:
            self._has_content = self._has_content or bool(text)
            return [text] if text else []
        return self._convert(self._parser.feed(text))

    def finish(self) -> list[str | ToolCall]:
        return [] if self._parser is None else self._convert(self._parser.finish())

    def _convert(self, events: list[Any]) -> list[str | ToolCall]:
        out: list[str | ToolCall] = []
        for event in events:
            if isinstance(event, TextDelta):
                text = event.text
                if self._after_raw and not text.startswith("\n"):
                    text = "\n" + text
                out.append(text)
                self._after_raw, self._has_content = False, True
            elif isinstance(event, ToolCallFinished) and (self._parallel or not self.calls):
                self.calls.append(event.call)
                out.append(event.call)
            elif isinstance(event, ToolCallFailed):
                out.append(("\n" if self._has_content else "") + event.error.raw)
                self._after_raw, self._has_content = True, True
        return out


def split_tool_text(text: str, parse: bool = True, parallel: bool = True) -> tuple[str, list[ToolCall]]:
    """(content, tool calls) of a whole message."""
    splitter = ToolTextSplitter(parse, parallel)
    items = splitter.feed(text) + splitter.finish()
    return "".join(i for i in items if isinstance(i, str)), splitter.calls


# ---- responses ----------------------------------------------------------------------------------


def new_completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex


@dataclass(frozen=True)
class ResponseMeta:
    """What every object of one response shares."""

    model: str
    id: str = field(default_factory=new_completion_id)
    created: int = field(default_factory=lambda: int(time.time()))


class TokenText:
    """Token ids -> the text and bytes that OpenAI logprob entries carry."""

    def __init__(self, tokenizer: Any) -> None:
        self.strings: list[str] = tokenizer.token_strings()
        raw = getattr(tokenizer, "id_to_bytes", None)
        self.bytes: list[bytes] = list(raw) if raw is not None else [s.encode() for s in self.strings]

    def entry(self, token: int, logprob: float) -> dict[str, Any]:
        value = logprob if math.isfinite(logprob) else MIN_LOGPROB
        return {"token": self.strings[token], "logprob": max(value, MIN_LOGPROB), "bytes": list(self.bytes[token])}

    def logprobs(
        self, token_ids: Sequence[int], logprobs: Sequence[float], top: Sequence[Sequence[tuple[int, float]]]
    ) -> list[dict[str, Any]]:
        """`logprobs.content` entries, one per token."""
        entries = []
        for i, (token, logprob) in enumerate(zip(token_ids, logprobs)):
            entry = self.entry(token, logprob)
            alternatives = top[i] if i < len(top) else []
            entry["top_logprobs"] = [self.entry(t, lp) for t, lp in alternatives]
            entries.append(entry)
        return entries


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """OpenAI's usage object; `cached_tokens`: prompt tokens served from the prefix cache."""
    return {
        "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def finish_reason(engine_reason: str, made_tool_calls: bool) -> str:
    """The OpenAI finish reason: "tool_calls" when calls were made and the model stopped;
    "abort" (vLLM's word) when a weight load ended the completion (Engine.load_weights)."""
    if engine_reason == "stop" and made_tool_calls:
        return "tool_calls"
    if engine_reason == "abort":
        return "abort"
    return "length" if engine_reason == "length" else "stop"


def chat_completion(
    meta: ResponseMeta,
    *,
    content: str,
    tool_calls: list[ToolCall],
    finish_reason: str,
    usage: dict[str, int],
    logprobs: list[dict[str, Any]] | None = None,
    extra_choice: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A non-streamed `chat.completion` with one choice."""
    message: dict[str, Any] = {"role": "assistant", "content": (content or None) if tool_calls else content}
    if tool_calls:
        message["tool_calls"] = [call.to_openai() for call in tool_calls]
    choice = {
        "index": 0, "message": message,
        "logprobs": None if logprobs is None else {"content": logprobs, "refusal": None},
        "finish_reason": finish_reason, **(extra_choice or {}),
    }
    return {
        "id": meta.id, "object": "chat.completion", "created": meta.created, "model": meta.model,
        "system_fingerprint": None, "choices": [choice], "usage": usage, **(extra or {}),
    }


def chat_chunk(
    meta: ResponseMeta,
    delta: dict[str, Any] | None,
    *,
    finish_reason: str | None = None,
    logprobs: list[dict[str, Any]] | None = None,
    usage: dict[str, int] | None = None,
    include_usage: bool = False,
    extra_choice: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A `chat.completion.chunk`; `delta=None` makes the usage-only chunk (no choices)."""
    chunk: dict[str, Any] = {
        "id": meta.id, "object": "chat.completion.chunk", "created": meta.created,
        "model": meta.model, "system_fingerprint": None, "choices": [], **(extra or {}),
    }
    if delta is not None:
        chunk["choices"].append({
            "index": 0, "delta": delta,
            "logprobs": None if logprobs is None else {"content": logprobs, "refusal": None},
            "finish_reason": finish_reason, **(extra_choice or {}),
        })
    if include_usage:
        chunk["usage"] = usage
    return chunk


def tool_call_delta(index: int, call: ToolCall) -> dict[str, Any]:
    """A whole call as one `delta.tool_calls` entry."""
    return {"index": index, **call.to_openai()}
