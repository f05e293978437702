"""A byte-level tokenizer for engine tests on tiny random models: token i is byte i, and the
ids above 255 are special tokens. A test double for model/tokenizer.py, which needs real weights."""

from __future__ import annotations

import codecs


class ByteTokenizer:
    def __init__(self, vocab_size: int = 256, stop_token_ids: tuple[int, ...] = ()) -> None:
        self.vocab_size = vocab_size
        self.stop_token_ids = list(stop_token_ids)

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode(errors="replace")

    def incremental_decoder(self) -> _Incremental:
        return _Incremental()


class _Incremental:
    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token_id: int) -> str:
        return self._utf8.decode(bytes([token_id])) if token_id < 256 else ""

    def flush(self) -> str:
        return self._utf8.decode(b"", final=True)
