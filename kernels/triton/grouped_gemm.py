"""The MoE grouped GEMMs in Triton, over rows sorted by expert with per-expert end offsets, in
high precision (bf16/fp32) and in MXFP8.

Two shapes cover forward and backward (torchtitan/torchao naming; E experts, offsets_E are the
cumulative ends of each expert's rows):
- M-grouped, `grouped_mm`: out[g_e] = a[g_e] @ b[e].T for a (M, K), b (E, N, K): the forward
  (x @ w.T) and the input gradient (dy @ w, with b a transposed view or the column-wise copy);
- K-grouped, `grouped_mm_wgrad`: out[e] = a[:, g_e] @ b[:, g_e].T for a (N1, M), b (N2, M): the
  weight gradient dw[e] = dy[g_e].T @ x[g_e], contracting over the expert's own tokens.

Strides are arguments, so transposed views cost no copy. M-grouped programs find their expert
from a device-side cumulative tile count (no host sync); a K-grouped program owns one expert's
(BM, BN) output tile and loops over that expert's rows.

MXFP8 operands are `MX` (E4M3 data + E8M0 bytes per 32 along K). Modes:
- "dequant": decode data * 2^(b-127) in registers and run a bf16 MMA (fp32 accumulate). The
  decoded values are exact in bf16, so this is the reference's numerics up to summation order.
  Works everywhere (Hopper/SM90 included).
- "fp8": FP8 MMA on each 32-wide K slice, then acc += dot * 2^sa * 2^sb (a rescale every 32,
  DeepGEMM's promotion at MX granularity). Hopper's fp8 tensor cores; CUDA-core bound there.
- "scaled": `tl.dot_scaled` (SM100+ block-scaled tcgen05 MMAs; elsewhere Triton upcasts to bf16).
The default is "scaled" on SM100+ and "dequant" elsewhere (kernels.triton.native_mx_dot).

Under the interpreter `tl.dot` on bf16 operands is wrong (Triton 3.9 multiplies the raw uint16
bits), so there the MMA inputs are fp32 (`DOT_F32`); fp8 and dot_scaled dots are fine.

    from kernels.triton.grouped_gemm import grouped_mm, mx_grouped_mm
    out_MN = grouped_mm(x_MK, w_ENK, offsets_E)
    out_MN = mx_grouped_mm(quantize(x_MK), quantize(w_ENK), offsets_E, torch.bfloat16)
"""

from __future__ import annotations

import torch

import triton
import triton.language as tl
from kernels.mxfp8_ref import BLOCK, MX
from kernels.triton import interpreting, native_mx_dot
from kernels.triton.quant import e8m0_to_f32

MODES = {"hp": 0, "dequant": 1, "fp8": 2, "scaled": 3}


@triton.jit
def _mma_step(acc, a_ptrs, b_ptrs, sa_ptrs, sb_ptrs, a_mask, b_mask, sa_mask, sb_mask,
              MODE: tl.constexpr, DOT_F32: tl.constexpr, IEEE: tl.constexpr):
    """acc += a (BM, BK) @ b (BK, BN) for one K step. MX modes: sa_ptrs (BM, BK/32) and sb_ptrs
    (BN, BK/32) point at the scale bytes ("scaled"), or (BM, BK) and (BK, BN) broadcast them
    to every element ("dequant"), or (BM,) and (BN,) for one 32-wide slice ("fp8"). Masked
    scales read as 127 (1.0) so a neighbour's NaN block can't leak into the sum."""
    a = tl.load(a_ptrs, mask=a_mask, other=0.0)
    b = tl.load(b_ptrs, mask=b_mask, other=0.0)
    if MODE == 0:
        if IEEE:  # fp32 operands: full fp32 products, as torch's matmul (not tf32)
            acc = tl.dot(a, b, acc, input_precision="ieee")
        elif DOT_F32:
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
        else:
            acc = tl.dot(a, b, acc)
    elif MODE == 1:
        a = a.to(tl.float32) * e8m0_to_f32(tl.load(sa_ptrs, mask=sa_mask, other=127))
        b = b.to(tl.float32) * e8m0_to_f32(tl.load(sb_ptrs, mask=sb_mask, other=127))
        if DOT_F32:
            acc = tl.dot(a, b, acc)
        else:
            acc = tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), acc)
    elif MODE == 2:
        sa = e8m0_to_f32(tl.load(sa_ptrs, mask=sa_mask, other=127))
        sb = e8m0_to_f32(tl.load(sb_ptrs, mask=sb_mask, other=127))
        acc += tl.dot(a, b) * sa[:, None] * sb[None, :]
    else:
        sa = tl.load(sa_ptrs, mask=sa_mask, other=127)
        sb = tl.load(sb_ptrs, mask=sb_mask, other=127)
        acc = tl.dot_scaled(a, sa, "e4m3", b, sb, "e4m3", acc)
    return acc


