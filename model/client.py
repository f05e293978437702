"""An async client for any OpenAI-compatible chat server: ours (`python -m model.serve`) or vLLM
serving a Composer checkpoint (`vllm serve DIR --enable-auto-tool-choice --tool-call-parser hermes`).

    from model.client import OpenAICompatibleClient
    async with OpenAICompatibleClient("http://127.0.0.1:8000/v1", api_key=None) as client:
        result = await client.chat(messages, tools=tools, max_tokens=256, temperature=0)
        result.content, result.tool_calls, result.finish_reason, result.usage, result.logprobs
        async for delta in client.stream_chat(messages, tools=tools):
            print(delta.content, end="")
        async for delta in client.stream_completion(prompt_ids, max_tokens=64, extra={"return_token_ids": True}):
            ...                                   # token-in, token-out (/v1/completions)

`tool_calls` are `model.toolcalls.ToolCall`s. When the request has tools and the server sent the
model's raw `<tool_call>` blocks as content (a server without a tool parser), they are parsed
here, so both kinds of server give the same result; a call whose arguments are not a JSON object
becomes a `ToolCallError` in `tool_call_errors`. Token ids (vLLM's `return_token_ids`, ours too)
and routed experts come back when the server sends them; ask with `extra={...}`.

Errors raise `APIError` with the server's message, status, type, param and code; connection
failures raise `APIConnectionError`. Connection errors and 429/503 answers are retried with
exponential backoff (honouring Retry-After) before any output was received; nothing else is.
Tested in tests/model/test_serve.py against model/serve.py.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from model.completions_protocol import CompletionDelta, parse_completion_chunk
from model.openai_protocol import ToolTextSplitter, split_tool_text
from model.toolcalls import ToolCall, ToolCallError, new_call_id

RETRY_STATUSES = frozenset({429, 503})


class APIError(Exception):
    """The server refused or failed a request; `message` is the server's own."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message, self.status, self.type, self.param, self.code, self.body = (
            message, status, type, param, code, body,
        )

    def __str__(self) -> str:
        where = f" (param: {self.param})" if self.param else ""
        return f"HTTP {self.status}: {self.message}{where}" if self.status else self.message


class APIConnectionError(APIError):
    """The server could not be reached, or the connection broke."""


class APITimeoutError(APIConnectionError):
    """The server took longer than the client's timeout."""


@dataclass
class Usage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


@dataclass
class TokenLogprob:
    token: str
    logprob: float
    bytes: bytes | None = None
    top_logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass
class ChatResult:
    content: str
    tool_calls: list[ToolCall]
    finish_reason: str | None
    """"stop", "length" or "tool_calls" (None if a stream ended without one)."""
    usage: Usage | None = None
    logprobs: list[TokenLogprob] | None = None
    """One entry per completion token, when the server returned them."""
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    routed_experts: list[Any] | None = None
    """Nested lists (positions, layers, k) when asked for with return_routed_experts."""
    tool_call_errors: list[ToolCallError] = field(default_factory=list)
    id: str = ""
    model: str = ""


