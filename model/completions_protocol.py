"""The text-completions protocol (`/v1/completions`) as vLLM serves it: token ids in, token ids
out. This is how a rollout drives a remote engine token-natively: it sends the exact prompt ids
(the previous prompt, the completion as sampled, the new messages' ids) and gets back the
sampled ids with their logprobs, so nothing is rendered or tokenized twice.

    request = parse_completion_request(body)     # ProtocolError names the bad field
    body = completion_body(meta, text=..., ...)  # the server's answer; chunks for a stream
    delta = parse_completion_chunk(chunk)        # the client's reading of either
    acc = CompletionAccumulator(); acc.add(delta); result = acc.result()

Request: `model`, `prompt` (a list of ids, one such list in a list, or a string), `max_tokens`
(default 16, as OpenAI), `temperature`, `top_p`, `seed`, `stop`, `stream`, `stream_options`,
`logprobs` (an integer: that many alternatives per token; 0 gives the sampled token's own), `n`
(1 only), `echo` (false only). Vendor fields: `return_token_ids` (vLLM's: each choice carries
`prompt_token_ids` (in a stream, the first chunk) and `token_ids`, and ours also `forced`, the
per-token mask of tokens the tool-call constraint forced), `return_routed_experts`, `speculative`,
and `tools` with `tool_choice` and `constrained_tool_calls` (default true with tools): the
completion's `<tool_call>` blocks are decoded under model/constrained.py's constraint. The text
stays raw (a completion has no `tool_calls`); the client parses the blocks. The last chunk (and a
plain answer) carries `weight_version`, the weights the request finished on, and
`logprob_convention: "sampling"`: logprobs are log_softmax(logits / T) before top-p and the
constraint (model/sampling.py).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from model.openai_protocol import (
    _KNOWN_FIELDS,
    MAX_TOP_LOGPROBS,
    GenerationRequest,
    ProtocolError,
    ResponseMeta,
    TokenText,
    _check_fields,
    _int,
    _invalid,
    _show,
    generation_fields,
)
from model.sampling import SamplingParams

LOGPROB_CONVENTION = "sampling"
"""What our logprobs are: log_softmax(logits / T), T = 1 when greedy, before top-p and the
tool-call constraint. Servers that do not say so may report something else (vLLM's default is
the raw logprobs, before temperature)."""

_FIELDS = frozenset({"prompt", "max_tokens", "echo", "suffix", "best_of"} | (_KNOWN_FIELDS - {
    "messages", "max_completion_tokens", "top_logprobs", "parallel_tool_calls"}))


@dataclass(kw_only=True)
class CompletionRequest(GenerationRequest):
    prompt_ids: list[int] | None = None
    prompt_text: str | None = None
    max_tokens: int = 16
    logprobs: int | None = None

    def sampling_params(self, max_tokens: int, constraint: Any = None) -> SamplingParams:
        return self.sampler(max_tokens, constraint, list(self.stop), self.logprobs or 0)


def _prompt(value: Any) -> tuple[list[int] | None, str | None]:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], list | str):
        value = value[0]  # one prompt in a batch of one (the openai client's prompt=[ids])
    if isinstance(value, str) and value:
        return None, value
    if (isinstance(value, list) and value
            and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)):
        return list(value), None
    raise _invalid("prompt", "a non-empty string or list of token ids (one prompt: n=1)", value)


def parse_completion_request(body: Any) -> CompletionRequest:
    """Validates a `/v1/completions` body; raises ProtocolError naming the bad field."""
    if not isinstance(body, dict):
        raise ProtocolError(f"The request body must be a JSON object, got {_show(body)}.")
    _check_fields(body, _FIELDS)
    for key, neutral in (("echo", False), ("suffix", None), ("best_of", 1)):
        if body.get(key) not in (None, neutral):
            raise ProtocolError(f"Invalid '{key}': not supported by this server (only {_show(neutral)}).", key)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _invalid("model", "a model name", model)
    ids, text = _prompt(body.get("prompt"))
    logprobs = body.get("logprobs")
    if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                 or not 0 <= logprobs <= MAX_TOP_LOGPROBS):
        raise _invalid("logprobs", f"null or an integer in [0, {MAX_TOP_LOGPROBS}]", logprobs)
    max_tokens = _int(body, "max_tokens", 1, 2**31 - 1)
    return CompletionRequest(model=model, prompt_ids=ids, prompt_text=text, logprobs=logprobs,
                             max_tokens=16 if max_tokens is None else max_tokens, **generation_fields(body))


# ---- responses ----------------------------------------------------------------------------------


def new_meta(model: str) -> ResponseMeta:
    return ResponseMeta(model=model, id="cmpl-" + uuid.uuid4().hex)


def completion_logprobs(token_text: TokenText, token_ids: list[int], logprobs: list[float],
                        top: list[list[tuple[int, float]]], offset: int = 0) -> dict[str, Any]:
    """The legacy `logprobs` object: tokens, token_logprobs, top_logprobs, text_offset."""
    entries = [token_text.entry(t, lp) for t, lp in zip(token_ids, logprobs)]
    offsets, alternatives = [], []
    for i, entry in enumerate(entries):
        offsets.append(offset)
        offset += len(entry["token"])
        alts = [token_text.entry(t, lp) for t, lp in (top[i] if i < len(top) else [])]
        alternatives.append({a["token"]: a["logprob"] for a in alts} if alts else None)
    return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": alternatives, "text_offset": offsets}


def completion_choice(text: str, *, finish_reason: str | None = None, logprobs: dict | None = None,
                      **extra: Any) -> dict[str, Any]:
    return {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason,
            **{k: v for k, v in extra.items() if v is not None}}


def completion_object(meta: ResponseMeta, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A `text_completion` object: a plain answer, or one chunk of a stream."""
    return {"id": meta.id, "object": "text_completion", "created": meta.created, "model": meta.model,
            "system_fingerprint": None, "choices": choices, **{k: v for k, v in extra.items() if v is not None}}


