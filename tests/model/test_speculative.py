"""Prompt-lookup drafting (model/speculative.py): the incremental lookup proposes what a scan of
the whole context proposes, at every step of a growing sequence.

Run: .venv/bin/python -m pytest tests/model/test_speculative.py
"""

from __future__ import annotations

import random

import pytest

from model.speculative import MAX_NGRAM, MIN_NGRAM, PromptLookup


def scanned(tokens: list[int], max_tokens: int) -> list[int]:
    """The definition: for n from MAX_NGRAM down, the latest earlier window equal to the last n
    tokens (not the last n themselves), and what followed it."""
    for n in range(min(MAX_NGRAM, len(tokens) - 1), MIN_NGRAM - 1, -1):
        starts = [s for s in range(len(tokens) - n) if tokens[s : s + n] == tokens[-n:]]
        if starts:
            return tokens[starts[-1] + n : starts[-1] + n + max_tokens]
    return []


@pytest.mark.parametrize("seed", range(4))
def test_incremental_lookup_equals_the_scan_at_every_step(seed):
    rng = random.Random(seed)
    tokens = [rng.randrange(6) for _ in range(rng.randrange(0, 40))]  # a small vocabulary: many repeats
    lookup = PromptLookup(tokens)
    hits = 0
    for _ in range(300):
        budget = rng.randrange(0, 9)
        draft = lookup.propose(budget)
        assert draft == scanned(tokens, budget)
        hits += bool(draft)
        # Accepted tokens join the list: some of the draft, then the model's own, 1-5 a step.
        tokens += draft[: rng.randrange(0, len(draft) + 1)] + [rng.randrange(6) for _ in range(rng.randrange(1, 5))]
    assert hits > 100  # the property is not vacuous


def test_no_draft_without_a_long_enough_match():
    assert PromptLookup([1, 2, 3, 9, 1, 2]).propose(4) == []  # a 2-token match is not enough
    assert PromptLookup([1, 2, 3, 9, 8, 1, 2, 3]).propose(4) == [9, 8, 1, 2]
    assert PromptLookup([1, 2, 3, 9, 1, 2, 3]).propose(0) == []