@dataclass
class ToolCallDelta:
    """A piece of one streamed tool call: `arguments` fragments concatenate to its JSON."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class ChatDelta:
    """What one streamed chunk added."""

    content: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)
    finish_reason: str | None = None
    logprobs: list[TokenLogprob] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    prompt_token_ids: list[int] | None = None
    routed_experts: list[Any] | None = None
    usage: Usage | None = None
    id: str = ""
    model: str = ""


# ---- parsing responses --------------------------------------------------------------------------


def _logprobs(value: Any) -> list[TokenLogprob] | None:
    entries = value.get("content") if isinstance(value, Mapping) else None
    if not isinstance(entries, list):
        return None

    def one(entry: Mapping[str, Any]) -> TokenLogprob:
        raw = entry.get("bytes")
        top = [one(t) for t in entry.get("top_logprobs") or []]
        return TokenLogprob(entry.get("token", ""), float(entry.get("logprob", 0.0)), None if raw is None else bytes(raw), top)

    return [one(e) for e in entries]


def _usage(value: Any) -> Usage | None:
    if not isinstance(value, Mapping):
        return None
    prompt, completion = int(value.get("prompt_tokens") or 0), int(value.get("completion_tokens") or 0)
    return Usage(prompt, completion, int(value.get("total_tokens") or prompt + completion))


def _tool_call(index: int, call_id: str | None, name: str | None, arguments: Any) -> ToolCall | ToolCallError:
    raw = json.dumps({"id": call_id, "name": name, "arguments": arguments}, ensure_ascii=False)
    if not name:
        return ToolCallError(index, f"tool call {index + 1} has no function name", raw)
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as err:
            return ToolCallError(index, f"tool call {index + 1} ({name}): arguments are not valid JSON: {err}", raw)
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return ToolCallError(index, f"tool call {index + 1} ({name}): arguments must be a JSON object", raw)
    return ToolCall(name=name, arguments=arguments, id=call_id or new_call_id(), raw=raw)


def _sorted_calls(
    content: str, calls: list[ToolCall | ToolCallError], parse_content: bool
) -> tuple[str, list[ToolCall], list[ToolCallError]]:
    if parse_content:
        content, parsed = split_tool_text(content)
        calls = [*calls, *parsed]
    good = [c for c in calls if isinstance(c, ToolCall)]
    return content, good, [c for c in calls if isinstance(c, ToolCallError)]


def parse_chat_response(body: Mapping[str, Any], parse_content_calls: bool = True) -> ChatResult:
    """A `chat.completion` object -> ChatResult (raw `<tool_call>` content is parsed when asked)."""
    choices = body.get("choices") or []
    if not choices:
        raise APIError(f"the response has no choices: {json.dumps(body)[:200]}", body=body)
    choice = choices[0]
    message = choice.get("message") or {}
    calls = []
    for i, entry in enumerate(message.get("tool_calls") or []):
        function = entry.get("function") or {}
        calls.append(_tool_call(i, entry.get("id"), function.get("name"), function.get("arguments")))
    content, good, errors = _sorted_calls(message.get("content") or "", calls, parse_content_calls)
    return ChatResult(
        content=content, tool_calls=good, tool_call_errors=errors,
        finish_reason="tool_calls" if good and choice.get("finish_reason") == "stop" else choice.get("finish_reason"),
        usage=_usage(body.get("usage")), logprobs=_logprobs(choice.get("logprobs")),
        prompt_token_ids=body.get("prompt_token_ids"), completion_token_ids=choice.get("token_ids"),
        routed_experts=choice.get("routed_experts"), id=body.get("id", ""), model=body.get("model", ""),
    )


def parse_chunk(chunk: Mapping[str, Any]) -> ChatDelta:
    """A `chat.completion.chunk` object -> ChatDelta."""
    delta = ChatDelta(
        usage=_usage(chunk.get("usage")), prompt_token_ids=chunk.get("prompt_token_ids"),
        id=chunk.get("id", ""), model=chunk.get("model", ""),
    )
    choices = chunk.get("choices") or []
    if not choices:
        return delta
    choice = choices[0]
    body = choice.get("delta") or {}
    delta.content = body.get("content") or ""
    for i, entry in enumerate(body.get("tool_calls") or []):
        function = entry.get("function") or {}
        delta.tool_calls.append(ToolCallDelta(
            index=entry.get("index", i), id=entry.get("id"), name=function.get("name"),
            arguments=function.get("arguments") or "",
        ))
    delta.finish_reason = choice.get("finish_reason")
    delta.logprobs = _logprobs(choice.get("logprobs")) or []
    delta.token_ids = list(choice.get("token_ids") or [])
    delta.routed_experts = choice.get("routed_experts")
    return delta


class ChatAccumulator:
    """Folds a stream's ChatDeltas into the ChatResult a plain `chat` would have given."""

    def __init__(self) -> None:
        self._content: list[str] = []
        self._calls: dict[int, list[Any]] = {}  # index -> [id, name, argument fragments]
        self._logprobs: list[TokenLogprob] = []
        self._token_ids: list[int] = []
        self._result = ChatResult(content="", tool_calls=[], finish_reason=None)

    def add(self, delta: ChatDelta) -> None:
        result = self._result
        self._content.append(delta.content)
        for piece in delta.tool_calls:
            call = self._calls.setdefault(piece.index, [None, None, []])
            call[0], call[1] = call[0] or piece.id, call[1] or piece.name
            call[2].append(piece.arguments)
        self._logprobs += delta.logprobs
        self._token_ids += delta.token_ids
        result.finish_reason = delta.finish_reason or result.finish_reason
        result.usage = delta.usage or result.usage
        result.prompt_token_ids = delta.prompt_token_ids or result.prompt_token_ids
        result.routed_experts = delta.routed_experts or result.routed_experts
        result.id, result.model = result.id or delta.id, result.model or delta.model

    def result(self) -> ChatResult:
        result = self._result
        calls = [_tool_call(i, c[0], c[1], "".join(c[2])) for i, c in sorted(self._calls.items())]
        result.content, result.tool_calls, result.tool_call_errors = _sorted_calls("".join(self._content), calls, False)
        if result.tool_calls and result.finish_reason == "stop":
            result.finish_reason = "tool_calls"
        result.logprobs = self._logprobs or None
        result.completion_token_ids = self._token_ids or None
        return result


