"""The engine's KV cache: per layer, keys and values of `rows` sequences of up to `max_len`
positions, in fp32, bf16 or int8, and the copies between a row and the prefix cache's blocks
(model/prefix_cache.py).

An int8 cache stores each position's key (or value) row of one head as its Dh values over
max|x| / 127, rounded to nearest, followed by that fp32 scale's 4 bytes: Dh + 4 bytes a row
(model/csrc/kernels.h). A row is quantized alone, so its bytes do not depend on what else was in
the step; the C++ kernels quantize (`Kernels.store_rows`) and read it. It halves bf16's bytes,
which decoding at thousands of positions is bound by; `bench/kv_cache.py` measures its cost.

Row b's positions [0, length_b) are valid; the engine tracks lengths and passes each new token's
row and absolute position. A sequence keeps its row from admission to the end, and attention
reads only positions up to each query's own (model/kernels.py), so rows need no compaction and
never-written memory is never read. Pages are touched only as they fill (torch.empty), so a long
`max_len` costs address space, not memory, unless the engine commits it ahead of use
(model/prefault.py), as long-lived servers do.

    cache = KVCache(config, rows=8, max_len=8193, dtype=torch.bfloat16)

Legend: L layers, K key/value heads, Dh head width, P positions per block.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from model.config import ModelConfig

KV_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "int8": torch.int8}
INT8_SCALE_BYTES = 4
"""Bytes after an int8 row's values: its fp32 scale (kernels.h's kInt8ScaleBytes)."""


def kv_dtype(name: str | torch.dtype) -> torch.dtype:
    """"fp32", "bf16" or "int8" (or the dtype itself) -> the dtype; anything else is a ValueError."""
    if isinstance(name, torch.dtype) and name in KV_DTYPES.values():
        return name
    if name not in KV_DTYPES:
        raise ValueError(f"kv_dtype must be one of {sorted(KV_DTYPES)}, got {name!r}")
    return KV_DTYPES[name]


def default_kv_dtype(int4: bool, kernels: bool) -> str:
    """The cache a model gets unless asked: int8 rows for int4 models with the C++ `kernels`
    (half bf16's bytes, which decoding at thousands of positions is bound by). On the agent turn
    (bench/kv_cache.py, three runs): decoding 49.6-50.5 -> 56.5-59.8 tok/s, decoded top-1
    agreement with an fp32 cache 96.9-98.4% against bf16's 98.1-98.8%, mean KL 1.5-1.7e-3
    against 1.1-1.3e-3 nats. bf16 for int4 without the kernels; fp32 for the checkpoint's
    weights (whose logprobs then match the trainer's)."""
    if not int4:
        return "fp32"
    return "int8" if kernels else "bf16"


def stored_width(dtype: torch.dtype, head_dim: int) -> int:
    """Elements one head's key or value row takes in a cache of `dtype`."""
    return head_dim + INT8_SCALE_BYTES if dtype == torch.int8 else head_dim


def dequantize_rows(stored: torch.Tensor) -> torch.Tensor:
    """Stored rows (..., Dh) fp32 or bf16, or (..., Dh + 4) int8 -> their values, (..., Dh) fp32."""
    if stored.dtype != torch.int8:
        return stored.float()
    values, scale = stored.split([stored.shape[-1] - INT8_SCALE_BYTES, INT8_SCALE_BYTES], dim=-1)
    return values.float() * scale.contiguous().view(torch.float32)


class KVCache:
    """Keys and values are valid only for the weights that computed them, `weight_version`:
    the engine calls `reset` on each weight load (a reload under the same version number is still
    new weights), and the prefix cache keys its blocks by (version, resets)."""

    def __init__(self, config: ModelConfig, rows: int, max_len: int, dtype: torch.dtype,
                 device: torch.device | str = "cpu", weight_version: int = 0) -> None:
        shape = (rows, config.num_kv_heads, max_len, stored_width(dtype, config.head_dim))
        self.k = [torch.empty(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.v = [torch.empty(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.rows, self.max_len, self.dtype = rows, max_len, dtype
        self.weight_version = weight_version
        self.resets = 0
        """How many times the contents were invalidated (weight loads)."""

    def reset(self, weight_version: int) -> None:
        """Invalidates every row: from now on entries belong to `weight_version`."""
        self.weight_version = weight_version
        self.resets += 1

    @property
    def bytes_per_position(self) -> int:
        k = self.k[0]
        return 2 * len(self.k) * k.shape[1] * k.shape[3] * k.element_size()

    def row_regions(self, rows: Iterable[int]) -> list[list[torch.Tensor]]:
        """The memory of each of `rows`, in that order: one view per layer's keys and values."""
        return [[t[r] for t in (*self.k, *self.v)] for r in rows]

    def read_blocks(self, row: int, start: int, num_blocks: int, block: int) -> list[torch.Tensor]:
        """Positions [start, start + num_blocks * block) of `row`, per layer keys then values,
        each (num_blocks, K, P, Dh): the prefix cache's block layout."""
        end = start + num_blocks * block
        return [t[row, :, start:end].unflatten(1, (num_blocks, block)).transpose(0, 1) for t in (*self.k, *self.v)]

    def write_blocks(self, row: int, start: int, blocks: list[torch.Tensor]) -> None:
        """Inverse of read_blocks: blocks (per layer keys then values, each (n, K, P, Dh)) into
        `row` from position `start`."""
        for t, b in zip((*self.k, *self.v), blocks):
            n, _, block, _ = b.shape
            t[row, :, start : start + n * block].unflatten(1, (n, block)).copy_(b.transpose(0, 1))