@triton.jit
def _scale_ptrs(s_ptr, offs_mn, offs_k, k0, stride_smn, stride_sk, MN_FIRST: tl.constexpr,
                MODE: tl.constexpr, BK: tl.constexpr):
    """Pointers to the scale bytes of one K step for `_mma_step` (see its docstring)."""
    if MODE == 1:  # one pointer per element, K along axis 1 (a) or axis 0 (b)
        if MN_FIRST:
            return s_ptr + offs_mn[:, None] * stride_smn + (offs_k[None, :] // 32) * stride_sk
        return s_ptr + (offs_k[:, None] // 32) * stride_sk + offs_mn[None, :] * stride_smn
    if MODE == 2:
        return s_ptr + offs_mn * stride_smn + (k0 // 32) * stride_sk
    ks = k0 // 32 + tl.arange(0, BK // 32)
    return s_ptr + offs_mn[:, None] * stride_smn + ks[None, :] * stride_sk


@triton.jit
def _scale_mask(mn_mask, k_mask, k0, k_end, MN_FIRST: tl.constexpr, MODE: tl.constexpr,
                BK: tl.constexpr):
    """The masks matching `_scale_ptrs` (K ends are multiples of 32: blocks are wholly in or out)."""
    if MODE == 1:
        if MN_FIRST:
            return mn_mask[:, None] & k_mask[None, :]
        return k_mask[:, None] & mn_mask[None, :]
    if MODE == 2:
        return mn_mask
    ks = k0 // 32 + tl.arange(0, BK // 32)
    return mn_mask[:, None] & (ks[None, :] * 32 < k_end)


@triton.jit
def _k_loop(
    a_ptr, sa_ptr, b_ptr, sb_ptr, offs_m, offs_n, m_mask, n_mask, k_start, k_end,
    stride_am, stride_ak, stride_bk, stride_bn, stride_sam, stride_sak, stride_sbn, stride_sbk,
    MODE: tl.constexpr, DOT_F32: tl.constexpr, IEEE: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
):
    """The (BM, BN) fp32 tile a[offs_m, k_start:k_end] @ b[k_start:k_end, offs_n], BK at a time,
    with the MX scales MODE reads (both kernels' reduction; Triton inlines it)."""
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(k_start, k_end, BK):
        offs_k = (k0 + tl.arange(0, BK)).to(tl.int64)  # strided views: k * stride can pass 2^31
        k_mask = offs_k < k_end
        a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
        sa_ptrs = _scale_ptrs(sa_ptr, offs_m, offs_k, k0, stride_sam, stride_sak, True, MODE, BK)
        sb_ptrs = _scale_ptrs(sb_ptr, offs_n, offs_k, k0, stride_sbn, stride_sbk, False, MODE, BK)
        acc = _mma_step(
            acc, a_ptrs, b_ptrs, sa_ptrs, sb_ptrs,
            m_mask[:, None] & k_mask[None, :], k_mask[:, None] & n_mask[None, :],
            _scale_mask(m_mask, k_mask, k0, k_end, True, MODE, BK),
            _scale_mask(n_mask, k_mask, k0, k_end, False, MODE, BK),
            MODE, DOT_F32, IEEE,
        )
    return acc


@triton.jit
def _grouped_mm_kernel(
    a_ptr, sa_ptr, b_ptr, sb_ptr, out_ptr, offsets_ptr, tile_ends_ptr, E, N, K,
    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_om, stride_on,
    stride_sam, stride_sak, stride_sbe, stride_sbn, stride_sbk,
    MODE: tl.constexpr, DOT_F32: tl.constexpr, IEEE: tl.constexpr, BLOCK_E: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
):
    """M-grouped: out[rows of e] = a[rows of e] @ b[e].T. Program (pid_m, pid_n) computes row
    tile pid_m of the concatenated per-expert tiles (tile_ends_E: cumulative tile counts)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    es = tl.arange(0, BLOCK_E)
    tile_ends = tl.load(tile_ends_ptr + es, mask=es < E, other=2**30)
    e = tl.sum((tile_ends <= pid_m).to(tl.int32), axis=0)
    if e >= E:
        return  # the grid is an upper bound on the number of tiles
    first_tile = tl.load(tile_ends_ptr + e - 1, mask=e > 0, other=0)
    row_start = tl.load(offsets_ptr + e - 1, mask=e > 0, other=0) + (pid_m - first_tile) * BM
    row_end = tl.load(offsets_ptr + e)
    offs_m = (row_start + tl.arange(0, BM)).to(tl.int64)
    offs_n = (pid_n * BN + tl.arange(0, BN)).to(tl.int64)
    m_mask = offs_m < row_end
    n_mask = offs_n < N
    b_base = b_ptr + e.to(tl.int64) * stride_be
    sb_base = sb_ptr + e.to(tl.int64) * stride_sbe
    acc = _k_loop(a_ptr, sa_ptr, b_base, sb_base, offs_m, offs_n, m_mask, n_mask, 0, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_sam, stride_sak, stride_sbn, stride_sbk,
                  MODE, DOT_F32, IEEE, BM, BN, BK)
    out_ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])


@triton.jit
def _grouped_mm_wgrad_kernel(
    a_ptr, sa_ptr, b_ptr, sb_ptr, out_ptr, offsets_ptr, N1, N2,
    stride_am, stride_ak, stride_bn, stride_bk, stride_oe, stride_om, stride_on,
    stride_sam, stride_sak, stride_sbn, stride_sbk,
    MODE: tl.constexpr, DOT_F32: tl.constexpr, IEEE: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
):
    """K-grouped: out[e] = a[:, rows of e] @ b[:, rows of e].T, a (N1, M), b (N2, M). An expert
    without rows gets zeros. In MX modes each expert's rows start at a multiple of 32."""
    e = tl.program_id(0)
    offs_m = (tl.program_id(1) * BM + tl.arange(0, BM)).to(tl.int64)
    offs_n = (tl.program_id(2) * BN + tl.arange(0, BN)).to(tl.int64)
    m_mask = offs_m < N1
    n_mask = offs_n < N2
    k_start = tl.load(offsets_ptr + e - 1, mask=e > 0, other=0)
    k_end = tl.load(offsets_ptr + e)
    acc = _k_loop(a_ptr, sa_ptr, b_ptr, sb_ptr, offs_m, offs_n, m_mask, n_mask, k_start, k_end,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_sam, stride_sak, stride_sbn, stride_sbk,
                  MODE, DOT_F32, IEEE, BM, BN, BK)
    out_ptrs = out_ptr + e.to(tl.int64) * stride_oe + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])


def _config(mode: str) -> dict[str, int]:
    """Fixed tiles (no autotuning: compile time stays bounded on the device run)."""
    if interpreting():
        return dict(BM=32, BN=32, BK=32 if mode == "fp8" else 64)
    if mode == "hp":
        return dict(BM=128, BN=128, BK=64, num_warps=8, num_stages=3)
    return dict(BM=128, BN=128, BK=32 if mode == "fp8" else 128, num_warps=8, num_stages=3)


def default_mode(device: torch.device) -> str:
    return "scaled" if native_mx_dot(device) else "dequant"


def _launch_grouped(a, sa, b, sb, offsets_E, out_dtype, mode):
    M, K = a.shape
    E, N, _ = b.shape
    out = torch.empty(M, N, dtype=out_dtype, device=a.device)
    if M == 0 or N == 0:
        return out
    cfg = _config(mode)
    offsets = offsets_E.to(device=a.device, dtype=torch.int32)
    sizes = torch.diff(offsets, prepend=offsets.new_zeros(1))
    tile_ends = torch.cumsum((sizes + cfg["BM"] - 1) // cfg["BM"], 0).to(torch.int32)
    grid = (triton.cdiv(M, cfg["BM"]) + E, triton.cdiv(N, cfg["BN"]))
    sa = sa if sa is not None else a.new_empty(1, 1)
    sb = sb if sb is not None else b.new_empty(1, 1, 1)
    _grouped_mm_kernel[grid](
        a, sa, b, sb, out, offsets, tile_ends, E, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), b.stride(2), out.stride(0), out.stride(1),
        sa.stride(0), sa.stride(1), sb.stride(0), sb.stride(1), sb.stride(2),
        MODE=MODES[mode], DOT_F32=interpreting(), IEEE=a.dtype == torch.float32,
        BLOCK_E=triton.next_power_of_2(E), **cfg,
    )
    return out


def _launch_wgrad(a, sa, b, sb, offsets_E, out_dtype, mode):
    N1, _ = a.shape
    N2, _ = b.shape
    E = offsets_E.numel()
    out = torch.empty(E, N1, N2, dtype=out_dtype, device=a.device)
    cfg = _config(mode)
    sa = sa if sa is not None else a.new_empty(1, 1)
    sb = sb if sb is not None else b.new_empty(1, 1)
    grid = (E, triton.cdiv(N1, cfg["BM"]), triton.cdiv(N2, cfg["BN"]))
    _grouped_mm_wgrad_kernel[grid](
        a, sa, b, sb, out, offsets_E.to(device=a.device, dtype=torch.int32), N1, N2,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1), out.stride(2),
        sa.stride(0), sa.stride(1), sb.stride(0), sb.stride(1),
        MODE=MODES[mode], DOT_F32=interpreting(), IEEE=a.dtype == torch.float32, **cfg,
    )
    return out