class _RawCallSplitter:
    """Client-side parsing of `<tool_call>` blocks a server left in streamed content."""

    def __init__(self) -> None:
        self._splitter = ToolTextSplitter()
        self._next_index = 0  # past every index the server itself used

    def apply(self, delta: ChatDelta, final: bool = False) -> ChatDelta:
        for piece in delta.tool_calls:
            self._next_index = max(self._next_index, piece.index + 1)
        items = self._splitter.feed(delta.content) if not final else self._splitter.finish()
        delta.content = "".join(i for i in items if isinstance(i, str))
        for item in items:
            if isinstance(item, ToolCall):
                delta.tool_calls.append(ToolCallDelta(self._next_index, item.id, item.name, item.arguments_json))
                self._next_index += 1
        return delta


def _error_from_body(status: int | None, text: str) -> APIError:
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return APIError(text.strip() or f"HTTP {status} with an empty body", status=status, body=text)
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, str):
        error = {"message": error}
    if not isinstance(error, dict):  # vLLM's older shape: the fields at the top level
        error = body if isinstance(body, dict) else {}
    message = error.get("message") or text
    return APIError(
        str(message), status=status, type=error.get("type"), param=error.get("param"),
        code=None if error.get("code") is None else str(error.get("code")), body=body,
    )


# ---- the client ---------------------------------------------------------------------------------


