"""MoE grouped matmuls as autograd Functions, for the model's experts seam (`Experts.grouped_mm`,
chosen by `ModelConfig.expert_matmul`), plus MXFP8 inference experts.

`mxfp8_grouped_mm(x_MK, w_ENK, offsets_E)` computes out[g_e] = x[g_e] @ w[e].T with every
operand in MXFP8 (E4M3 + E8M0 per 32 along the contraction, RCEIL; kernels/mxfp8_ref.py):

    forward   out = Q(x along K) @ Q(w along K)                                  M-grouped
    dgrad     dx  = Q(dy along N) @ Q(w along N)          (w's column-wise copy)  M-grouped
    wgrad     dw  = Q(dy along M)^T @ Q(x along M)        (column-wise copies)    K-grouped

Each orientation is quantised from the high-precision tensor (one pass writes both), the
column-wise copies of x and w are what the forward saves (1.03 bytes/element instead of 2).
The weight gradient contracts over each expert's rows in blocks of 32, so rows are laid out with
every expert's group padded to a multiple of 32 (zero rows) when they aren't already.
Outputs and gradients come back in the inputs' dtypes; accumulation is fp32.

Backends: "triton" (kernels/triton, on CUDA; or on a CPU under TRITON_INTERPRET=1 when asked
for explicitly) and "ref" (kernels/mxfp8_ref.py + kernels/moe_ref.py: the emulated path, with
the kernels' exact quantisation; matmuls equal up to fp32 summation order). The default is
"triton" on CUDA and "ref" elsewhere.

    from kernels.grouped_mm import mxfp8_grouped_mm, quantize_experts
    out_MN = mxfp8_grouped_mm(x_MK, w_ENK, offsets_E)       # differentiable
    quantize_experts(model)                                   # inference on MXFP8 expert weights

Legend: M routed rows, P padded rows, K contraction, N output width, E experts.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from kernels import moe_ref
from kernels.mxfp8_ref import BLOCK, MX, quantize, quantize_colwise

BACKENDS = ("ref", "triton")


def _ref_quantize(x: torch.Tensor, rowwise: bool = True, colwise: bool = True) -> tuple[MX | None, MX | None]:
    return (quantize(x) if rowwise else None), (quantize_colwise(x) if colwise else None)


_REF = SimpleNamespace(
    quantize=_ref_quantize, permute=moe_ref.permute,
    mm=moe_ref.grouped_mm, wgrad=moe_ref.grouped_mm_wgrad,
    mx_mm=lambda a, b, offsets, dtype, mode: moe_ref.mx_grouped_mm(a, b, offsets, dtype),
    mx_wgrad=lambda a, b, offsets, dtype, mode: moe_ref.mx_grouped_mm_wgrad(a, b, offsets, dtype),
)


def _triton_ops() -> SimpleNamespace:
    from kernels.triton import grouped_gemm, permute, quant

    def q(x, rowwise=True, colwise=True):
        return quant.quantize_mxfp8(x, rowwise=rowwise, colwise=colwise)

    return SimpleNamespace(
        quantize=q, permute=permute.permute,
        mm=grouped_gemm.grouped_mm, wgrad=grouped_gemm.grouped_mm_wgrad,
        mx_mm=grouped_gemm.mx_grouped_mm, mx_wgrad=grouped_gemm.mx_grouped_mm_wgrad,
    )


def resolve_backend(device: torch.device, backend: str | None = None) -> str:
    if backend is None:
        from kernels.triton import available

        return "triton" if device.type == "cuda" and available(device) else "ref"
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    return backend


def _ops(device: torch.device, backend: str | None) -> SimpleNamespace:
    return _triton_ops() if resolve_backend(device, backend) == "triton" else _REF


def _check(x_MK: torch.Tensor, w_ENK: torch.Tensor, offsets_E: torch.Tensor) -> None:
    if x_MK.dim() != 2 or w_ENK.dim() != 3 or x_MK.shape[1] != w_ENK.shape[2]:
        raise ValueError(f"grouped matmul takes x (M, K) and w (E, N, K), got {tuple(x_MK.shape)} and {tuple(w_ENK.shape)}")
    if offsets_E.numel() != w_ENK.shape[0]:
        raise ValueError(f"{offsets_E.numel()} group offsets for {w_ENK.shape[0]} experts")


class MXFP8GroupedMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_MK, w_ENK, offsets_E, backend, mode):
        ops = _ops(x_MK.device, backend)
        src_P, dst_M, offsets_P = moe_ref.pad_groups(offsets_E.to(x_MK.device), BLOCK)
        x_PK = x_MK.contiguous() if src_P is None else ops.permute(x_MK, src_P)
        x_row, x_col = ops.quantize(x_PK, colwise=ctx.needs_input_grad[1])
        w_row, w_col = ops.quantize(w_ENK.contiguous(), colwise=ctx.needs_input_grad[0])
        out_PN = ops.mx_mm(x_row, w_row, offsets_P, x_MK.dtype, mode)
        out_MN = out_PN if src_P is None else ops.permute(out_PN, dst_M)
        saved = [t for mx in (x_col, w_col) if mx is not None for t in (mx.data, mx.scale)]
        ctx.save_for_backward(*saved, offsets_P, dst_M, *([] if src_P is None else [src_P]))
        ctx.has = (x_col is not None, w_col is not None, src_P is not None)
        ctx.dtypes, ctx.backend, ctx.mode = (x_MK.dtype, w_ENK.dtype), backend, mode
        return out_MN

    @staticmethod
    def backward(ctx, dy_MN):
        saved = list(ctx.saved_tensors)
        has_x, has_w, padded = ctx.has
        x_col = MX(saved.pop(0), saved.pop(0)) if has_x else None
        w_col = MX(saved.pop(0), saved.pop(0)) if has_w else None
        offsets_P, dst_M = saved.pop(0), saved.pop(0)
        src_P = saved.pop(0) if padded else None
        ops = _ops(dy_MN.device, ctx.backend)
        dy_PN = dy_MN.contiguous() if src_P is None else ops.permute(dy_MN, src_P)
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dy_row, dy_col = ops.quantize(dy_PN, rowwise=need_dx, colwise=need_dw)
        dx = dw = None
        if need_dx:  # (P, N) @ (E, K, N)^T per group -> (P, K)
            dx = ops.mx_mm(dy_row, w_col, offsets_P, ctx.dtypes[0], ctx.mode)
            dx = dx if src_P is None else ops.permute(dx, dst_M)
        if need_dw:  # (N, P) x (K, P) per group -> (E, N, K)
            dw = ops.mx_wgrad(dy_col, x_col, offsets_P, ctx.dtypes[1], ctx.mode)
        return dx, dw, None, None, None


class HPGroupedMM(torch.autograd.Function):
    """The same grouped matmul in the inputs' precision (bf16 on a GPU), fp32 accumulation."""

    @staticmethod
    def forward(ctx, x_MK, w_ENK, offsets_E, backend):
        ops = _ops(x_MK.device, backend)
        offsets_E = offsets_E.to(x_MK.device)
        ctx.save_for_backward(x_MK, w_ENK, offsets_E)
        ctx.backend = backend
        return ops.mm(x_MK, w_ENK, offsets_E, x_MK.dtype)

    @staticmethod
    def backward(ctx, dy_MN):
        x_MK, w_ENK, offsets_E = ctx.saved_tensors
        ops = _ops(dy_MN.device, ctx.backend)
        dy_MN = dy_MN.contiguous()
        dx = ops.mm(dy_MN, w_ENK.transpose(1, 2), offsets_E, x_MK.dtype) if ctx.needs_input_grad[0] else None
        dw = ops.wgrad(dy_MN.T, x_MK.T, offsets_E, w_ENK.dtype) if ctx.needs_input_grad[1] else None
        return dx, dw, None, None


