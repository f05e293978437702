"""One request's decoding state inside the engine: the tokens chosen so far, their logprobs and
routed experts, streaming text with stop sequences held back until decided, and the finished
`Completion` handed back to the caller.

Speculative drafts are accepted here: `accept(logits_SV, drafts)` chooses a token at each fed
position in turn and stops at the first one that differs from the draft, so the tokens equal
those plain decoding would choose.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from model.sampling import Sampler, SamplingParams
from model.speculative import PromptLookup


@dataclass
class StreamEvent:
    """The tokens a decoding step added to one request."""

    token_ids: list[int]
    text: str
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    finished: bool = False
    finish_reason: str | None = None
    """"stop" (end-of-turn token or stop string), "length", "cancelled", or "abort" (a weight load
    ended it: Engine.load_weights)."""
    forced: list[bool] = field(default_factory=list)
    """Per token: the tool-call constraint forced it (model/sampling.py)."""


@dataclass
class Completion:
    prompt_ids: list[int]
    token_ids: list[int]
    """Every generated token, the end-of-turn token included (text excludes it)."""
    text: str
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    finish_reason: str
    routed_experts: torch.Tensor | None
    """(positions, L, k) experts per fed position: the prompt, then each generated token but the
    last (which was never fed back). None unless asked for."""
    prefill_seconds: float
    """From admission (a cache row free) to the first token."""
    decode_seconds: float
    num_draft_tokens: int = 0
    num_accepted_draft_tokens: int = 0
    stop_reason: str | int | None = None
    """The stop string or token id that ended the completion, if one did."""
    cached_tokens: int = 0
    """Prompt tokens served from the prefix cache instead of computed."""
    weight_version: int = 0
    """The engine's weight version the whole completion ran on (Engine.load_weights)."""
    forced: list[bool] = field(default_factory=list)
    """Per generated token: the tool-call constraint forced it (model/sampling.py)."""


