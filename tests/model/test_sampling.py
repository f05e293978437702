"""The sampler's per-token facts: the logprob convention (log_softmax(logits / T), before top-p
and the constraint) and the forced-token mask (the constraint allowed one token, or replaced the
sampler's choice)."""

from __future__ import annotations

import pytest
import torch

from model.sampling import Sampler, SamplingParams


class Allow:
    """A constraint allowing a fixed set of tokens."""

    is_constraining = True

    def __init__(self, allowed: set[int]) -> None:
        self.allowed = allowed

    def is_allowed(self, token: int, tokens_left: int | None = None) -> bool:
        return token in self.allowed

    def first_allowed(self, candidates, tokens_left=None) -> int:
        return next((c for c in candidates if c in self.allowed), min(self.allowed))

    def only_allowed(self, token: int, preferred, tokens_left=None) -> bool:
        return self.allowed == {token}


LOGITS = torch.tensor([0.5, 3.0, 1.0, 2.0, -1.0])


def choose(allowed: set[int] | None, temperature: float = 0.0, top_p: float = 1.0, seed: int = 0):
    constraint = Allow(allowed) if allowed is not None else None
    params = SamplingParams(temperature=temperature, top_p=top_p, seed=seed, constraint=constraint)
    return Sampler(params).choose(LOGITS, tokens_left=10)


@pytest.mark.parametrize(("allowed", "token", "forced"), [
    (None, 1, False),            # no constraint
    ({1, 3}, 1, False),          # the model's own best is allowed, and so is another
    ({2, 3}, 3, True),           # the best is not allowed: the sampler's choice was replaced
    ({1}, 1, True),              # only one token is allowed: forced even though the model chose it
])
def test_greedy_choices_say_whether_the_constraint_forced_them(allowed, token, forced):
    choice = choose(allowed)
    assert (choice.token, choice.forced) == (token, forced)
    assert choice.logprob == pytest.approx(float(torch.log_softmax(LOGITS, -1)[token]))


def test_sampled_choices_report_the_unconstrained_temperature_scaled_logprob():
    for seed in range(20):
        free = choose(None, temperature=0.7, top_p=0.5, seed=seed)
        assert not free.forced
        assert free.logprob == pytest.approx(float(torch.log_softmax(LOGITS / 0.7, -1)[free.token]))
        single = choose({4}, temperature=0.7, seed=seed)
        assert (single.token, single.forced) == (4, True)
        # Tokens 2 and 3 have probability e^-20 each: the first draw (0 or 1) is always replaced.
        logits = torch.tensor([10.0, 10.0, -10.0, -10.0])
        params = SamplingParams(temperature=1.0, seed=seed, constraint=Allow({2, 3}))
        two = Sampler(params).choose(logits, tokens_left=10)
        assert two.token in (2, 3) and two.forced
        assert two.logprob == pytest.approx(float(torch.log_softmax(logits, -1)[two.token]))
