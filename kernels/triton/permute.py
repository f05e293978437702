"""Token permute/unpermute by expert in Triton (the twins of kernels.moe_ref.permute/unpermute).

- `permute(x_ND, src_P)`: out[p] = x[src[p]], zero rows where src[p] is -1: dispatches tokens
  into the expert-sorted (optionally padded) layout, and also gathers rows back out of it.
- `unpermute(y_PD, dst_Nk, weights_Nk)`: out[n] = sum_k weight[n, k] * y[dst[n, k]] in fp32:
  the MoE combine, one program per block of tokens, so no atomics and a fixed summation order.

Build the indices with kernels.moe_ref.route (or pad_groups for rows already sorted).

    x_PD = permute(x_ND, src_P); y_ND = unpermute(y_PD, dst_Nk, weights_Nk)
"""

from __future__ import annotations

import torch

import triton
import triton.language as tl
from kernels.triton import interpreting


@triton.jit
def _gather_rows_kernel(x_ptr, src_ptr, out_ptr, P, D, stride_x, stride_o,
                        BP: tl.constexpr, BD: tl.constexpr):
    offs_p = tl.program_id(0) * BP + tl.arange(0, BP)
    offs_d = tl.program_id(1) * BD + tl.arange(0, BD)
    p_mask = offs_p < P
    d_mask = offs_d < D
    src = tl.load(src_ptr + offs_p, mask=p_mask, other=-1).to(tl.int64)
    vals = tl.load(x_ptr + src[:, None] * stride_x + offs_d[None, :],
                   mask=(src[:, None] >= 0) & d_mask[None, :], other=0)
    tl.store(out_ptr + offs_p[:, None].to(tl.int64) * stride_o + offs_d[None, :], vals,
             mask=p_mask[:, None] & d_mask[None, :])


@triton.jit
def _combine_kernel(y_ptr, dst_ptr, w_ptr, out_ptr, N, D, stride_y, stride_o,
                    TOPK: tl.constexpr, HAS_W: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):
    offs_n = tl.program_id(0) * BN + tl.arange(0, BN)
    offs_d = tl.program_id(1) * BD + tl.arange(0, BD)
    n_mask = offs_n < N
    mask = n_mask[:, None] & (offs_d < D)[None, :]
    acc = tl.zeros((BN, BD), dtype=tl.float32)
    for j in tl.static_range(TOPK):
        dst = tl.load(dst_ptr + offs_n * TOPK + j, mask=n_mask, other=0).to(tl.int64)
        y = tl.load(y_ptr + dst[:, None] * stride_y + offs_d[None, :], mask=mask, other=0).to(tl.float32)
        if HAS_W:
            y = y * tl.load(w_ptr + offs_n * TOPK + j, mask=n_mask, other=0).to(tl.float32)[:, None]
        acc += y
    tl.store(out_ptr + offs_n[:, None].to(tl.int64) * stride_o + offs_d[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=mask)


def _blocks(D: int) -> tuple[int, int]:
    if interpreting():
        return 16, min(128, triton.next_power_of_2(D))
    return 16, min(512, triton.next_power_of_2(D))


def permute(x_ND: torch.Tensor, src_P: torch.Tensor) -> torch.Tensor:
    """out[p] = x[src[p]] (zeros where src[p] < 0); x's rows must be contiguous."""
    x = x_ND if x_ND.stride(-1) == 1 else x_ND.contiguous()
    P, D = src_P.numel(), x.shape[1]
    out = torch.empty(P, D, dtype=x.dtype, device=x.device)
    if P and D:
        BP, BD = _blocks(D)
        _gather_rows_kernel[(triton.cdiv(P, BP), triton.cdiv(D, BD))](
            x, src_P, out, P, D, x.stride(0), out.stride(0), BP=BP, BD=BD)
    return out


def unpermute(y_PD: torch.Tensor, dst_Nk: torch.Tensor, weights_Nk: torch.Tensor | None = None) -> torch.Tensor:
    """out[n] = sum_k weight[n, k] * y[dst[n, k]], accumulated in fp32, in y's dtype."""
    y = y_PD if y_PD.stride(-1) == 1 else y_PD.contiguous()
    N, k = dst_Nk.shape
    D = y.shape[1]
    out = torch.empty(N, D, dtype=y.dtype, device=y.device)
    if N and D:
        BN, BD = _blocks(D)
        dst = dst_Nk.contiguous()
        w = weights_Nk.contiguous() if weights_Nk is not None else dst
        _combine_kernel[(triton.cdiv(N, BN), triton.cdiv(D, BD))](
            y, dst, w, out, N, D, y.stride(0), out.stride(0),
            TOPK=k, HAS_W=weights_Nk is not None, BN=BN, BD=BD)
    return out
