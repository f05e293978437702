"""The likeliest edit that changes something, searched for when greedy decoding wrote one that
changes nothing.

Asked to fix a line, a small model often copies it into `new_string` unchanged: 186 of the 386
held-out edits of the RL-tuned composer-mini (docs/benchmarks.md). edit_file refuses such a call
and the turn is spent. Teacher-forced on the gold edits of held-out tasks, the same model's first
departure from the copy is the gold fix's token, ranked second to fifth at that position, in 15
of 16: the fix is the model's runner-up, not its choice. So after a greedy reply with a call
whose value is unchanged (`unchanged(call)`), this searches for the likeliest reply that changes
it:

1. candidates: the reply up to a position inside that value (from the token holding its first
   character through the one holding its closing quote), then one of the model's alternatives
   there (the sampler's `top_logprobs`, taken before the tool-call constraint; those the
   constraint refuses are skipped), ranked by the reply's logprob from the value's first token
   through the alternative;
2. the best `width` candidates are each continued greedily under the constraint, in one batch
   (their prompts extend the request's, so the prefix cache serves its blocks);
3. the winner has the highest logprob from the value's first token to the end of the call,
   among those whose call (the same one, by position) is no longer unchanged. None: the reply
   stands.

The alternative is marked forced: the search, not the sampler, chose it, so training masks it
(model/sampling.py). Greedy replies only (the caller's rule): a sampled reply is the policy's
own draw, and RL learns from it as drawn.

    result = engine.generate([prompt], SamplingParams(..., top_logprobs=ALTERNATIVES))[0]
    found = changed_reply(engine, prompt, result, params, new_constraint, tools, "new_string", unchanged)
    if found is not None:
        result, searched = found   # searched: where and among how many, for the session log
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from model.sampling import SamplingParams
from model.sequence import Completion
from model.toolcalls import CLOSE_TAG, OPEN_TAG, ToolCall, parse_tool_calls

ALTERNATIVES = 8
"""The alternatives asked of the sampler at every position (its `top_logprobs`)."""
WIDTH = 8
"""Candidates continued."""


def changed_reply(engine, prompt: list[int], result: Completion, params: SamplingParams,
                  new_constraint: Callable[[], Any], tools: list[dict], key: str,
                  unchanged: Callable[[ToolCall], bool], width: int = WIDTH) -> tuple[Completion, dict] | None:
    """The best reply that changes the first unchanged call's `key` value, and what the search
    did; None when no call is unchanged or no candidate changes it. `result` must carry
    `top_logprobs`; `new_constraint()` builds the request's constraint afresh."""
    tokenizer = engine.tokenizer
    calls = parse_tool_calls(result.text, tools).tool_calls
    index = next((i for i, call in enumerate(calls) if unchanged(call)), None)
    if index is None or not result.top_logprobs:
        return None
    value = _value_span(result.text, index, key)
    if value is None:
        return None
    ids = result.token_ids
    offsets = _offsets(tokenizer, ids)
    first = max(k for k in range(len(ids)) if offsets[k] <= value[0])
    last = max(k for k in range(len(ids)) if offsets[k] <= value[1])
    candidates = _candidates(ids, result, params.max_tokens, new_constraint, first, last)
    candidates = sorted(candidates, key=lambda c: -c[2])[:width]
    if not candidates:
        return None
    prompts, samplers = [], []
    for k, alt, _ in candidates:
        constraint = new_constraint()
        for token in [*ids[:k], alt]:
            constraint.advance(token)
        prompts.append([*prompt, *ids[:k], alt])
        samplers.append(dataclasses.replace(params, max_tokens=params.max_tokens - k - 1, top_logprobs=0,
                                            constraint=constraint, seed=params.seed))
    continued = engine.generate(prompts, samplers)
    best: tuple[float, Completion] | None = None
    for (k, alt, prior), more in zip(candidates, continued, strict=True):
        merged = _merged(tokenizer, prompt, result, k, alt, more)
        call = _call(merged.text, tools, index)
        if call is None or unchanged(call):
            continue
        score = prior + sum(more.logprobs[: _through_call(tokenizer, merged.token_ids, k + 1, index)])
        if best is None or score > best[0]:
            best = (score, merged)
    if best is None:
        return None
    score, merged = best
    k = next(i for i, (a, b) in enumerate(zip(ids, merged.token_ids)) if a != b)
    return merged, {"position": k, "candidates": len(candidates), "logprob": round(score, 4),
                    "unchanged_logprob": round(sum(result.logprobs[first: _through_call(tokenizer, ids, 0, index)]), 4)}


def _value_span(text: str, index: int, key: str) -> tuple[int, int] | None:
    """Where call `index`'s `key` value starts (its first character) and closes (its closing
    quote) in `text`; None when the call does not have it as a string."""
    start = -1
    for _ in range(index + 1):
        start = text.find(OPEN_TAG, start + 1)
        if start < 0:
            return None
    end = text.find(CLOSE_TAG, start)
    end = len(text) if end < 0 else end
    found = re.compile(rf'"{re.escape(key)}"\s*:\s*"').search(text, start, end)
    if found is None:
        return None
    at = found.end()
    while at < end:
        if text[at] == "\\":
            at += 2
        elif text[at] == '"' and re.match(r"\s*[,}]", text[at + 1:end]):
            return found.end(), at
        else:
            at += 1
    return None


def _offsets(tokenizer, ids: list[int]) -> list[int]:
    """The character where each token's text starts."""
    return [len(tokenizer.decode(ids[:k])) for k in range(len(ids))]


def _candidates(ids: list[int], result: Completion, max_tokens: int, new_constraint: Callable[[], Any],
                first: int, last: int) -> list[tuple[int, int, float]]:
    """(position, alternative token, logprob of the reply from `first` through it) for every
    alternative at positions `first`..`last` that the constraint allows there."""
    constraint = new_constraint()
    out = []
    for k, token in enumerate(ids[: last + 1]):
        if k >= first and max_tokens - k > 1:
            before = sum(result.logprobs[first:k])
            out += [(k, alt, before + lp) for alt, lp in result.top_logprobs[k]
                    if alt != token and constraint.is_allowed(alt, max_tokens - k)]
        constraint.advance(token)
    return out


def _merged(tokenizer, prompt: list[int], result: Completion, k: int, alt: int, more: Completion) -> Completion:
    """The reply's first `k` tokens, the alternative (forced), then the continuation."""
    ids = [*result.token_ids[:k], alt, *more.token_ids]
    stops = set(tokenizer.stop_token_ids)
    text = tokenizer.decode(ids[:-1] if ids[-1] in stops else ids)
    lp_alt = dict(result.top_logprobs[k])[alt]
    return dataclasses.replace(
        more, prompt_ids=list(prompt), token_ids=ids, text=text, logprobs=[*result.logprobs[:k], lp_alt, *more.logprobs],
        top_logprobs=[], forced=[*result.forced[:k], True, *more.forced],
        prefill_seconds=result.prefill_seconds, decode_seconds=result.decode_seconds + more.prefill_seconds + more.decode_seconds)


def _call(text: str, tools: list[dict], index: int) -> ToolCall | None:
    calls = parse_tool_calls(text, tools).tool_calls
    return calls[index] if index < len(calls) else None


def _through_call(tokenizer, ids: list[int], start: int, index: int) -> int:
    """How many tokens from `start` on it takes for call `index`'s closing tag to be written."""
    for n in range(len(ids) - start + 1):
        if tokenizer.decode(ids[: start + n]).count(CLOSE_TAG) > index:
            return n
    return len(ids) - start
