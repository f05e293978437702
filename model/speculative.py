"""Prompt-lookup (n-gram) drafting for speculative decoding.

A coding agent re-emits text it has just read: a file it rewrites, a line it edits, an
identifier it quotes. The draft is what followed the most recent earlier occurrence of the last
n tokens (longest n first). The engine verifies every draft token in one forward pass and keeps
the prefix that greedy decoding would have produced, so the output equals plain decoding.

    lookup = PromptLookup(seq.all_ids)     # the sequence's tokens, a list that only grows
    lookup.propose(max_tokens=10)          # -> list[int], after each accepted step

The lookup keeps every n-gram's latest start in a dict, extended by the tokens appended since
the last call, so a proposal costs O(new tokens) rather than a scan of the whole context (a
7.4k-token agent prompt: ~0.5 ms a decoded token, scanned).
"""

from __future__ import annotations

MAX_NGRAM = 4
MIN_NGRAM = 3
"""A shorter match is weak evidence: on the agent turn (bench/speculation.py) drafts after 2-token
matches were mostly rejected at their first token, and each costs a wider step (decode 1.10x
faster than without speculation with 2, 1.17-1.18x with 3)."""


class PromptLookup:
    """Drafts for one growing token list: what followed the latest earlier occurrence of its last
    n tokens, n from MAX_NGRAM down to MIN_NGRAM (the last n tokens themselves excluded)."""

    def __init__(self, tokens: list[int], max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM) -> None:
        self.tokens, self.max_ngram, self.min_ngram = tokens, max_ngram, min_ngram
        self._latest: dict[tuple[int, ...], int] = {}
        """n-gram -> the start of its latest occurrence among those that end before the last token."""
        self._indexed_to = 0
        """Occurrences ending before this index are in `_latest`."""

    def propose(self, max_tokens: int) -> list[int]:
        """Up to `max_tokens` draft tokens continuing the list."""
        tokens, n_tokens = self.tokens, len(self.tokens)
        if max_tokens <= 0:
            return []
        for end in range(self._indexed_to, n_tokens - 1):  # occurrences ending at `end`, in order
            for n in range(self.min_ngram, self.max_ngram + 1):
                if end + 1 >= n:
                    self._latest[tuple(tokens[end + 1 - n : end + 1])] = end + 1 - n
        self._indexed_to = max(self._indexed_to, n_tokens - 1)
        for n in range(min(self.max_ngram, n_tokens - 1), self.min_ngram - 1, -1):
            start = self._latest.get(tuple(tokens[n_tokens - n :]))
            if start is not None:
                return tokens[start + n : start + n + max_tokens]
        return []