class OpenAICompatibleClient:
    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 600.0,
        *,
        max_retries: int = 3,
        backoff: float = 0.5,
    ) -> None:
        """`base_url` ends in `/v1`; `model` None means the server's first model."""
        self.base_url = base_url.rstrip("/")
        self.api_key, self.model, self.timeout = api_key, model, timeout
        self.max_retries, self.backoff = max_retries, backoff
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> OpenAICompatibleClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ---- API ------------------------------------------------------------------------------------

    async def list_models(self) -> list[str]:
        body = await self._request_json("GET", "/models")
        return [m["id"] for m in body.get("data", []) if isinstance(m, dict) and "id" in m]

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        logprobs: bool = True,
        top_logprobs: int = 0,
        extra: Mapping[str, Any] | None = None,
    ) -> ChatResult:
        """One completion; `extra` adds fields to the body (e.g. {"return_token_ids": True})."""
        body = await self._body(
            messages, False, tools=tools, tool_choice=tool_choice, max_tokens=max_tokens,
            temperature=temperature, top_p=top_p, seed=seed, stop=stop, logprobs=logprobs,
            top_logprobs=top_logprobs, extra=extra,
        )
        response = await self._request_json("POST", "/chat/completions", body)
        return parse_chat_response(response, parse_content_calls=tools is not None)

    async def stream_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        logprobs: bool = True,
        top_logprobs: int = 0,
        extra: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[ChatDelta]:
        """The completion as it streams; fold the deltas with ChatAccumulator. Closing the
        iterator closes the connection, which cancels the generation on our server."""
        body = await self._body(
            messages, True, tools=tools, tool_choice=tool_choice, max_tokens=max_tokens,
            temperature=temperature, top_p=top_p, seed=seed, stop=stop, logprobs=logprobs,
            top_logprobs=top_logprobs, extra=extra,
        )
        raw_calls = _RawCallSplitter() if tools is not None else None
        response = await self._send("POST", "/chat/completions", body, stream=True)
        try:
            async for chunk in self._events(response):
                delta = parse_chunk(chunk)
                yield raw_calls.apply(delta) if raw_calls else delta
            if raw_calls is not None:
                tail = raw_calls.apply(ChatDelta(), final=True)
                if tail.content or tail.tool_calls:
                    yield tail
        finally:
            response.close()

    async def stream_completion(
        self,
        prompt: Sequence[int] | str,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        logprobs: int | None = 0,
        extra: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[CompletionDelta]:
        """A text completion (`/v1/completions`) as it streams: the prompt's ids go to the
        engine unchanged. Fold the deltas with model.completions_protocol.CompletionAccumulator."""
        body: dict[str, Any] = {"model": self.model or await self._default_model(),
                                "prompt": prompt if isinstance(prompt, str) else list(prompt),
                                "stream": True, "stream_options": {"include_usage": True}}
        fields = {"max_tokens": max_tokens, "temperature": temperature, "top_p": top_p, "seed": seed, "logprobs": logprobs}
        body |= {k: v for k, v in fields.items() if v is not None} | dict(extra or {})
        response = await self._send("POST", "/completions", body, stream=True)
        try:
            async for chunk in self._events(response):
                yield parse_completion_chunk(chunk)
        finally:
            response.close()

    # ---- plumbing -------------------------------------------------------------------------------

    async def _body(
        self,
        messages: Sequence[Mapping[str, Any]],
        stream: bool,
        *,
        logprobs: bool,
        top_logprobs: int,
        extra: Mapping[str, Any] | None,
        **fields: Any,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model or await self._default_model(),
            "messages": [_plain_message(m) for m in messages],
        }
        for key, value in fields.items():
            if value is not None:
                body[key] = list(value) if key in ("tools", "stop") and not isinstance(value, str) else value
        if logprobs:
            body["logprobs"] = True
            if top_logprobs:
                body["top_logprobs"] = top_logprobs
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return {**body, **(extra or {})}

    async def _default_model(self) -> str:
        models = await self.list_models()
        if not models:
            raise APIError(f"{self.base_url}/models lists no models; pass model= to the client")
        self.model = models[0]
        return self.model

    def _session_for_use(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._session = aiohttp.ClientSession(headers=headers)
        return self._session

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None:
            try:
                return min(float(retry_after), 60.0)
            except ValueError:
                pass
        return self.backoff * 2**attempt * (0.75 + random.random() / 2)

    async def _send(self, method: str, path: str, body: Any = None, *, stream: bool = False) -> aiohttp.ClientResponse:
        """A response with a 2xx status, after retries; raises APIError otherwise."""
        url = self.base_url + path
        if stream:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=self.timeout)
        else:
            timeout = aiohttp.ClientTimeout(total=self.timeout)
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                response = await self._session_for_use().request(method, url, json=body, timeout=timeout)
            except aiohttp.ConnectionTimeoutError as err:
                if last:
                    raise APIConnectionError(f"could not connect to {url} in {self.timeout:g} s: {err}") from err
            except TimeoutError as err:
                raise APITimeoutError(f"{method} {url} timed out after {self.timeout:g} s") from err
            except aiohttp.ClientConnectionError as err:
                if last:
                    raise APIConnectionError(f"could not reach {url}: {type(err).__name__}: {err}") from err
            else:
                if response.status < 400:
                    return response
                if response.status not in RETRY_STATUSES or last:
                    text = await response.text()
                    response.release()
                    raise _error_from_body(response.status, text)
                retry_after = response.headers.get("Retry-After")
                response.release()
                await asyncio.sleep(self._delay(attempt, retry_after))
                continue
            await asyncio.sleep(self._delay(attempt, None))
        raise AssertionError("unreachable")

    async def _request_json(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        response = await self._send(method, path, body)
        try:
            data = await response.json(content_type=None)
        except (json.JSONDecodeError, aiohttp.ClientError, TimeoutError) as err:
            raise APIConnectionError(f"{method} {self.base_url + path}: unreadable response: {err}") from err
        finally:
            response.release()
        if not isinstance(data, dict):
            raise APIError(f"{method} {self.base_url + path}: expected a JSON object, got {str(data)[:100]}", body=data)
        return data

    async def _events(self, response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
        """The JSON objects of a server-sent event stream, up to `data: [DONE]`. A stream that
        ends before either [DONE] or a finish_reason was cut off (the server died or hung up):
        APIConnectionError, not a silently shortened answer."""
        buffer, finished = b"", False
        try:
            async for piece in response.content.iter_any():
                buffer += piece
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    data = _sse_data(line)
                    if data is None:
                        continue
                    if data == "[DONE]":
                        return
                    event = _event_json(data)
                    finished = finished or _finishes(event)
                    yield event
        except (aiohttp.ClientError, TimeoutError) as err:
            raise APIConnectionError(f"the stream from {response.url} broke: {type(err).__name__}: {err}") from err
        if not finished:
            raise APIConnectionError(f"the stream from {response.url} ended mid-answer (no finish_reason, "
                                     "no [DONE]): the server stopped or hung up")


def _sse_data(line: bytes) -> str | None:
    text = line.decode("utf-8").rstrip("\r")
    if not text.startswith("data:"):
        return None  # blank separators, comments, event names
    return text[5:].strip()


def _event_json(data: str) -> dict[str, Any]:
    try:
        event = json.loads(data)
    except json.JSONDecodeError as err:
        raise APIError(f"the server sent an unreadable event: {data[:100]!r} ({err})") from None
    if isinstance(event, dict) and isinstance(event.get("error"), dict | str):
        raise _error_from_body(None, data)  # an error after the stream began
    return event


def _finishes(event: Any) -> bool:
    """Whether a chunk carries a choice's finish_reason (the answer is complete)."""
    choices = event.get("choices") if isinstance(event, dict) else None
    return any(isinstance(c, dict) and c.get("finish_reason") for c in choices or [])


def _plain_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message as JSON data; ToolCall objects in `tool_calls` become OpenAI entries."""
    out = dict(message)
    calls = out.get("tool_calls")
    if calls:
        out["tool_calls"] = [c.to_openai() if isinstance(c, ToolCall) else c for c in calls]
    return out
