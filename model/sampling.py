"""Sampling parameters and the per-request token chooser: greedy or temperature/top-p with a
seeded generator, the sampled token's logprob and the top alternatives, and the optional
tool-call constraint (model/constrained.py) that masks candidates which would break a call.

Logprobs (the "sampling" convention, the one session logs record and the trainer recomputes):
log_softmax(logits / T) over the whole vocabulary, with T = 1 for greedy decoding, after the
repetition penalty and min_tokens' ban on stop tokens, taken before top-k and top-p truncation
and before the tool-call constraint.

Each choice also says whether the constraint forced it: the constraint allowed only that one
token, or it replaced the sampler's own choice (greedy: the best token was not allowed; sampling:
the first draw was rejected). A forced token's probability under the policy is not what chose it,
so training masks it (training/data.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

MAX_TOP_LOGPROBS = 20


@dataclass(kw_only=True)
class SamplingParams:
    max_tokens: int = 256
    """Most tokens to generate; the context limit may end a completion earlier ("length")."""
    temperature: float = 0.0
    """0 is greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling: draw from the smallest set of tokens whose probability reaches top_p."""
    seed: int | None = None
    """Seeds this request's generator, so a sampled completion can be reproduced."""
    stop: list[str] = field(default_factory=list)
    """Strings that end the completion; they are not included in the text."""
    stop_token_ids: list[int] | None = None
    """Token ids that end the completion; None means the tokenizer's end-of-turn tokens."""
    ignore_eos: bool = False
    """Keep generating through end-of-turn tokens (benchmarks)."""
    top_logprobs: int = 0
    """Also return this many most likely alternatives at each position."""
    return_routing: bool = False
    """Record the experts every position was routed to (RL's routing replay)."""
    speculative: bool | None = None
    """Prompt-lookup speculative decoding; None turns it on for greedy decoding."""
    num_speculative_tokens: int = 10
    """Most draft tokens verified per step."""
    constraint: Any = None
    """A per-request ToolCallConstraint; its tool calls come out well-formed."""
    min_tokens: int = 0
    """Generate at least this many tokens: until then stop tokens (end-of-turn included) cannot
    be chosen and stop strings do not end the completion (vLLM's min_tokens)."""
    top_k: int = 0
    """Draw from the k likeliest tokens only (before top_p); 0 is all of them."""
    repetition_penalty: float = 1.0
    """Above 1, tokens already in the prompt or the output are discouraged: a positive logit is
    divided by it, a negative one multiplied (vLLM's and transformers' rule); 1 is off."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {self.max_tokens!r}")
        if not 0.0 <= self.temperature <= 100.0:
            raise ValueError(f"temperature must be in [0, 100], got {self.temperature!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {self.top_logprobs!r}")
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop must be a list of non-empty strings, got {self.stop!r}")
        if self.speculative and self.temperature > 0:
            raise ValueError(
                f"speculative decoding is exact only for greedy decoding; temperature is {self.temperature}"
            )
        if not isinstance(self.min_tokens, int) or not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"min_tokens must be an integer in [0, max_tokens={self.max_tokens}], got {self.min_tokens!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be a non-negative integer (0: all tokens), got {self.top_k!r}")
        if not 0.0 < self.repetition_penalty <= 100.0:
            raise ValueError(f"repetition_penalty must be in (0, 100], got {self.repetition_penalty!r}")
        if not 0 <= self.num_speculative_tokens <= 64:
            raise ValueError(f"num_speculative_tokens must be in [0, 64], got {self.num_speculative_tokens!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def use_speculation(self) -> bool:
        return self.greedy and self.speculative is not False and self.num_speculative_tokens > 0


@dataclass
class Choice:
    token: int
    logprob: float
    top: list[tuple[int, float]]
    forced: bool = False
    """The tool-call constraint chose this token (see the module docstring)."""


class Sampler:
    """Chooses tokens for one request."""

    def __init__(self, params: SamplingParams, prompt_ids: list[int] = ()) -> None:
        self.params = params
        self.generator = torch.Generator()
        self.generator.manual_seed(params.seed if params.seed is not None else torch.seed())
        self._seen = set(prompt_ids) if params.repetition_penalty != 1.0 else set()
        """Tokens of the prompt and the output so far (for the repetition penalty)."""

    def choose(self, logits_V: torch.Tensor, tokens_left: int, banned: frozenset[int] | set[int] = frozenset()) -> Choice:
        """The next token from `logits_V`; `banned` tokens cannot be chosen (min_tokens)."""
        p = self.params
        logprobs_V = torch.log_softmax(self._adjusted(logits_V, banned) / (p.temperature or 1.0), dim=-1)
        constraint = p.constraint
        constrained = constraint is not None and constraint.is_constraining
        # The model's likeliest first: where the constraint is looking, every choice needs them.
        ranked = _best(logprobs_V) if constrained else []
        if p.greedy:
            token, replaced = self._first_allowed(logprobs_V, ranked, tokens_left, constrained)
        else:
            token, replaced = self._sample(logprobs_V, ranked, tokens_left, constrained)
        top: list[tuple[int, float]] = []
        if p.top_logprobs:
            values, ids = logprobs_V.topk(p.top_logprobs)
            top = list(zip(ids.tolist(), values.tolist()))
        if p.repetition_penalty != 1.0:
            self._seen.add(token)
        forced = constrained and (replaced or constraint.only_allowed(token, ranked, tokens_left))
        return Choice(token, float(logprobs_V[token]), top, forced)

    def _adjusted(self, logits_V: torch.Tensor, banned: frozenset[int] | set[int]) -> torch.Tensor:
        """The logits after the repetition penalty, with banned tokens at -inf."""
        logits_V = logits_V.float()
        penalty = self.params.repetition_penalty
        if penalty == 1.0 and not banned:
            return logits_V
        logits_V = logits_V.clone()
        if penalty != 1.0 and self._seen:
            seen = torch.tensor(sorted(self._seen))
            values = logits_V[seen]
            logits_V[seen] = torch.where(values > 0, values / penalty, values * penalty)
        if banned:
            logits_V[torch.tensor(sorted(banned))] = float("-inf")
        return logits_V

    def _first_allowed(self, logprobs_V: torch.Tensor, ranked: list[int], tokens_left: int,
                       constrained: bool) -> tuple[int, bool]:
        best = int(logprobs_V.argmax())
        if not constrained:
            return best, False
        # The model's 64 best, then the constraint's own shortest way forward.
        token = self.params.constraint.first_allowed(ranked, tokens_left)
        return token, token != best

    def _sample(self, logprobs_V: torch.Tensor, ranked: list[int], tokens_left: int,
                constrained: bool) -> tuple[int, bool]:
        """The drawn token, and whether the constraint replaced the first draw."""
        probs_V = logprobs_V.exp()
        if 0 < self.params.top_k < probs_V.numel():
            kth = probs_V.topk(self.params.top_k).values[-1]
            probs_V = torch.where(probs_V >= kth, probs_V, 0.0)  # ties at the k-th all stay
            probs_V = probs_V / probs_V.sum()
        if self.params.top_p < 1.0:
            sorted_p, order = probs_V.sort(descending=True)
            keep = sorted_p.cumsum(0) - sorted_p < self.params.top_p  # always keeps the top token
            probs_V = torch.zeros_like(probs_V).scatter_(0, order[keep], sorted_p[keep])
        constraint = self.params.constraint
        for attempt in range(32):
            token = int(torch.multinomial(probs_V, 1, generator=self.generator))
            if not constrained or constraint.is_allowed(token, tokens_left):
                return token, attempt > 0
            probs_V[token] = 0.0
            if float(probs_V.sum()) <= 0.0:
                break
        # The model keeps proposing tokens the constraint forbids: take its best allowed one.
        return constraint.first_allowed(ranked, tokens_left), True


def _best(logprobs_V: torch.Tensor) -> list[int]:
    """The model's 64 likeliest tokens, best first."""
    return logprobs_V.topk(min(64, logprobs_V.numel())).indices.tolist()
