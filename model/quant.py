"""Weight-only quantisation for fast CPU decoding.

Decoding one token reads every active weight once, so on a CPU its speed is the memory bandwidth
divided by the bytes per token (composer-mini in fp32: 214M active parameters, 856 MB). This
module cuts the bytes:

- attention and expert matrices: int4, groups of 32 along the input dimension, each group with a
  scale and a zero point (w = (q - 8) * scale + zero), packed for torch's CPU int4 kernel;
- the output head: int8 per output channel.

The matmuls run with bf16 activations (the CPU kernels are fast there); the residual stream, the
norms, the router and attention stay in the model's dtype. composer-mini's weights come from a
Q4_1 GGUF, whose blocks are exactly such int4 groups, so int4 re-expresses them nearly as they
are (the bf16 scales round them by at most 2^-9 relative).

Rows beyond `SMALL_M` (prefill, wide speculative verification) dequantize the matrix and use the
ordinary GEMM instead: the int4 kernel is fastest for matrix-vector work, the GEMM for many rows.

    from model.quant import quantize_model
    quantize_model(model, "int4")       # in place; inference only

A trained checkpoint's LoRA adapter (model/adapter.py) stays beside the int4 matrices, unmerged:
each adapted layer quantizes the base weight and adds scale * B (A x) in fp32, because int4 of
the merged weight keeps only 6% of what the adapter changed.

    quantize_model(model, "int4", adapter=read_adapter(checkpoint / "adapter"))

Weight updates (model/weights.py) re-quantize only the rows they change: quantization is per
output row, so the other rows keep their values bit for bit (`requantized`).

Legend: O output features, I input features, G groups along I, M rows, E experts.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from model.adapter import ADAPTER_DIR, LowRank, read_adapter
from model.transformer import Transformer

GROUP_SIZE = 32
SMALL_M = 16
SCHEMES = ("none", "int4")
ADAPTABLE = ("attn.qkv.weight", "attn.o_proj.weight", "moe.experts.w13_EFD", "moe.experts.w2_EDF")
"""The weights (per layer) whose adapters int4 keeps: the ones it quantizes."""


def supports_int4() -> bool:
    """Whether this torch build has the CPU int4 weight-only kernel."""
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and hasattr(
        torch.ops.aten, "_convert_weight_to_int4pack_for_cpu"
    )


CopyPair = tuple[torch.Tensor, torch.Tensor]
"""(destination, source): a weight update applies as `destination.copy_(source)`."""
RowUpdate = tuple[slice, torch.Tensor]
"""New full-precision rows (output features) of a quantized matrix: (which rows, their weights)."""


def quantize_int4(weight_OI: torch.Tensor, group_size: int = GROUP_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """(q_OI int32 in [0, 15], scales_and_zeros (G, O, 2) bf16). Row by row: quantizing some rows
    alone gives exactly those rows of quantizing the whole matrix."""
    num_out, num_in = weight_OI.shape
    w_OGg = weight_OI.detach().float().reshape(num_out, num_in // group_size, group_size)
    low, high = w_OGg.amin(-1, keepdim=True), w_OGg.amax(-1, keepdim=True)
    scale = ((high - low) / 15).clamp(min=1e-12)
    q_OI = ((w_OGg - low) / scale).round().clamp(0, 15).to(torch.int32).reshape(num_out, num_in)
    zero = low + 8 * scale
    # (G, O, 2): the kernel's layout for per-group scales and zero points.
    scales_and_zeros = torch.stack([scale.squeeze(-1).t(), zero.squeeze(-1).t()], dim=-1)
    return q_OI, scales_and_zeros.contiguous().to(torch.bfloat16)


def quantize_int8(weight_OI: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q_OI int8, scale_O bf16), per output channel (row)."""
    w = weight_OI.detach().float()
    scale_O = (w.abs().amax(-1) / 127).clamp(min=1e-12)
    return (w / scale_O.unsqueeze(-1)).round().clamp(-127, 127).to(torch.int8), scale_O.to(torch.bfloat16)