class Sequence:
    def __init__(self, prompt_ids: list[int], params: SamplingParams, stop_ids: list[int], tokenizer, max_seq_len: int) -> None:
        self.prompt_ids = prompt_ids
        self.params = params
        self.stop_ids = frozenset(stop_ids)
        self.sampler = Sampler(params, prompt_ids)
        self.detok = tokenizer.incremental_decoder()
        self.max_seq_len = max_seq_len
        self.all_ids: list[int] = list(prompt_ids)
        self.out_ids: list[int] = []
        self.logprobs: list[float] = []
        self.forced: list[bool] = []
        self.top: list[list[tuple[int, float]]] = []
        self.routing: list[torch.Tensor] = []
        """Routed experts of the decoded positions (when asked for)."""
        self.prompt_experts: list[torch.Tensor] = []
        """Routed experts of the prompt positions computed or copied so far (always kept: the
        prefix cache stores them)."""
        self.row: int | None = None
        """The KV cache row, from admission to the end."""
        self.cached_tokens = 0
        self.admitted = 0.0
        self.text = ""
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None
        self.length = 0
        """Positions of this sequence already in the KV cache."""
        self.prefill_seconds = 0.0
        self.started = time.perf_counter()
        self.num_drafted = self.num_accepted = 0
        # Adaptive drafting: a draft costs a wider forward pass (more experts touched), so after
        # a rejected draft the sequence pauses drafting, backing off exponentially.
        self.draft_limit = params.num_speculative_tokens
        self.draft_pause = 0
        self._draft_backoff = 1
        self.lookup = PromptLookup(self.all_ids)
        """Prompt-lookup drafts over `all_ids` (it indexes nothing until the first is asked for)."""
        self._emitted_tokens = 0
        self._emitted_chars = 0

    @property
    def last_token(self) -> int:
        return self.all_ids[-1]

    @property
    def prefilled(self) -> bool:
        """Whether the prompt is in the cache and the first token chosen."""
        return bool(self.out_ids)

    @property
    def tokens_left(self) -> int:
        return min(self.params.max_tokens - len(self.out_ids), self.max_seq_len - len(self.all_ids))

    def record_routing(self, experts_SLk: torch.Tensor) -> None:
        self.routing.append(experts_SLk.to(torch.int16).cpu())

    def accept(self, logits_SV: torch.Tensor, drafts: list[int]) -> int:
        """Chooses tokens at the fed positions until one departs from the draft; returns how many
        fed positions were valid (each choice used one)."""
        self.num_drafted += len(drafts)
        for i in range(len(drafts) + 1):
            early = len(self.out_ids) < self.params.min_tokens  # stop tokens wait for min_tokens
            choice = self.sampler.choose(logits_SV[i], self.tokens_left, self.stop_ids if early else frozenset())
            self._append(choice.token, choice.logprob, choice.top, choice.forced)
            if self.finish_reason is not None or i == len(drafts) or choice.token != drafts[i]:
                break
            self.num_accepted += 1
        if drafts:
            self._adapt_drafting(accepted=i, drafted=len(drafts))
        return i + 1

    def _adapt_drafting(self, accepted: int, drafted: int) -> None:
        most = self.params.num_speculative_tokens
        if accepted == 0:
            self.draft_pause = self._draft_backoff
            self._draft_backoff = min(2 * self._draft_backoff, 32)
        else:
            self._draft_backoff = 1
        self.draft_limit = min(most, 2 * self.draft_limit) if accepted == drafted else max(2, accepted + 1)

    def _append(self, token: int, logprob: float, top: list[tuple[int, float]], forced: bool = False) -> None:
        self.all_ids.append(token)
        self.out_ids.append(token)
        self.logprobs.append(logprob)
        self.forced.append(forced)
        if self.params.top_logprobs:
            self.top.append(top)
        if self.params.constraint is not None:
            self.params.constraint.advance(token)
        if token in self.stop_ids:
            self.finish("stop", stop_reason=token)
            return
        self.text += self.detok.feed(token)
        if self.params.stop and len(self.out_ids) >= self.params.min_tokens and self._cut_at_stop_string():
            return
        if self.tokens_left <= 0:
            self.finish("length")

    def _cut_at_stop_string(self) -> bool:
        longest = max(map(len, self.params.stop))
        window_start = max(0, self._emitted_chars - longest)
        hits = [(i, s) for s in self.params.stop if (i := self.text.find(s, window_start)) >= 0]
        if not hits:
            return False
        index, stop = min(hits)
        self.text = self.text[:index]
        self.finish("stop", stop_reason=stop)
        return True

    def finish(self, reason: str, stop_reason: str | int | None = None) -> Sequence:
        if self.finish_reason is None:
            self.finish_reason, self.stop_reason = reason, stop_reason
            if reason != "stop" or isinstance(stop_reason, int):
                self.text += self.detok.flush()
        return self

    def _held_back(self) -> int:
        """Characters at the end of the text that may still turn into a stop string."""
        if not self.params.stop or self.finish_reason is not None:
            return 0
        for n in range(min(len(self.text), max(map(len, self.params.stop)) - 1), 0, -1):
            tail = self.text[-n:]
            if any(s.startswith(tail) for s in self.params.stop):
                return n
        return 0

    def take_event(self) -> StreamEvent | None:
        """What was added since the last event, or None when nothing was."""
        visible = len(self.text) - self._held_back()
        new_tokens = self.out_ids[self._emitted_tokens :]
        if not new_tokens and self.finish_reason is None:
            return None
        text = self.text[self._emitted_chars : max(visible, self._emitted_chars)]
        event = StreamEvent(
            token_ids=new_tokens,
            text=text,
            logprobs=self.logprobs[self._emitted_tokens :],
            top_logprobs=self.top[self._emitted_tokens :],
            finished=self.finish_reason is not None,
            finish_reason=self.finish_reason,
            forced=self.forced[self._emitted_tokens :],
        )
        self._emitted_tokens = len(self.out_ids)
        self._emitted_chars += len(text)
        return event

    def completion(self) -> Completion:
        routing = None
        if self.params.return_routing and self.prompt_experts:
            routing = torch.cat([e.to(torch.int16) for e in (*self.prompt_experts, *self.routing)])
        return Completion(
            prompt_ids=self.prompt_ids,
            token_ids=self.out_ids,
            text=self.text,
            logprobs=self.logprobs,
            top_logprobs=self.top,
            finish_reason=self.finish_reason or "cancelled",
            routed_experts=routing,
            prefill_seconds=self.prefill_seconds,
            decode_seconds=time.perf_counter() - self.started - self.prefill_seconds,
            num_draft_tokens=self.num_drafted,
            num_accepted_draft_tokens=self.num_accepted,
            stop_reason=self.stop_reason,
            cached_tokens=self.cached_tokens,
            forced=self.forced,
        )
