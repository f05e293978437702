"""MXFP8 quantisation in Triton: one read of the high-precision tensor writes both orientations
(row-wise: blocks of 32 along the last dim; column-wise: blocks of 32 along the rows, stored
transposed), bit-identical to kernels/mxfp8_ref.py (`quantize`, `quantize_colwise`).

Numerics are integer bit operations, never float-to-fp8 casts (the interpreter's cast rounds ties
away and drops carries; GPU casts differ by architecture):
- amax is the max of |x|'s fp32 bits as int32 (monotone for non-negative floats; NaN > Inf >
  finite, so a NaN can't be dropped the way PTX `max.f32` drops it);
- the E8M0 byte comes from amax's bits (`_e8m0_from_amax_bits`, the integer form of RCEIL that
  equals `e8m0_rceil(amax * fp32(1/448))` for every fp32 amax);
- each element is multiplied by 2^(127-b) (exact) and rounded to E4M3 with an integer RNE.

Layout: x (R, C), or (B, G, C) for stacked weights (then R = B * G and the column-wise blocks stay
inside each of the B matrices). Outputs: row data (R, C) + scales (R, C/32), or the scales in the
Blackwell blocked layout (`swizzle=True`, as `to_blocked`); column data (B, C, G) + scales
(B, C, G/32).

    from kernels.triton.quant import quantize_mxfp8
    row, col = quantize_mxfp8(x_MK)            # MX((M, K), (M, K/32)), MX((K, M), (K, M/32))

Tile: BR x BC elements per program seen as (BR/32, 32, BC/32, 32), so row-wise amax is a max over
axis 3 and column-wise over axis 1, with no reshape.
"""

from __future__ import annotations

import torch

import triton
import triton.language as tl
from kernels.mxfp8_ref import BLOCK, MX, blocked_size
from kernels.triton import interpreting


@triton.jit
def _e8m0_from_amax_bits(amax_bits):
    """RCEIL scale byte from |amax|'s fp32 bits (int32), as kernels.mxfp8_ref.e8m0_from_amax_bits."""
    exponent = amax_bits >> 23
    mantissa = amax_bits & 0x7FFFFF
    threshold = tl.where(exponent == 8, 0x600001, 0x600000)
    byte = tl.maximum(exponent - 8 + (mantissa > threshold).to(tl.int32), 0)
    return tl.where(amax_bits >= 0x7F800000, 255, byte)


