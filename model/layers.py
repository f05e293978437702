"""The dense building blocks of the decoder: RMSNorm, rotary position embeddings, and
grouped-query attention (the full-sequence forward that training runs; the engine's
incremental decode over its KV cache is model/runner.py).

Legend: B batch rows, S positions, D model width, H query heads, K key/value heads, Dh head width.
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


class Attention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        q_rows = config.num_heads * config.head_dim
        kv_rows = config.num_kv_heads * config.head_dim
        self.qkv = nn.Linear(config.hidden_size, q_rows + 2 * kv_rows, bias=False)
        self.o_proj = nn.Linear(q_rows, config.hidden_size, bias=False)
        # Qwen3-MoE: one RMSNorm over each query head and one over each key head, before rotating.
        self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps) if config.qk_norm else None
        self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps) if config.qk_norm else None

    def forward(
        self,
        x_BSD: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        attn_mask_B1SS: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Causal attention over x, or, given `attn_mask_B1SS` (bool, True = visible), exactly
        that mask (packed rows whose samples share a prefix)."""
        B, S, _ = x_BSD.shape
        H, K, Dh = self.num_heads, self.num_kv_heads, self.head_dim
        qk, v = self.qkv(x_BSD).split([(H + K) * Dh, K * Dh], dim=-1)
        qk = qk.view(B, S, H + K, Dh)
        if self.q_norm is not None:
            q, k = qk.split([H, K], dim=2)
            qk = torch.cat([self.q_norm(q), self.k_norm(k)], dim=2)
        # Queries and keys rotate together: one set of ops for both.
        q, k = apply_rotary(qk, *rope).split([H, K], dim=2)
        v = v.view(B, S, K, Dh)
        q_BHSDh = q.transpose(1, 2)
        out = F.scaled_dot_product_attention(
            q_BHSDh, k.transpose(1, 2), v.transpose(1, 2), attn_mask=attn_mask_B1SS,
            is_causal=attn_mask_B1SS is None, enable_gqa=True,
        )
        return self.o_proj(out.transpose(1, 2).reshape(B, S, -1))