def mxfp8_grouped_mm(x_MK: torch.Tensor, w_ENK: torch.Tensor, offsets_E: torch.Tensor, *,
                     backend: str | None = None, mode: str | None = None) -> torch.Tensor:
    """Differentiable MXFP8 grouped matmul: out[g_e] = x[g_e] @ w[e].T (see the module doc).
    `mode` picks the Triton MMA flavour ("dequant", "fp8", "scaled"; None: by capability)."""
    _check(x_MK, w_ENK, offsets_E)
    return MXFP8GroupedMM.apply(x_MK, w_ENK, offsets_E, backend, mode)


def hp_grouped_mm(x_MK: torch.Tensor, w_ENK: torch.Tensor, offsets_E: torch.Tensor, *,
                  backend: str | None = None) -> torch.Tensor:
    """Differentiable high-precision grouped matmul on the Triton kernels (the bf16 baseline).
    Every row must belong to a group (offsets[-1] == M), as in the model."""
    _check(x_MK, w_ENK, offsets_E)
    return HPGroupedMM.apply(x_MK, w_ENK, offsets_E, backend)


class MXFP8Experts(nn.Module):
    """Drop-in for model.moe.Experts (same forward) holding MXFP8 expert weights, quantised once
    (row-wise along the input dim, which is all inference needs). Activations are quantised on
    the fly; inference only."""

    def __init__(self, w13_EFD: torch.Tensor, w2_EDF: torch.Tensor, backend: str | None = None, mode: str | None = None) -> None:
        super().__init__()
        ops = _ops(w13_EFD.device, backend)
        with torch.no_grad():
            (w13, _), (w2, _) = (ops.quantize(w.detach().contiguous(), colwise=False) for w in (w13_EFD, w2_EDF))
        self.register_buffer("w13_data", w13.data)
        self.register_buffer("w13_scale", w13.scale)
        self.register_buffer("w2_data", w2.data)
        self.register_buffer("w2_scale", w2.scale)
        self.dtype, self.backend, self.mode = w13_EFD.dtype, backend, mode

    @torch.no_grad()
    def forward(self, x_MD: torch.Tensor, offsets_E: torch.Tensor) -> torch.Tensor:
        ops = _ops(x_MD.device, self.backend)
        offsets_E = offsets_E.to(x_MD.device)
        x_row, _ = ops.quantize(x_MD.contiguous(), colwise=False)
        h_MF = ops.mx_mm(x_row, MX(self.w13_data, self.w13_scale), offsets_E, x_MD.dtype, self.mode)
        gate_MF, up_MF = h_MF.chunk(2, dim=-1)
        a_row, _ = ops.quantize((F.silu(gate_MF) * up_MF).contiguous(), colwise=False)
        return ops.mx_mm(a_row, MX(self.w2_data, self.w2_scale), offsets_E, x_MD.dtype, self.mode)


@torch.no_grad()
def quantize_experts(model: nn.Module, backend: str | None = None, mode: str | None = None) -> nn.Module:
    """Replaces every MoE layer's experts with MXFP8Experts in place (the high-precision expert
    weights are dropped); the rest of the model is unchanged. Inference only."""
    for layer in model.layers:
        experts = layer.moe.experts
        layer.moe.experts = MXFP8Experts(experts.w13_EFD, experts.w2_EDF, backend, mode)
    return model