@triton.jit
def _e8m0_reciprocal(byte):
    """2^(127-b) as fp32 from bits; b=254 -> 2^-127 (subnormal), b=255 -> NaN."""
    bits = (254 - byte) << 23
    bits = tl.where(byte == 254, 0x00400000, bits)
    bits = tl.where(byte == 255, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def e8m0_to_f32(byte):
    """2^(b-127) as fp32 from bits; b=0 -> 2^-127 (subnormal), b=255 -> NaN."""
    byte = byte.to(tl.int32)
    bits = tl.where(byte == 0, 0x00400000, byte << 23)
    bits = tl.where(byte == 255, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _e4m3_bits(v):
    """fp32 -> E4M3 byte (int32 0..255): RNE, saturating to 0x7E, NaN -> 0x7F, as
    kernels.mxfp8_ref.f32_to_e4m3_bits (int32 arithmetic, nothing overflows)."""
    bits = v.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    a = bits & 0x7FFFFFFF
    exponent = a >> 23
    a_c = tl.minimum(a, 0x7F800000)
    rounded = (a_c + 0x7FFFF + ((a_c >> 20) & 1)) >> 20
    normal = tl.minimum(rounded - (120 << 3), 0x7E)
    shift = tl.minimum(tl.maximum(141 - exponent, 1), 30)
    m = (a & 0x7FFFFF) | 0x800000
    q = m >> shift
    rem = m & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    sub = q + ((rem > half) | ((rem == half) & ((q & 1) == 1))).to(tl.int32)
    code = tl.where(exponent >= 121, normal, sub) | sign
    return tl.where(a > 0x7F800000, 0x7F, code)


@triton.jit
def load_f32(ptrs, mask, BF16_BITS: tl.constexpr):
    """Loads as fp32. bf16 comes in as int16 bits and is widened by a shift: exact for
    subnormals too (the interpreter's bf16 -> fp32 conversion flushes them to zero)."""
    if BF16_BITS:
        bits = tl.load(ptrs, mask=mask, other=0).to(tl.int32) << 16
        return bits.to(tl.float32, bitcast=True)
    return tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _blocked_offset(r, c, num_cols):
    """kernels.mxfp8_ref.blocked_offset: 128x4 tiles of 512 bytes, interleaved 32x16."""
    tile = (r // 128) * ((num_cols + 3) // 4) + c // 4
    return tile * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4


@triton.jit
def _quantize_kernel(
    x_ptr, row_data_ptr, row_scale_ptr, col_data_ptr, col_scale_ptr,
    R, C, G, stride_xr, stride_xc,
    ROW: tl.constexpr, COL: tl.constexpr, SWIZZLE: tl.constexpr, BF16_BITS: tl.constexpr,
    BR: tl.constexpr, BC: tl.constexpr,
):
    pid_r = tl.program_id(0).to(tl.int64)
    pid_c = tl.program_id(1).to(tl.int64)
    rb = tl.arange(0, BR // 32)
    ri = tl.arange(0, 32)
    cb = tl.arange(0, BC // 32)
    ci = tl.arange(0, 32)
    row = pid_r * BR + rb[:, None, None, None] * 32 + ri[None, :, None, None]  # (BR/32, 32, 1, 1)
    col = pid_c * BC + cb[None, None, :, None] * 32 + ci[None, None, None, :]  # (1, 1, BC/32, 32)
    mask = (row < R) & (col < C)  # R, C are multiples of 32: blocks are wholly in or out
    x = load_f32(x_ptr + row * stride_xr + col * stride_xc, mask, BF16_BITS)
    abits = x.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    if ROW:
        scale = _e8m0_from_amax_bits(tl.max(abits, axis=3))  # (BR/32, 32, BC/32)
        q = _e4m3_bits(x * _e8m0_reciprocal(scale)[:, :, :, None])
        tl.store(row_data_ptr + row * C + col, q.to(tl.uint8), mask=mask)
        s_row = pid_r * BR + rb[:, None, None] * 32 + ri[None, :, None]  # (BR/32, 32, 1)
        s_col = pid_c * (BC // 32) + cb[None, None, :]  # (1, 1, BC/32)
        if SWIZZLE:
            s_off = _blocked_offset(s_row, s_col, C // 32)
        else:
            s_off = s_row * (C // 32) + s_col
        tl.store(row_scale_ptr + s_off, scale.to(tl.uint8), mask=(s_row < R) & (s_col < C // 32))
    if COL:
        scale = _e8m0_from_amax_bits(tl.max(abits, axis=1))  # (BR/32, BC/32, 32)
        q = _e4m3_bits(x * _e8m0_reciprocal(scale)[:, None, :, :])
        # element (r, c) goes to col_data[r // G, c, r % G]; permuting so the fastest axis runs
        # along r keeps the transposed stores coalesced on a GPU.
        off = (row // G) * (C * G) + col * G + row % G
        tl.store(col_data_ptr + tl.permute(off, (2, 3, 0, 1)), tl.permute(q.to(tl.uint8), (2, 3, 0, 1)),
                 mask=tl.permute(mask, (2, 3, 0, 1)))
        r0 = pid_r * BR + rb[:, None, None] * 32  # (BR/32, 1, 1): first row of each block
        c = pid_c * BC + cb[None, :, None] * 32 + ci[None, None, :]  # (1, BC/32, 32)
        s_off = (r0 // G) * (C * (G // 32)) + c * (G // 32) + (r0 % G) // 32
        tl.store(col_scale_ptr + s_off, scale.to(tl.uint8), mask=(r0 < R) & (c < C))


def _tile() -> tuple[int, int]:
    return (32, 64) if interpreting() else (64, 128)


def quantize_mxfp8(
    x: torch.Tensor, *, rowwise: bool = True, colwise: bool = True, swizzle: bool = False,
) -> tuple[MX | None, MX | None]:
    """x (R, C) or (B, G, C) in fp32/bf16/fp16 -> (row-wise MX or None, column-wise MX or None).

    Row-wise: data like x, scales (..., C/32), or flat in the blocked layout when `swizzle` (for
    a 2D x). Column-wise: data (C, R) or (B, C, G), scales (C, R/32) or (B, C, G/32)."""
    if x.dim() not in (2, 3):
        raise ValueError(f"quantize_mxfp8 takes a matrix or a stack of matrices, got shape {tuple(x.shape)}")
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"MXFP8 quantises fp32, bf16 or fp16 tensors, got {x.dtype}")
    if swizzle and x.dim() != 2:
        raise ValueError("swizzled (blocked) scales are written for 2D inputs only")
    G, C = x.shape[-2], x.shape[-1]
    x2 = x.reshape(-1, C)
    R = x2.shape[0]
    bf16_bits = x.dtype == torch.bfloat16
    if C % BLOCK or (colwise and G % BLOCK):
        raise ValueError(f"MXFP8 needs the quantised dims to be multiples of {BLOCK}, got shape {tuple(x.shape)}")
    lead = x.shape[:-2]
    u8 = dict(dtype=torch.uint8, device=x.device)
    row_data = torch.empty(R, C, **u8) if rowwise else None
    if rowwise and swizzle:
        row_scale = torch.zeros(blocked_size(R, C // BLOCK), **u8)
    else:
        row_scale = torch.empty(R, C // BLOCK, **u8) if rowwise else None
    col_data = torch.empty(*lead, C, G, **u8) if colwise else None
    col_scale = torch.empty(*lead, C, G // BLOCK, **u8) if colwise else None
    BR, BC = _tile()
    dummy = torch.empty(1, **u8)
    if R and C:
        _quantize_kernel[(triton.cdiv(R, BR), triton.cdiv(C, BC))](
            x2.view(torch.int16) if bf16_bits else x2, row_data if rowwise else dummy, row_scale if rowwise else dummy,
            col_data if colwise else dummy, col_scale if colwise else dummy,
            R, C, G, x2.stride(0), x2.stride(1),
            ROW=rowwise, COL=colwise, SWIZZLE=swizzle, BF16_BITS=bf16_bits, BR=BR, BC=BC,
        )
    row = None
    if rowwise:
        scale = row_scale if swizzle else row_scale.view(*x.shape[:-1], C // BLOCK)
        row = MX(row_data.view(x.shape).view(torch.float8_e4m3fn), scale)
    col = MX(col_data.view(torch.float8_e4m3fn), col_scale) if colwise else None
    return row, col