# ---- the client's side --------------------------------------------------------------------------


@dataclass
class CompletionDelta:
    """What one chunk (or a whole plain answer) carried."""

    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    forced: list[int] | None = None
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None
    routed_experts: Any = None
    usage: dict[str, int] | None = None
    weight_version: Any = None
    logprob_convention: str | None = None


def parse_completion_chunk(obj: dict[str, Any]) -> CompletionDelta:
    delta = CompletionDelta(usage=obj.get("usage"), weight_version=obj.get("weight_version"),
                            logprob_convention=obj.get("logprob_convention"))
    choices = obj.get("choices") or []
    if not choices:
        return delta
    choice = choices[0]
    delta.text = choice.get("text") or ""
    delta.token_ids = list(choice.get("token_ids") or [])
    delta.forced = choice.get("forced")
    delta.finish_reason = choice.get("finish_reason")
    delta.prompt_token_ids = choice.get("prompt_token_ids") or obj.get("prompt_token_ids")
    delta.routed_experts = choice.get("routed_experts")
    logprobs = choice.get("logprobs") or {}
    delta.logprobs = list(logprobs.get("token_logprobs") or [])
    return delta


@dataclass
class CompletionResult:
    text: str
    token_ids: list[int]
    logprobs: list[float | None] | None
    forced: list[int] | None
    finish_reason: str | None
    prompt_token_ids: list[int] | None
    routed_experts: Any
    usage: dict[str, int] | None
    weight_version: Any
    logprob_convention: str | None


class CompletionAccumulator:
    """Folds a stream's CompletionDeltas into one result."""

    def __init__(self) -> None:
        self.parts: list[CompletionDelta] = []

    def add(self, delta: CompletionDelta) -> None:
        self.parts.append(delta)

    def result(self) -> CompletionResult:
        parts = self.parts

        def last(name: str) -> Any:
            return next((getattr(p, name) for p in reversed(parts) if getattr(p, name) is not None), None)

        ids = [t for p in parts for t in p.token_ids]
        logprobs = [lp for p in parts for lp in p.logprobs]
        forced = [f for p in parts for f in (p.forced or [])]
        return CompletionResult(
            text="".join(p.text for p in parts), token_ids=ids,
            logprobs=logprobs if len(logprobs) == len(ids) and ids else None,
            forced=forced if len(forced) == len(ids) and any(p.forced is not None for p in parts) else None,
            finish_reason=last("finish_reason"), prompt_token_ids=last("prompt_token_ids"),
            routed_experts=last("routed_experts"), usage=last("usage"), weight_version=last("weight_version"),
            logprob_convention=last("logprob_convention"),
        )
