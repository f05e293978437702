"""`/v1/completions` for model.serve: the token-in, token-out path a rollout drives a remote
engine through (request and response fields: model/completions_protocol.py).

    curl localhost:8000/v1/completions -H 'content-type: application/json' \\
        -d '{"model": "composer-mini", "prompt": [1, 9690, 198], "max_tokens": 8,
             "logprobs": 0, "return_token_ids": true}'

The prompt (ids, or a string the tokenizer encodes as it is, no chat template) goes to the engine
unchanged; the answer carries the sampled ids, their logprobs, the forced-token mask and, when
asked, the routed experts, so the caller logs exactly what the engine saw and did. Streaming,
client disconnects and errors behave as in `/v1/chat/completions` (model/serve.py).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from model.completions_protocol import (
    LOGPROB_CONVENTION,
    CompletionRequest,
    completion_choice,
    completion_logprobs,
    completion_object,
    new_meta,
    parse_completion_request,
)
from model.engine import ContextLengthError
from model.openai_protocol import ProtocolError, ResponseMeta, finish_reason, usage
from model.sequence import Completion, StreamEvent
from model.serve import (
    STATE,
    ClientGone,
    ServerState,
    _constraint,
    _experts,
    _Generation,
    _json_response,
    _read_body,
    check_model,
    log,
    stream_events,
)


def _prompt_ids(state: ServerState, req: CompletionRequest) -> list[int]:
    engine = state.engine
    ids = req.prompt_ids if req.prompt_ids is not None else engine.tokenizer.encode(req.prompt_text or "")
    vocab = engine.config.vocab_size
    bad = next((i for i in ids if i >= vocab), None)
    if bad is not None:
        raise ProtocolError(f"Invalid 'prompt': token id {bad} is outside the vocabulary [0, {vocab}).", "prompt")
    if len(ids) >= engine.max_seq_len:
        raise ProtocolError(
            f"This model's maximum context length is {engine.max_seq_len} tokens, but the prompt has "
            f"{len(ids)} tokens, which leaves no room for a completion. Shorten 'prompt'.",
            "prompt", code="context_length_exceeded",
        )
    return ids


async def completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    req = parse_completion_request(await _read_body(request))
    check_model(state, req.model)
    prompt = _prompt_ids(state, req)
    try:
        params = req.sampling_params(min(req.max_tokens, state.engine.max_seq_len - len(prompt)), _constraint(state, req))
    except ValueError as err:
        raise ProtocolError(f"Invalid sampling parameters: {err}") from None
    try:
        generation = _Generation(state.engine, prompt, params)
    except ContextLengthError as err:
        raise ProtocolError(str(err), "prompt", code="context_length_exceeded") from None
    meta = new_meta(state.model_name)
    chunks = _Chunks(state, req, meta, prompt)
    state.in_flight += 1
    try:
        if req.stream:
            return await _stream(request, generation, chunks)
        return await _complete(request, generation, chunks)
    finally:
        state.in_flight -= 1
        generation.cancel()


class _Chunks:
    """Engine events -> `text_completion` objects; token data rides with the text it made."""

    def __init__(self, state: ServerState, req: CompletionRequest, meta: ResponseMeta, prompt: list[int]) -> None:
        self.state, self.req, self.meta, self.prompt = state, req, meta, prompt
        self.offset = 0
        self.sent_prompt = False

    def piece(self, text: str, ids: list[int], logprobs: list[float], top: list, forced: list[bool],
              **extra: Any) -> dict[str, Any]:
        req = self.req
        fields: dict[str, Any] = {}
        if req.logprobs is not None:
            fields["logprobs"] = completion_logprobs(self.state.token_text, ids, logprobs, top, self.offset)
        if req.return_token_ids:
            fields |= {"token_ids": ids, "forced": [int(f) for f in forced]}
            if not self.sent_prompt:
                fields["prompt_token_ids"] = self.prompt
                self.sent_prompt = True
        self.offset += len(text)
        return completion_choice(text, **fields, **extra)

    def final(self, done: Completion) -> dict[str, Any]:
        return {
            "finish_reason": finish_reason(done.finish_reason, False), "stop_reason": done.stop_reason,
            "routed_experts": _experts(done) if self.req.return_routed_experts else None,
        }

    def tail(self, done: Completion) -> dict[str, Any]:
        version = getattr(done, "weight_version", getattr(self.state.engine, "weight_version", 0))
        return {"weight_version": version, "logprob_convention": LOGPROB_CONVENTION}


async def _complete(request: web.Request, generation: _Generation, chunks: _Chunks) -> web.StreamResponse:
    try:
        while not isinstance(done := await generation.next(request), Completion):
            pass
    except ClientGone:
        log.info("client left; cancelled %s", chunks.meta.id)
        return web.Response(status=499)
    choice = chunks.piece(done.text, done.token_ids, done.logprobs, done.top_logprobs, done.forced, **chunks.final(done))
    totals = usage(len(done.prompt_ids), len(done.token_ids), done.cached_tokens)
    return _json_response(completion_object(chunks.meta, [choice], usage=totals, **chunks.tail(done)))


async def _stream(request: web.Request, generation: _Generation, chunks: _Chunks) -> web.StreamResponse:
    meta = chunks.meta

    def chunks_of(item: StreamEvent | Completion) -> list[dict[str, Any]]:
        if not isinstance(item, Completion):
            piece = chunks.piece(item.text, item.token_ids, item.logprobs, item.top_logprobs, item.forced)
            return [completion_object(meta, [piece])]
        out = [completion_object(meta, [completion_choice("", **chunks.final(item))], **chunks.tail(item))]
        if chunks.req.include_usage:
            out.append(completion_object(meta, [], usage=usage(len(item.prompt_ids), len(item.token_ids), item.cached_tokens)))
        return out

    return await stream_events(request, generation, meta, [], chunks_of)