class Int4Linear(nn.Module):
    """int4 weights, and optionally an adapter's low-rank residual added in fp32: y = int4(W) x +
    up (down x). `weight_OI` is then the base weight, without the residual."""

    def __init__(self, weight_OI: torch.Tensor, group_size: int = GROUP_SIZE, low_rank: LowRank | None = None) -> None:
        super().__init__()
        num_out, num_in = weight_OI.shape
        if num_in % group_size or num_out % 16:
            raise ValueError(
                f"int4 needs input features ({num_in}) divisible by {group_size} and output features "
                f"({num_out}) by 16"
            )
        q_OI, scales_and_zeros = quantize_int4(weight_OI, group_size)
        self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(q_OI, 1))
        self.register_buffer("scales_and_zeros", scales_and_zeros)
        self.register_buffer("q_OI", q_OI.to(torch.uint8))  # for the many-row path
        self.in_features, self.out_features, self.group_size = num_in, num_out, group_size
        if low_rank is not None and (low_rank.down.shape[-1] != num_in or low_rank.up.shape[0] != num_out):
            raise ValueError(f"a low-rank residual {tuple(low_rank.up.shape)} @ {tuple(low_rank.down.shape)} "
                             f"does not fit a ({num_out}, {num_in}) weight")
        self.register_buffer("lora_down", None if low_rank is None else low_rank.down.float().contiguous())
        self.register_buffer("lora_up", None if low_rank is None else low_rank.up.float().contiguous())

    def requantized(self, rows: list[RowUpdate]) -> list[CopyPair]:
        """The buffers with `rows` replaced, re-quantized and re-packed, as copies into the live
        buffers (shapes never change, so whatever holds them, the fused step included, sees the
        new weights). Rows not named keep their quantized values exactly. Writes nothing."""
        q_OI, scales_and_zeros = self.q_OI.to(torch.int32), self.scales_and_zeros.clone()
        for where, weight in rows:
            q_OI[where], scales_and_zeros[:, where] = quantize_int4(weight, self.group_size)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q_OI, 1)
        return [(self.packed, packed), (self.scales_and_zeros, scales_and_zeros), (self.q_OI, q_OI.to(torch.uint8))]

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The int4 weights alone (no residual)."""
        scale, zero = self.scales_and_zeros.to(dtype).unbind(-1)  # (G, O) each
        q = self.q_OI.to(dtype).reshape(self.out_features, -1, self.group_size)
        return ((q - 8) * scale.t().unsqueeze(-1) + zero.t().unsqueeze(-1)).reshape(self.out_features, -1)

    def dense(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight the layer computes with: the int4 weights plus the residual, if any."""
        weight = self.dequantize(dtype)
        return weight if self.lora_down is None else weight + (self.lora_up @ self.lora_down).to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_MI = x if x.dim() == 2 else x.reshape(-1, self.in_features)
        if x_MI.shape[0] > SMALL_M:
            return F.linear(x, self.dense(x.dtype))
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x_MI.to(torch.bfloat16), self.packed, self.group_size, self.scales_and_zeros
        ).to(x.dtype)
        if self.lora_down is not None:
            out = out + F.linear(F.linear(x_MI, self.lora_down.to(x.dtype)), self.lora_up.to(x.dtype))
        return out if x.dim() == 2 else out.view(*x.shape[:-1], self.out_features)


