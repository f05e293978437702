"""The engine's matrix and attention kernels, chosen per weight and per role, all row-invariant.

Row-invariant means a token's arithmetic is the same whatever else is in the call: how many
other tokens, which sequences, where a prefill chunk starts. BLAS GEMMs are not (a row computed
with 1 row or 300 rows may round differently), nor is attention through SDPA over a padded
batch. The engine's guarantees rest on this:
- a prompt served partly from the prefix cache gives the same logits, bit for bit, as computed
  whole (model/prefix_cache.py), in fp32 and in int4;
- a sequence decodes the same tokens alone or batched with any others, and the C++ decode
  step (model/fused_decode.py) equals the Python path bit for bit.

A token is computed in one of two roles: in a prompt ("prefill", many rows at once: the bf16
matrix unit where the CPU has one) or as a decoded token ("decode": bandwidth-bound, the int4
kernels). The role decides the kernel; within a role nothing else does:

| weights | decode | prefill |
| --- | --- | --- |
| int4 (model/quant.py) | torch's int4 kernel, bf16 activations | bf16 copy, oneDNN brgemm (AMX / AVX512-BF16); fp32 row dots without one |
| an int4 layer's LoRA residual | plus fp32 row dots through its two factors | merged into the bf16 copy |
| int8 head | torch's int8 kernel | the same |
| fp32 (checkpoint weights) | fp32 row dots (kernels.cpp) | the same |
| attention | one query at a time, fp32 | brgemm tiles: bf16 for int4 models on a bf16 unit, else fp32 |
| a MoE layer's experts, int4 | per expert, as above | one call for the routed layer (`moe_vnni`) on a bf16 unit |

The rotary embedding and the cache write of a call's keys and values are one C++ call too
(`rotary_store`, fp32 models without per-head norms), shared with the fused decode step.

Without the C++ extension (no compiler) the same calls fall back to torch ops (F.linear, SDPA),
which work but are not row-invariant; the engine then runs without prefix reuse.

    kernels = Kernels.load()                  # None-safe: Kernels(None) is the torch fallback
    linear = kernels.linear(model.layers[0].attn.qkv)
    y_NO = linear(x_NI, PREFILL)
    out_NHD = kernels.attention(q_NHD, cache_k, cache_v, rows_N, pos_N, DECODE, bf16=True)

Legend: N tokens, I input features, O output features, H query heads, K key/value heads,
Dh head width.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from model.cpu_ext import ExtensionUnavailable, load_extension
from model.kv import dequantize_rows

PREFILL, DECODE = "prefill", "decode"
VECTOR, MATRIX_F32, MATRIX_BF16 = 0, 1, 2  # kernels.h attention modes


class Kernels:
    """The extension's kernels, or torch fallbacks when `ext` is None."""

    def __init__(self, ext: Any = None, reason: str | None = None) -> None:
        self.ext = ext
        self.reason = reason
        self.bf16_matrix = bool(ext is not None and ext.bf16_matrix_available())

    @classmethod
    def load(cls, quiet: bool = False) -> Kernels:
        try:
            return cls(load_extension())
        except ExtensionUnavailable as err:
            if not quiet:
                print(f"composer: C++ kernels unavailable, running torch ops without prefix reuse: {err}",
                      file=sys.stderr, flush=True)
            return cls(None, str(err))

    @property
    def row_invariant(self) -> bool:
        return self.ext is not None

    def linear(self, layer: nn.Module | torch.Tensor) -> RoleLinear:
        """`layer`: an nn.Linear, model/quant.py's Int4Linear or Int8Linear, or an (O, I) fp32
        weight."""
        from model.quant import Int4Linear, Int8Linear

        if isinstance(layer, Int4Linear):
            return Int4RoleLinear(layer, self)
        if isinstance(layer, Int8Linear):
            return Int8RoleLinear(layer)
        weight = layer.weight if isinstance(layer, nn.Linear) else layer
        return DenseRoleLinear(weight.detach(), self)

    def rms_norm(self, x_ND: torch.Tensor, weight_D: torch.Tensor, eps: float) -> torch.Tensor:
        """(N, D) fp32 -> each row over its root mean square, times the weight."""
        if self.ext is None:
            return F.rms_norm(x_ND, weight_D.shape, weight_D, eps)
        return self.ext.rms_norm(x_ND, weight_D, eps)

    def store_rows(self, x_NKD: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """New keys or values (N, K, Dh) fp32 -> the rows a cache of `dtype` stores
        (model/kv.py): int8 rows are quantized by the extension, which the fused step shares."""
        if dtype != torch.int8:
            return x_NKD.to(dtype)
        if self.ext is None:
            raise ValueError(f"an int8 KV cache needs the C++ kernels: {self.reason}")
        return self.ext.quantize_kv(x_NKD.float())

    def attention(self, q_NHD: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor, rows_N: torch.Tensor,
                  pos_N: torch.Tensor, role: str, bf16: bool) -> torch.Tensor:
        """Each token over positions [0, pos] of its row; `bf16`: prefill with bf16 tiles where
        the CPU has a bf16 matrix unit."""
        if self.ext is None:
            return _attention_torch(q_NHD, cache_k, cache_v, rows_N, pos_N)
        mode = VECTOR if role == DECODE else MATRIX_BF16 if bf16 and self.bf16_matrix else MATRIX_F32
        q = q_NHD.contiguous()
        out = torch.empty_like(q)
        self.ext.attention(q, cache_k, cache_v, rows_N, pos_N, out, mode)
        return out


class RoleLinear:
    in_features: int
    out_features: int

    def __call__(self, x_NI: torch.Tensor, role: str) -> torch.Tensor:
        """(N, I) fp32 -> (N, O) fp32."""
        raise NotImplementedError


class DenseRoleLinear(RoleLinear):
    """fp32 weights: row dot products in both roles."""

    def __init__(self, weight_OI: torch.Tensor, kernels: Kernels) -> None:
        self.weight, self.kernels = weight_OI, kernels
        self.out_features, self.in_features = weight_OI.shape

    def __call__(self, x_NI: torch.Tensor, role: str) -> torch.Tensor:
        if self.kernels.ext is None:
            return F.linear(x_NI, self.weight)
        return self.kernels.ext.linear_rowdot(x_NI, self.weight)


class Int4RoleLinear(RoleLinear):
    """int4 weights: the int4 kernel for decoded tokens (plus the adapter's residual, if any, as
    fp32 row dots: row-invariant, and the same ops the fused step calls); a dense bf16 copy for
    prompts, with the residual merged in."""

    def __init__(self, layer: nn.Module, kernels: Kernels) -> None:
        self.layer, self.kernels = layer, kernels
        self.in_features, self.out_features = layer.in_features, layer.out_features
        self.dense: torch.Tensor | None = None
        self.refresh()

    def refresh(self) -> None:
        """(Re)builds the dense prompt copy from the int4 weights (after they were written)."""
        if self.kernels.ext is not None:
            weight = self.layer.dense(torch.float32)
            self.dense = self.kernels.ext.pack_vnni(weight) if self.kernels.bf16_matrix else weight.to(torch.bfloat16)

    def reads(self, storages: set[int]) -> bool:
        """Whether its int4 weights or its adapter's residual live in one of these storages (by
        data pointer)."""
        layer = self.layer
        tensors = [t for t in (layer.packed, layer.scales_and_zeros, layer.lora_down, layer.lora_up) if t is not None]
        return any(t.untyped_storage().data_ptr() in storages for t in tensors)

    def __call__(self, x_NI: torch.Tensor, role: str) -> torch.Tensor:
        if role == DECODE or self.dense is None:
            layer = self.layer
            out = torch.ops.aten._weight_int4pack_mm_for_cpu(
                x_NI.to(torch.bfloat16), layer.packed, layer.group_size, layer.scales_and_zeros
            ).to(x_NI.dtype)
            if layer.lora_down is None:
                return out
            if self.kernels.ext is None:
                return out + F.linear(F.linear(x_NI, layer.lora_down), layer.lora_up)
            rowdot = self.kernels.ext.linear_rowdot
            return out + rowdot(rowdot(x_NI.contiguous(), layer.lora_down), layer.lora_up)
        if self.kernels.bf16_matrix:
            return self.kernels.ext.linear_vnni(x_NI, self.dense, self.out_features)
        return self.kernels.ext.linear_rowdot(x_NI, self.dense)


class Int8RoleLinear(RoleLinear):
    """The int8 output head: torch's int8 kernel in both roles (a prompt needs one row)."""

    def __init__(self, layer: nn.Module) -> None:
        self.layer = layer
        self.in_features, self.out_features = layer.in_features, layer.out_features

    def __call__(self, x_NI: torch.Tensor, role: str) -> torch.Tensor:
        out = torch.ops.aten._weight_int8pack_mm(x_NI.to(torch.bfloat16), self.layer.q_OI, self.layer.scale_O)
        return out.to(x_NI.dtype)


def _attention_torch(q_NHD, cache_k, cache_v, rows_N, pos_N) -> torch.Tensor:
    """The fallback: SDPA per cache row over its tokens' span, masked by position."""
    out = torch.empty_like(q_NHD)
    for row in rows_N.unique().tolist():
        idx = (rows_N == row).nonzero().squeeze(1)
        pos = pos_N[idx]
        span = int(pos.max()) + 1
        keys = dequantize_rows(cache_k[row, :, :span]).to(q_NHD.dtype).unsqueeze(0)
        values = dequantize_rows(cache_v[row, :, :span]).to(q_NHD.dtype).unsqueeze(0)
        mask = (torch.arange(span).view(1, -1) <= pos.view(-1, 1)).view(1, 1, len(idx), span)
        q = q_NHD[idx].transpose(0, 1).unsqueeze(0)  # (1, H, n, Dh)
        o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
        out[idx] = o[0].transpose(0, 1)
    return out
