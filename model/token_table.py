"""Per-vocabulary facts the tool-call constraint (model/constrained.py) reads for every token,
computed once per vocabulary (50-80 ms for SmolLM2's 49,152 tokens): share one table between
requests.

    table = TokenTable(tok.token_strings(), eos_token_ids=tok.stop_token_ids,
                       special_token_ids=tok.special_token_ids)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from model.toolcalls import OPEN_TAG


class TokenTable:
    """Per-vocabulary facts, computed once: each token's text, whether it holds a '<', whether
    it is plain string content (no quote, backslash or control character), which ids are
    special, the id of each single-character token, and the other tokens by first character."""

    def __init__(
        self,
        token_strings: Sequence[str],
        eos_token_ids: Iterable[int] = (),
        special_token_ids: Iterable[int] = (),
    ) -> None:
        self.strings = list(token_strings)
        self.eos_token_ids = list(eos_token_ids)
        self.special = bytearray(len(self.strings))
        self.has_lt = bytearray(len(self.strings))
        self.plain = bytearray(len(self.strings))
        self.char_ids: dict[str, int] = {}
        self.by_first_char: dict[str, list[int]] = {}
        for i in [*self.eos_token_ids, *special_token_ids]:
            if not 0 <= i < len(self.strings):
                raise ValueError(
                    f"special token id {i} is outside the vocabulary of {len(self.strings)}"
                )
            self.special[i] = 1
        for i, text in enumerate(self.strings):
            if not text:
                self.special[i] = 1
            if self.special[i]:
                continue
            self.has_lt[i] = "<" in text
            self.plain[i] = '"' not in text and "\\" not in text and min(text) >= " "
            if len(text) == 1:
                self.char_ids.setdefault(text, i)
            self.by_first_char.setdefault(text[0], []).append(i)
        self.special_ids = [i for i, special in enumerate(self.special) if special]
        self.opening_ids = [i for i, text in enumerate(self.strings) if OPEN_TAG in text]

    def __len__(self) -> int:
        return len(self.strings)
