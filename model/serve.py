"""An OpenAI-compatible HTTP server for the engine (aiohttp): `/v1/chat/completions` (plain and
streamed, tool calls, logprobs, token ids, routed experts), `/v1/completions` (token ids in and
out, as vLLM serves them: model/serve_completions.py), `/v1/models` and `/health`.

    python -m model.serve [--model DIR] [--host 127.0.0.1] [--port 8000]
                          [--served-model-name composer-mini] [--max-batch 8] [--api-key KEY]
                          [--kv-cache-dtype bf16|int8|fp32] [--prefix-cache-gb 1.5] [--prefill-chunk 512]
                          [--no-prefault]

    curl localhost:8000/v1/chat/completions -H 'content-type: application/json' \\
        -d '{"model": "composer-mini", "messages": [{"role": "user", "content": "hi"}]}'

Without --model it serves composer-mini (built on first use). With --api-key (or $COMPOSER_API_KEY)
every /v1 request needs `Authorization: Bearer KEY`. `--enable-weight-sync` adds
`POST /v1/load_weights` for RL trainers (model/weight_sync.py: loopback only, with its own
token). Every answer (a plain response, or a stream's chunk with the finish reason) carries a
top-level `weight_version`: the engine's weights the whole completion ran on. In tests:
`create_app(engine, name)` and an aiohttp AppRunner (tests/model/test_serve.py).

Requests run concurrently: each is submitted to the engine, which batches them. A client that
disconnects cancels its generation. The model's text goes through model.toolcalls'
StreamingToolCallParser, so `<tool_call>` blocks come back as OpenAI `tool_calls` (streamed as one
`delta.tool_calls` entry per call, sent when the call is complete) and never as content; with
tools, calls are decoded under model/constrained.py's ToolCallConstraint unless the request sets
`constrained_tool_calls: false`. Request fields and response shapes: model/openai_protocol.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import json
import logging
import os
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import jinja2
from aiohttp import web

from model import prefault, weight_sync
from model.constrained import ToolCallConstraint
from model.engine import PREFILL_CHUNK, PREFIX_CACHE_GB, ContextLengthError, Engine
from model.home import DEFAULT_MODEL
from model.openai_protocol import (
    ChatRequest,
    ProtocolError,
    ResponseMeta,
    TokenText,
    ToolTextSplitter,
    chat_chunk,
    chat_completion,
    error_body,
    finish_reason,
    parse_chat_request,
    split_tool_text,
    tool_call_delta,
    usage,
)
from model.sequence import Completion, StreamEvent

log = logging.getLogger("composer.serve")

POLL_SECONDS = 0.2
"""How often a waiting request checks whether its client is still connected."""
MAX_BODY_BYTES = 64 * 2**20


@dataclass
class ServerState:
    engine: Engine
    model_name: str
    api_key: str | None = None
    created: int = field(default_factory=lambda: int(time.time()))
    in_flight: int = 0
    _token_text: TokenText | None = None

    @property
    def token_text(self) -> TokenText:
        if self._token_text is None:
            self._token_text = TokenText(self.engine.tokenizer)
        return self._token_text



STATE = web.AppKey("composer_state", ServerState)


class ClientGone(Exception):
    """The client closed the connection while its request was running."""


def _json_response(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.json_response(body, status=status, dumps=lambda o: json.dumps(o, ensure_ascii=False))


# ---- middleware ---------------------------------------------------------------------------------


@web.middleware
async def _errors(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """Every failure as an OpenAI-shaped JSON error; a bug is a 500 and the server goes on."""
    try:
        return await handler(request)
    except ProtocolError as err:
        return _json_response(err.body(), err.status)
    except web.HTTPException as err:
        if err.status < 400:
            raise
        if err.status == 404:
            message = f"Unknown endpoint: {request.method} {request.path}."
        elif err.status == 405:
            message = f"Method {request.method} is not allowed on {request.path}."
        else:
            message = err.text or err.reason
        return _json_response(error_body(message, "invalid_request_error"), err.status)
    except Exception as err:
        log.exception("error serving %s %s", request.method, request.path)
        message = f"Internal server error: {type(err).__name__}: {err}"
        return _json_response(error_body(message, "server_error"), 500)


@web.middleware
async def _auth(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    key = request.app[STATE].api_key
    if key is not None and request.path.startswith("/v1"):
        given = request.headers.get("Authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
            what = "Incorrect API key provided" if given else "Missing API key"
            raise ProtocolError(
                f"{what}: send it in the Authorization header as 'Bearer <key>'.",
                "Authorization", code="invalid_api_key", status=401,
            )
    return await handler(request)


# ---- the engine seen from asyncio ---------------------------------------------------------------


def _disconnected(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


class _Generation:
    """One engine request: its StreamEvents, then its Completion, delivered on the event loop."""

    def __init__(self, engine: Engine, prompt_ids: list[int], params: Any) -> None:
        self._loop = asyncio.get_running_loop()
        self._items: asyncio.Queue[StreamEvent | Completion | BaseException] = asyncio.Queue()
        self.cancel = engine.submit(prompt_ids, params, on_event=self._put, on_done=self._put)

    def _put(self, item: StreamEvent | Completion | BaseException) -> None:
        # Runs on the engine's thread; a closed loop means nobody is listening any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._items.put_nowait, item)

    async def next(self, request: web.Request) -> StreamEvent | Completion:
        """The next event or the completion; raises ClientGone once the client has left."""
        while True:
            if _disconnected(request):
                raise ClientGone
            try:
                item = await asyncio.wait_for(self._items.get(), POLL_SECONDS)
            except TimeoutError:
                continue
            if isinstance(item, BaseException):
                raise item
            return item


# ---- handlers -----------------------------------------------------------------------------------


async def health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return _json_response({
        "status": "ok", "model": state.model_name, "requests_in_flight": state.in_flight,
        "prefix_cache": report() if (report := getattr(state.engine, "prefix_cache_report", None)) else None,
        "prefault": report() if (report := getattr(state.engine, "prefault_report", None)) else None,
    })


async def list_models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    model = {
        "id": state.model_name, "object": "model", "created": state.created, "owned_by": "composer",
        "max_model_len": state.engine.max_seq_len,
    }
    return _json_response({"object": "list", "data": [model]})


async def _read_body(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ProtocolError(
            f"The request body is not valid JSON ({err}); send a JSON object with 'model' and 'messages'.",
            code="invalid_json",
        ) from None


def _constraint(state: ServerState, chat: ChatRequest) -> ToolCallConstraint | None:
    if not chat.constrained_tool_calls or not chat.tools:
        return None
    tools = chat.tools
    if chat.tool_name is not None:
        tools = [t for t in tools if t["function"]["name"] == chat.tool_name]
    mode = chat.tool_choice if chat.tool_choice in ("none", "required") else "auto"
    try:
        return state.engine.tool_call_constraint(tools, mode, chat.quotes)
    except ValueError as err:
        raise ProtocolError(
            f"Invalid 'tools' for constrained tool calls: {err} (or set 'constrained_tool_calls' to false).",
            "tools",
        ) from None


def _prepare(state: ServerState, chat: ChatRequest) -> tuple[list[int], Any]:
    """The prompt ids and sampling parameters; max_tokens is clamped to the context."""
    engine = state.engine
    try:
        prompt = engine.tokenizer.encode_chat(chat.messages, tools=chat.tools)
    except jinja2.TemplateError as err:
        raise ProtocolError(f"Invalid 'messages': the chat template rejected them: {err}", "messages") from None
    room = engine.max_seq_len - len(prompt)
    if room < 1:
        raise ProtocolError(
            f"This model's maximum context length is {engine.max_seq_len} tokens, but the messages "
            f"have {len(prompt)} tokens, which leaves no room for a completion. Shorten 'messages'.",
            "messages", code="context_length_exceeded",
        )
    max_tokens = min(chat.max_tokens or room, room)
    try:
        params = chat.sampling_params(max_tokens, _constraint(state, chat))
    except ValueError as err:
        raise ProtocolError(f"Invalid sampling parameters: {err}") from None
    return prompt, params


def _submit(state: ServerState, prompt: list[int], params: Any) -> _Generation:
    try:
        return _Generation(state.engine, prompt, params)
    except ContextLengthError as err:
        raise ProtocolError(str(err), "messages", code="context_length_exceeded") from None


def check_model(state: ServerState, name: str) -> None:
    if name != state.model_name:
        raise ProtocolError(
            f"Invalid 'model': the model '{name}' does not exist; this server serves "
            f"'{state.model_name}'.", "model", code="model_not_found", status=404,
        )


async def chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    chat = parse_chat_request(await _read_body(request))
    check_model(state, chat.model)
    prompt, params = _prepare(state, chat)
    meta = ResponseMeta(model=state.model_name)
    state.in_flight += 1
    try:
        if chat.stream:
            return await _stream(request, state, chat, meta, prompt, params)
        return await _complete(request, state, chat, meta, prompt, params)
    finally:
        state.in_flight -= 1


async def _complete(
    request: web.Request, state: ServerState, chat: ChatRequest, meta: ResponseMeta, prompt: list[int], params: Any
) -> web.StreamResponse:
    generation = _submit(state, prompt, params)
    try:
        while not isinstance(done := await generation.next(request), Completion):
            pass
    except ClientGone:
        log.info("client left; cancelled %s", meta.id)
        return web.Response(status=499)
    finally:
        generation.cancel()
    return _json_response(_completion_body(state, chat, meta, done))


def _experts(done: Completion) -> list[Any] | None:
    return None if done.routed_experts is None else done.routed_experts.tolist()


def _completion_body(state: ServerState, chat: ChatRequest, meta: ResponseMeta, done: Completion) -> dict[str, Any]:
    content, calls = split_tool_text(done.text, chat.parses_tool_calls, chat.parallel_tool_calls)
    extra: dict[str, Any] = {"weight_version": done.weight_version}
    extra_choice = {}
    if chat.return_token_ids:
        extra["prompt_token_ids"] = done.prompt_ids
        extra_choice["token_ids"] = done.token_ids
    if chat.return_routed_experts:
        extra_choice["routed_experts"] = _experts(done)
    logprobs = None
    if chat.logprobs:
        logprobs = state.token_text.logprobs(done.token_ids, done.logprobs, done.top_logprobs)
    return chat_completion(
        meta, content=content, tool_calls=calls,
        finish_reason=finish_reason(done.finish_reason, bool(calls)),
        usage=usage(len(done.prompt_ids), len(done.token_ids), done.cached_tokens), logprobs=logprobs,
        extra_choice=extra_choice, extra=extra,
    )


class _ChunkStream:
    """Engine events -> `chat.completion.chunk` objects for one streamed choice. Token data
    (logprobs, token ids) rides on the first chunk sent after its tokens; tokens whose text is
    held back (inside a tool call) wait for the next chunk."""

    def __init__(self, state: ServerState, chat: ChatRequest, meta: ResponseMeta, prompt: list[int]) -> None:
        self.state, self.chat, self.meta, self.prompt = state, chat, meta, prompt
        self.splitter = ToolTextSplitter(chat.parses_tool_calls, chat.parallel_tool_calls)
        self.calls = 0
        self._ids: list[int] = []
        self._logprobs: list[float] = []
        self._top: list[list[tuple[int, float]]] = []

    def start(self) -> dict[str, Any]:
        extra = {"prompt_token_ids": self.prompt} if self.chat.return_token_ids else None
        return self._chunk({"role": "assistant", "content": ""}, extra=extra)

    def on_event(self, event: StreamEvent) -> list[dict[str, Any]]:
        self._ids += event.token_ids
        self._logprobs += event.logprobs
        self._top += event.top_logprobs
        chunks = self._deltas(self.splitter.feed(event.text))
        if not chunks and event.token_ids and (self.chat.logprobs or self.chat.return_token_ids):
            # Text held back (a tool call being written): its tokens still go out now, in an
            # empty delta, as vLLM sends them.
            chunks.append(self._chunk({}))
        return chunks

    def finish(self, done: Completion) -> list[dict[str, Any]]:
        chunks = self._deltas(self.splitter.finish())
        extra_choice = {"routed_experts": _experts(done)} if self.chat.return_routed_experts else None
        reason = finish_reason(done.finish_reason, bool(self.splitter.calls))
        version = {"weight_version": done.weight_version}
        chunks.append(self._chunk({}, finish_reason=reason, extra=version, extra_choice=extra_choice))
        if self.chat.include_usage:
            totals = usage(len(done.prompt_ids), len(done.token_ids), done.cached_tokens)
            chunks.append(chat_chunk(self.meta, None, usage=totals, include_usage=True))
        return chunks

    def _deltas(self, items: list[Any]) -> list[dict[str, Any]]:
        chunks, text = [], []
        for item in items:
            if isinstance(item, str):
                text.append(item)
                continue
            if text:
                chunks.append(self._chunk({"content": "".join(text)}))
                text = []
            chunks.append(self._chunk({"tool_calls": [tool_call_delta(self.calls, item)]}))
            self.calls += 1
        if text:
            chunks.append(self._chunk({"content": "".join(text)}))
        return chunks

    def _chunk(
        self,
        delta: dict[str, Any],
        *,
        finish_reason: str | None = None,
        extra: dict[str, Any] | None = None,
        extra_choice: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        choice = dict(extra_choice or {})
        logprobs = None
        if self._ids or finish_reason is not None:
            if self.chat.logprobs:
                logprobs = self.state.token_text.logprobs(self._ids, self._logprobs, self._top)
            if self.chat.return_token_ids:
                choice["token_ids"] = self._ids
            self._ids, self._logprobs, self._top = [], [], []
        return chat_chunk(
            self.meta, delta, finish_reason=finish_reason, logprobs=logprobs,
            include_usage=self.chat.include_usage, extra_choice=choice, extra=extra,
        )


def _sse(obj: dict[str, Any] | str) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    return f"data: {data}\n\n".encode()


async def _stream(
    request: web.Request, state: ServerState, chat: ChatRequest, meta: ResponseMeta, prompt: list[int], params: Any
) -> web.StreamResponse:
    generation = _submit(state, prompt, params)
    chunks = _ChunkStream(state, chat, meta, prompt)
    return await stream_events(
        request, generation, meta, [chunks.start()],
        lambda item: chunks.finish(item) if isinstance(item, Completion) else chunks.on_event(item),
    )


async def stream_events(
    request: web.Request, generation: _Generation, meta: ResponseMeta, first: list[dict[str, Any]],
    chunks_of: Callable[[StreamEvent | Completion], list[dict[str, Any]]],
) -> web.StreamResponse:
    """A server-sent event stream: `first`, then the chunks of each engine event and of the
    completion, then `[DONE]`. A client that leaves cancels the generation; an error after the
    headers went out is sent as an error event."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    try:
        await response.prepare(request)
        for chunk in first:
            await response.write(_sse(chunk))
        while True:
            item = await generation.next(request)
            for chunk in chunks_of(item):
                await response.write(_sse(chunk))
            if isinstance(item, Completion):
                break
        await response.write(_sse("[DONE]"))
    except (ClientGone, ConnectionError):
        log.info("client left; cancelled %s", meta.id)
    except Exception as err:  # after the headers went out the error can only be an event
        log.exception("error streaming %s", meta.id)
        body = error_body(f"Internal server error: {type(err).__name__}: {err}", "server_error")
        with contextlib.suppress(ConnectionError):
            await response.write(_sse(body))
            await response.write(_sse("[DONE]"))
    finally:
        generation.cancel()
    return response


