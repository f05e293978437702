"""The dense building blocks of the decoder: RMSNorm, rotary position embeddings, and
grouped-query attention that reads and writes a preallocated KV cache.

Legend: B batch rows, S new positions this call, T cached positions attended to, D model width,
H query heads, K key/value heads, Dh head width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from model.config import ModelConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # one fused op: decoding runs 61 of these per token
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        # Normalise in fp32 like the reference implementation, then scale in the input dtype.
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class Rotary(nn.Module):
    """Precomputed cos/sin tables (Llama's half-split layout) for every position up to the limit."""

    def __init__(self, head_dim: int, max_positions: int, theta: float) -> None:
        super().__init__()
        self.head_dim, self.max_positions, self.theta = head_dim, max_positions, theta
        self.register_buffer("cos", torch.empty(max_positions, head_dim), persistent=False)
        self.register_buffer("sin", torch.empty(max_positions, head_dim), persistent=False)
        self.init_buffers()

    def init_buffers(self) -> None:
        if self.cos.is_meta:
            return
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim))
        freqs = torch.outer(torch.arange(self.max_positions, dtype=torch.float32), inv_freq)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.cos.copy_(emb.cos())
        self.sin.copy_(emb.sin())

    def forward(self, positions_BS: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cos[positions_BS].to(dtype), self.sin[positions_BS].to(dtype)


def apply_rotary(x_BSHDh: torch.Tensor, cos_BSDh: torch.Tensor, sin_BSDh: torch.Tensor) -> torch.Tensor:
    half = x_BSHDh.shape[-1] // 2
    x1, x2 = x_BSHDh[..., :half], x_BSHDh[..., half:]
    rotated = torch.cat([-x2, x1], dim=-1)
    return x_BSHDh * cos_BSDh.unsqueeze(2) + rotated * sin_BSDh.unsqueeze(2)


class KVCache:
    """Preallocated keys and values for `rows` sequences of up to `max_len` positions.

    Row b's positions [0, length_b) are valid; the caller tracks lengths and passes the absolute
    position of every new token, so rows of different lengths decode together. Pages are touched
    only as they fill (torch.empty), so a long `max_len` costs address space, not memory.
    Rows decoded together read each other's attended span (masked): `make_finite` first.

    Keys and values are valid only for the weights that computed them, `weight_version`. Today
    nothing outlives its request; the rule for anything that will be reused across requests (a
    prefix cache): key every entry by `weight_version` and drop every entry in `reset`, which
    the engine calls on each weight load (whatever the version numbers: a reload of the same
    version number is still new weights).
    """

    ZERO_CHUNK = 256
    """Positions zeroed at a time by make_finite (it runs once per chunk, not per step)."""

    def __init__(
        self, config: ModelConfig, rows: int, max_len: int, dtype: torch.dtype, device: torch.device | str = "cpu",
        weight_version: int = 0,
    ) -> None:
        shape = (rows, config.num_kv_heads, max_len, config.head_dim)
        self.k = [torch.empty(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.v = [torch.empty(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.rows, self.max_len = rows, max_len
        self.weight_version = weight_version
        self.resets = 0
        """How many times the contents were invalidated (weight loads)."""
        self._finite_upto = [0] * rows  # per row: positions below were written or zeroed

    def reset(self, weight_version: int) -> None:
        """Invalidates every row: from now on entries belong to `weight_version`. (Finiteness
        bookkeeping survives: it is about the memory, not the weights.)"""
        self.weight_version = weight_version
        self.resets += 1

    def make_finite(self, row: int, length: int, upto: int) -> None:
        """Zeroes row `row`'s never-written positions in [length, upto) (and a chunk beyond).

        A row shorter than the batch's attended span reads its positions past `length` under
        the mask, and a masked position still enters the output as 0 * value: never-written
        memory (torch.empty may hand back freed NaN bits) would turn it into NaN. Positions
        written since (by any sequence) hold finite keys and values, so each is zeroed once."""
        start = max(self._finite_upto[row], length)
        if start >= upto:
            return
        end = min(self.max_len, max(upto, start + self.ZERO_CHUNK))
        for k, v in zip(self.k, self.v):
            k[row, :, start:end].zero_()
            v[row, :, start:end].zero_()
        self._finite_upto[row] = end

    def move_row(self, src: int, dst: int, length: int) -> None:
        """Copies the first `length` positions of row `src` into row `dst` (compaction when a
        sequence leaves the batch)."""
        for k, v in zip(self.k, self.v):
            k[dst, :, :length].copy_(k[src, :, :length])
            v[dst, :, :length].copy_(v[src, :, :length])


class Attention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        q_rows = config.num_heads * config.head_dim
        kv_rows = config.num_kv_heads * config.head_dim
        self.qkv = nn.Linear(config.hidden_size, q_rows + 2 * kv_rows, bias=False)
        self.o_proj = nn.Linear(q_rows, config.hidden_size, bias=False)

    def forward(
        self,
        x_BSD: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        cache: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None,
        positions_BS: torch.Tensor | None = None,
        attend_len: int = 0,
    ) -> torch.Tensor:
        """Without a cache: causal attention over x. With one, (keys, values, write_at_BS) for
        this call's rows: writes the new keys/values at `write_at_BS` (default `positions_BS`)
        and attends to the first `attend_len` cached positions, each query seeing only
        positions up to its own. Redirecting a write past `attend_len` discards it (padding)."""
        B, S, _ = x_BSD.shape
        H, K, Dh = self.num_heads, self.num_kv_heads, self.head_dim
        qk, v = self.qkv(x_BSD).split([(H + K) * Dh, K * Dh], dim=-1)
        # Queries and keys rotate together: one set of ops for both.
        q, k = apply_rotary(qk.view(B, S, H + K, Dh), *rope).split([H, K], dim=2)
        v = v.view(B, S, K, Dh)
        q_BHSDh = q.transpose(1, 2)
        if cache is None:
            out = F.scaled_dot_product_attention(
                q_BHSDh, k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
            )
        else:
            assert positions_BS is not None
            cache_k, cache_v, write_at_BS = cache
            single_row = B == 1 and write_at_BS is None
            if single_row:  # the common decode case: one contiguous slice, no index tensors
                start = int(positions_BS[0, 0])
                cache_k[0, :, start : start + S] = k[0].transpose(0, 1)
                cache_v[0, :, start : start + S] = v[0].transpose(0, 1)
            else:
                slots_BS = positions_BS if write_at_BS is None else write_at_BS
                rows = torch.arange(B, device=x_BSD.device).unsqueeze(1).expand(B, S)
                # Advanced indices around a slice put (B, S) first: the value is (B, S, K, Dh).
                cache_k[rows, :, slots_BS] = k
                cache_v[rows, :, slots_BS] = v
            keys = cache_k[:, :, :attend_len]
            values = cache_v[:, :, :attend_len]
            mask = None
            if not (single_row and S == 1 and start + 1 == attend_len):  # else every key is visible
                key_pos = torch.arange(attend_len, device=x_BSD.device)
                mask = (key_pos.view(1, 1, -1) <= positions_BS.unsqueeze(-1)).unsqueeze(1)
            out = F.scaled_dot_product_attention(q_BHSDh, keys, values, attn_mask=mask, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(B, S, -1))