class Int8Linear(nn.Module):
    def __init__(self, weight_OI: torch.Tensor) -> None:
        super().__init__()
        q_OI, scale_O = quantize_int8(weight_OI)
        self.register_buffer("q_OI", q_OI)
        self.register_buffer("scale_O", scale_O)
        self.in_features, self.out_features = weight_OI.shape[1], weight_OI.shape[0]

    def requantized(self, rows: list[RowUpdate]) -> list[CopyPair]:
        """As Int4Linear.requantized, per output channel."""
        q_OI, scale_O = self.q_OI.clone(), self.scale_O.clone()
        for where, weight in rows:
            q_OI[where], scale_O[where] = quantize_int8(weight)
        return [(self.q_OI, q_OI), (self.scale_O, scale_O)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_MI = x.reshape(-1, self.in_features)
        if x_MI.shape[0] > SMALL_M:
            return F.linear(x, self.q_OI.to(x.dtype) * self.scale_O.to(x.dtype).unsqueeze(-1))
        out = torch.ops.aten._weight_int8pack_mm(x_MI.to(torch.bfloat16), self.q_OI, self.scale_O)
        return out.to(x.dtype).reshape(*x.shape[:-1], self.out_features)


class QuantizedExperts(nn.Module):
    """Drop-in for model.moe.Experts (same forward) over int4 experts."""

    def __init__(self, w13_EFD: torch.Tensor, w2_EDF: torch.Tensor,
                 low_rank13: LowRank | None = None, low_rank2: LowRank | None = None) -> None:
        """The stacked base weights; each expert's int4 matrix takes its slice of a residual."""
        super().__init__()
        self.w13 = nn.ModuleList(Int4Linear(w, low_rank=low_rank13 and low_rank13.expert(e))
                                 for e, w in enumerate(w13_EFD))
        self.w2 = nn.ModuleList(Int4Linear(w, low_rank=low_rank2 and low_rank2.expert(e))
                                for e, w in enumerate(w2_EDF))

    def _grouped(self, x_MI: torch.Tensor, weights: nn.ModuleList, offsets_E: torch.Tensor) -> torch.Tensor:
        out = x_MI.new_empty(x_MI.shape[0], weights[0].out_features)
        start = 0
        for e, end in enumerate(offsets_E.tolist()):
            if end > start:
                out[start:end] = weights[e](x_MI[start:end])
            start = end
        return out

    def forward(self, x_MD: torch.Tensor, offsets_E: torch.Tensor) -> torch.Tensor:
        gate_MF, up_MF = self._grouped(x_MD, self.w13, offsets_E).chunk(2, dim=-1)
        return self._grouped(F.silu(gate_MF) * up_MF, self.w2, offsets_E)


@torch.no_grad()
def quantize_model(model: Transformer, scheme: str = "int4", adapter: dict[str, LowRank] | None = None) -> Transformer:
    """Replaces the model's large matrices in place; the result is for inference only.

    `adapter` (model/adapter.py's read_adapter): the model's weights are merged with it (a
    trainer's checkpoint); int4 quantizes each adapted weight less its residual and keeps the
    residual beside it. Full precision serves the merged weights as they are and ignores it."""
    if scheme not in SCHEMES:
        raise ValueError(f"quantization scheme must be one of {SCHEMES}, got {scheme!r}")
    if scheme == "none":
        return model
    if not supports_int4():
        raise ValueError(f"this torch build ({torch.__version__}) has no CPU int4 kernel; use quantize='none'")
    if model.embed.weight.device.type != "cpu":
        raise ValueError("int4 weight-only quantization is a CPU decoding path; on a GPU use bf16 or kernels/")
    residuals = dict(adapter or {})
    kept = {f"layers.{i}.{name}" for i in range(len(model.layers)) for name in ADAPTABLE}
    if set(residuals) - kept:
        raise ValueError(f"int4 keeps adapters on the attention and expert matrices only, not on "
                         f"{sorted(set(residuals) - kept)[:3]}; serve this checkpoint with quantize='none'")

    def base(name: str, merged: torch.Tensor) -> tuple[torch.Tensor, LowRank | None]:
        low_rank = residuals.pop(name, None)
        return (merged, None) if low_rank is None else (merged.float() - low_rank.delta(), low_rank)

    def int4(name: str, merged: torch.Tensor) -> Int4Linear:
        weight, low_rank = base(name, merged)
        return Int4Linear(weight, low_rank=low_rank)

    for i, layer in enumerate(model.layers):
        layer.attn.qkv = int4(f"layers.{i}.attn.qkv.weight", layer.attn.qkv.weight)
        layer.attn.o_proj = int4(f"layers.{i}.attn.o_proj.weight", layer.attn.o_proj.weight)
        w13, low_rank13 = base(f"layers.{i}.moe.experts.w13_EFD", layer.moe.experts.w13_EFD)
        w2, low_rank2 = base(f"layers.{i}.moe.experts.w2_EDF", layer.moe.experts.w2_EDF)
        layer.moe.experts = QuantizedExperts(w13, w2, low_rank13, low_rank2)
    model.lm_head = Int8Linear(model.lm_head.weight)
    model.quantization = scheme
    return model


def load_quantized(directory: str | Path, scheme: str = "int4", *, dtype: torch.dtype | None = None) -> Transformer:
    """A checkpoint directory loaded for inference: int4 with its `adapter/` (a trainer's
    checkpoint) kept beside the int4 matrices, or its weights as they are ("none")."""
    from model.hf import load_model

    adapter = read_adapter(Path(directory) / ADAPTER_DIR) if scheme != "none" else None
    return quantize_model(load_model(directory, dtype=dtype), scheme, adapter=adapter)