def grouped_mm(a_MK: torch.Tensor, b_ENK: torch.Tensor, offsets_E: torch.Tensor,
               out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """High precision M-grouped: out[g_e] = a[g_e] @ b[e].T (any strides; fp32 accumulate).
    Rows past offsets[-1] are left unwritten."""
    return _launch_grouped(a_MK, None, b_ENK, None, offsets_E, out_dtype or a_MK.dtype, "hp")


def grouped_mm_wgrad(a_NM: torch.Tensor, b_PM: torch.Tensor, offsets_E: torch.Tensor,
                     out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """High precision K-grouped: out[e] = a[:, g_e] @ b[:, g_e].T -> (E, N, P)."""
    return _launch_wgrad(a_NM, None, b_PM, None, offsets_E, out_dtype or a_NM.dtype, "hp")


def _mx_check(a: MX, b: MX, what: str) -> None:
    if a.data.shape[-1] % BLOCK or a.data.shape[-1] != b.data.shape[-1]:
        raise ValueError(f"{what}: contraction dims must match and be multiples of {BLOCK}, got "
                         f"{tuple(a.data.shape)} and {tuple(b.data.shape)}")


def mx_grouped_mm(a: MX, b: MX, offsets_E: torch.Tensor, out_dtype: torch.dtype,
                  mode: str | None = None) -> torch.Tensor:
    """MXFP8 M-grouped: a.data (M, K), b.data (E, N, K), both quantised along K."""
    _mx_check(a, b, "mx_grouped_mm")
    mode = mode or default_mode(a.data.device)
    return _launch_grouped(a.data, a.scale, b.data, b.scale, offsets_E, out_dtype, mode)


def mx_grouped_mm_wgrad(a: MX, b: MX, offsets_E: torch.Tensor, out_dtype: torch.dtype,
                        mode: str | None = None) -> torch.Tensor:
    """MXFP8 K-grouped: a.data (N1, M), b.data (N2, M), both quantised along M (the column-wise
    copies), every expert's rows starting at a multiple of 32 -> (E, N1, N2)."""
    _mx_check(a, b, "mx_grouped_mm_wgrad")
    mode = mode or default_mode(a.data.device)
    return _launch_wgrad(a.data, a.scale, b.data, b.scale, offsets_E, out_dtype, mode)
