"""The dense building blocks of the decoder: RMSNorm, rotary position embeddings, and
grouped-query attention (the full-sequence forward that training runs; the engine's
incremental decode over its KV cache is model/runner.py).

Legend: B batch rows, S positions, D model width, H query heads, K key/value heads, Dh head width.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class PackedRows:
    """Training rows that each hold one shared prefix, then samples that continue it (training/
    batch.py): a sample's positions see the prefix and their own segment, causally. Per row,
    `prefix` positions, then each segment's [start, end); positions after the last are padding."""

    prefix: tuple[int, ...]
    segments: tuple[tuple[tuple[int, int], ...], ...]
    CHUNK = 512
    """Queries per attention call within a segment (the masked waste per query is CHUNK / 2)."""

    @classmethod
    def from_segments(cls, segments_BS: torch.Tensor) -> PackedRows:
        """From a (B, S) map of 0 (prefix), i >= 1 (the row's i-th sample) and -1 (padding)."""
        prefix, segments = [], []
        for row in segments_BS.tolist():
            prefix.append(sum(1 for s in row if s == 0))
            spans: dict[int, list[int]] = {}
            for p, s in enumerate(row):
                if s > 0:
                    spans.setdefault(s, [p, p])[1] = p + 1
            segments.append(tuple(tuple(spans[s]) for s in sorted(spans)))
        return cls(tuple(prefix), tuple(segments))

    def attend(self, q_BHSD: torch.Tensor, k_BKSD: torch.Tensor, v_BKSD: torch.Tensor) -> torch.Tensor:
        """Attention of every row as laid out: the prefix causally, then each segment over the
        prefix's keys and its own, `CHUNK` queries at a time (a chunk sees the prefix and its
        segment up to the chunk's end; only the chunk's own diagonal block is masked, so the
        work is the pairs some position may see, plus CHUNK / 2 per query); padding gets zeros.
        Never a row's S x S mask."""
        rows = []
        for b, (n0, spans) in enumerate(zip(self.prefix, self.segments, strict=True)):
            q, k, v = q_BHSD[b:b + 1], k_BKSD[b:b + 1], v_BKSD[b:b + 1]
            parts = [F.scaled_dot_product_attention(q[:, :, :n0], k[:, :, :n0], v[:, :, :n0], is_causal=True,
                                                    enable_gqa=True)] if n0 else []
            for start, end in spans:
                if not n0:
                    parts.append(F.scaled_dot_product_attention(q[:, :, start:end], k[:, :, start:end],
                                                                v[:, :, start:end], is_causal=True, enable_gqa=True))
                    continue
                for lo in range(start, end, self.CHUNK):
                    hi, n = min(lo + self.CHUNK, end), min(self.CHUNK, end - lo)
                    keys, values = (torch.cat([t[:, :, :n0], t[:, :, start:hi]], dim=2) for t in (k, v))
                    mask = torch.ones(n, n0 + hi - start, dtype=torch.bool, device=q.device)
                    mask[:, -n:] = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
                    parts.append(F.scaled_dot_product_attention(q[:, :, lo:hi], keys, values, attn_mask=mask,
                                                                enable_gqa=True))
            used = spans[-1][1] if spans else n0
            if used < q.shape[2]:
                parts.append(q.new_zeros(1, q.shape[1], q.shape[2] - used, q.shape[3]))
            rows.append(torch.cat(parts, dim=2))
        return torch.cat(rows, dim=0)


class ContextKeys:
    """One layer's keys and values of a detached context (model/transformer.py `forward` with
    `grad_at`): the pass without gradient records them for every position; the gradient pass's
    queries attend over them, with their own keys and values, which carry the gradient, written
    in at their positions."""

    def __init__(self) -> None:
        self.k_BKSDh: torch.Tensor | None = None
        self.v_BKSDh: torch.Tensor | None = None


@dataclass(frozen=True)
class GradPositions:
    """The positions a detached-context forward computes with gradient (`at_BG`, row positions;
    `valid_BG` false for a row's padding), and the row positions each of them sees
    (`visible_BGS`: the packed layout's causal prefix-and-own-segment rule)."""

    at_BG: torch.Tensor
    valid_BG: torch.Tensor
    visible_BGS: torch.Tensor

    @classmethod
    def of(cls, at_BG: torch.Tensor, valid_BG: torch.Tensor, segments_BS: torch.Tensor) -> GradPositions:
        """From training/batch.py's layout: `segments_BS` 0 for a row's shared prefix, i >= 1 for
        its i-th sample, -1 for padding. A position sees earlier ones of the prefix and of its own
        segment; a padding query sees position 0 (its output is never used)."""
        at_BG = torch.where(valid_BG, at_BG, 0)
        S = segments_BS.shape[1]
        seg_BG = segments_BS.gather(1, at_BG)
        seg_B1S = segments_BS.unsqueeze(1)
        causal_BGS = torch.arange(S, device=at_BG.device) <= at_BG.unsqueeze(-1)
        same_BGS = (seg_B1S == 0) | (seg_B1S == seg_BG.unsqueeze(-1))
        return cls(at_BG, valid_BG, causal_BGS & same_BGS & (seg_B1S >= 0))


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
        packed: PackedRows | None = None,
        context: ContextKeys | None = None,
        grad: GradPositions | None = None,
    ) -> torch.Tensor:
        """Causal attention over x, or, given `packed`, over rows whose samples share a prefix.
        A detached context: with `context` and no `grad`, this records the layer's keys and
        values there; with both, x holds `grad.at_BG`'s positions, which attend over the
        recorded keys and values (constants) with their own written in at their positions."""
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
        q_BHSDh, k_BKSDh, v_BKSDh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if context is not None and grad is None:
            context.k_BKSDh, context.v_BKSDh = k_BKSDh.detach(), v_BKSDh.detach()
        if grad is not None:
            out = self._over_context(q_BHSDh, k, v, context, grad)
        elif packed is None:
            out = F.scaled_dot_product_attention(q_BHSDh, k_BKSDh, v_BKSDh, is_causal=True, enable_gqa=True)
        else:
            out = packed.attend(q_BHSDh, k_BKSDh, v_BKSDh)
        return self.o_proj(out.transpose(1, 2).reshape(B, S, -1))

    @staticmethod
    def _over_context(q_BHGDh: torch.Tensor, k_BGKDh: torch.Tensor, v_BGKDh: torch.Tensor,
                      context: ContextKeys | None, grad: GradPositions) -> torch.Tensor:
        if context is None or context.k_BKSDh is None:
            raise ValueError("a gradient pass over a detached context needs its recorded keys and values")
        b_N, g_N = grad.valid_BG.nonzero(as_tuple=True)
        s_N = grad.at_BG[b_N, g_N]
        # Out of place: the recorded tensors stay constants; the written rows carry the gradient.
        keys, values = (c.transpose(1, 2).index_put((b_N, s_N), own[b_N, g_N]).transpose(1, 2)
                        for c, own in ((context.k_BKSDh, k_BGKDh), (context.v_BKSDh, v_BGKDh)))
        return F.scaled_dot_product_attention(q_BHGDh, keys, values, attn_mask=grad.visible_BGS.unsqueeze(1),
                                              enable_gqa=True)