def create_app(
    engine: Engine, model_name: str = DEFAULT_MODEL, api_key: str | None = None, weight_sync_token: str | None = None
) -> web.Application:
    """The server as an aiohttp application (it does not own the engine: close it yourself).
    A `weight_sync_token` turns on the weight-sync route (model/weight_sync.py)."""
    app = web.Application(middlewares=[_errors, _auth], client_max_size=MAX_BODY_BYTES)
    app[STATE] = ServerState(engine, model_name, api_key)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", list_models)
    app.router.add_post("/v1/chat/completions", chat_completions)
    if weight_sync_token is not None:
        weight_sync.register(app, engine, weight_sync_token)
    from model.serve_completions import completions  # it builds on this module's pieces

    app.router.add_post("/v1/completions", completions)
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint directory (default: composer-mini)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default=DEFAULT_MODEL, help="the name clients ask for")
    parser.add_argument("--max-batch", type=int, default=8, help="most requests decoded together")
    parser.add_argument(
        "--quantize", choices=["none", "int4"], default="int4",
        help="weights for CPU decoding: int4 (fast, the default) or none (the checkpoint's exact weights)",
    )
    parser.add_argument("--kv-cache-dtype", choices=["bf16", "int8", "fp32"], default=None,
                        help="KV cache precision (default: int8 for int4 weights, fp32 for the checkpoint's)")
    parser.add_argument("--prefix-cache-gb", type=float, default=PREFIX_CACHE_GB,
                        help=f"memory for reused prompt prefixes, GiB (0: off; default {PREFIX_CACHE_GB})")
    parser.add_argument("--prefill-chunk", type=int, default=PREFILL_CHUNK,
                        help=f"most prompt tokens per step while other requests decode (default {PREFILL_CHUNK})")
    parser.add_argument("--no-prefault", action="store_true", default=not prefault.enabled_by_env(),
                        help="fault the KV memory in on first use, not in the background from the start "
                             f"(model/prefault.py; the default when ${prefault.ENV_VAR} is 0)")
    parser.add_argument("--api-key", default=os.environ.get("COMPOSER_API_KEY"),
                        help="require 'Authorization: Bearer KEY' (default: $COMPOSER_API_KEY)")
    parser.add_argument("--enable-weight-sync", action="store_true",
                        help="serve POST /v1/load_weights (loopback --host only; see model/weight_sync.py)")
    parser.add_argument("--weight-sync-token", default=os.environ.get(weight_sync.TOKEN_ENV),
                        help=f"its token (default: ${weight_sync.TOKEN_ENV}, else a random one, printed)")
    args = parser.parse_args(argv)
    if args.max_batch < 1:
        parser.error(f"--max-batch must be at least 1, got {args.max_batch}")
    sync_token = None
    if args.enable_weight_sync:
        try:
            weight_sync.check_loopback(args.host)
        except ValueError as err:
            parser.error(str(err))
        sync_token = args.weight_sync_token or secrets.token_urlsafe(24)
        if not args.weight_sync_token:
            print(f"weight sync: {weight_sync.TOKEN_HEADER}: {sync_token}", file=sys.stderr, flush=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.prefix_cache_gb < 0 or args.prefill_chunk < 1:
        parser.error("--prefix-cache-gb must be >= 0 and --prefill-chunk >= 1")
    engine = Engine.from_pretrained(
        args.model, max_batch=args.max_batch, quantize=args.quantize, kv_cache_dtype=args.kv_cache_dtype,
        prefix_cache_gb=args.prefix_cache_gb, prefill_chunk=args.prefill_chunk, prefault=not args.no_prefault,
    )
    app = create_app(engine, args.served_model_name, api_key=args.api_key, weight_sync_token=sync_token)
    log.info("serving %s on http://%s:%d/v1", args.served_model_name, args.host, args.port)
    try:
        web.run_app(app, host=args.host, port=args.port, handler_cancellation=True, print=None)
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
