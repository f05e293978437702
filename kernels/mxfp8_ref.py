"""MXFP8 in plain PyTorch: the reference every kernel in kernels/triton/ is tested against, bit for
bit, and the emulated path the model runs on a CPU.

The format (OCP Microscaling v1.0, with NVIDIA's RCEIL scale rule; the recipe Cursor trains with):

- elements are E4M3 (`torch.float8_e4m3fn`: bias 7, max normal 448 = 0x7E, min normal 2^-6,
  min subnormal 2^-9, no Inf, NaN = 0x7F/0xFF);
- every 32 consecutive elements along the reduction dimension share one E8M0 scale (a biased
  power of two, byte b means 2^(b-127); byte 0 is 2^-127, byte 255 is NaN, there is no zero);
- value = e4m3 * 2^(b-127): 8.25 bits per element.

Quantising one block of 32 (what cuBLAS, TransformerEngine and torchao HEAD do, anchors doc 2.2):

    amax    = max |x_i|                        (in the input dtype, then fp32; NaN propagates)
    descale = fp32(amax * fp32(1/448))         (round-to-nearest-even, IEEE subnormals kept)
    b       = RCEIL(descale): the fp32 biased exponent, +1 when the mantissa is non-zero
              (for an fp32 subnormal only when descale > 2^-127); 255 when descale is not finite
    q_i     = e4m3(x_i * 2^(127-b))            (the product is exact; RNE, saturating to +-448)

NaN/Inf policy (torchao HEAD, "no saturation" E8M0): a block holding any NaN or Inf gets scale
255 and every element 0x7F (the canonical NaN; its sign is dropped). Finite inputs never
overflow: the scale is chosen so |x_i| * 2^(127-b) <= ~448, and anything a rounding pushes above
448 saturates to 0x7E/0xFE. Inputs may be fp32, bf16 or fp16; fp32 subnormals are kept.

Orientations. A matmul contracts along K, so each operand is quantised with blocks along its own
K: `quantize(x)` (row-wise, blocks along the last dim) and `quantize_colwise(x)` (blocks along
the second-to-last dim, returned transposed so the blocks are again contiguous). The backward
pass needs both orientations of activations, gradients and weights; each is quantised from the
high-precision tensor, never from the other FP8 copy (MX quantisation and transposition do not
commute).

Scale layout for Blackwell block-scaled MMAs: `to_blocked` (128x4 tiles of 512 bytes, each
interleaved 32x16), `from_blocked`, and the per-expert-group variant.

    from kernels.mxfp8_ref import quantize, quantize_colwise, dequantize
    q = quantize(x_MK)                  # q.data (M, K) float8_e4m3fn, q.scale (M, K/32) uint8
    qt = quantize_colwise(x_MK)         # qt.data (K, M), qt.scale (K, M/32)
    x_approx = dequantize(q)            # (M, K) fp32
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BLOCK = 32
"""Elements sharing one scale."""
E4M3_MAX = 448.0
E4M3_MAX_CODE = 0x7E
E4M3_NAN_CODE = 0x7F
E8M0_BIAS = 127
E8M0_NAN = 255
F32_INF_BITS = 0x7F800000
F32_NAN_BITS = 0x7FC00000
F32_TWO_POW_MINUS_127_BITS = 0x00400000  # E8M0 byte 0: an fp32 subnormal
RCP_448 = torch.tensor(1.0 / E4M3_MAX, dtype=torch.float32)
"""fp32(1/448): the descale is amax times this, as TransformerEngine and torchao compute it."""


@dataclass
class MX:
    """One MXFP8 tensor: `data` (..., n) float8_e4m3fn and `scale` (..., n / 32) uint8 (E8M0
    bytes), blocks along the last dimension."""

    data: torch.Tensor
    scale: torch.Tensor

    @property
    def scale_e8m0(self) -> torch.Tensor:
        return self.scale.view(torch.float8_e8m0fnu)


# ---- scalar encodings ----------------------------------------------------------------------------


def f32_bits(x: torch.Tensor) -> torch.Tensor:
    """The IEEE bits of x as fp32, int32 (the cast to fp32 is exact for bf16/fp16)."""
    return x.to(torch.float32).contiguous().view(torch.int32)


def e8m0_rceil(descale: torch.Tensor) -> torch.Tensor:
    """RCEIL of an fp32 descale (amax / 448): its biased exponent, rounded up when the value is
    not a power of two; subnormals round up only above 2^-127 (byte 0); non-finite -> 255."""
    bits = f32_bits(descale)
    exponent = (bits >> 23) & 0xFF
    mantissa = bits & 0x7FFFFF
    round_up = torch.where(exponent == 0, mantissa > 0x400000, mantissa != 0)
    byte = exponent + round_up.to(torch.int32)
    return torch.where(torch.isfinite(descale.float()), byte, E8M0_NAN).to(torch.uint8)


def e8m0_from_amax_bits(amax_bits: torch.Tensor) -> torch.Tensor:
    """The same scale byte computed from amax's fp32 bits with integer operations only (what the
    Triton quantiser does, so no float rounding mode, flush-to-zero or NaN-dropping max can
    change it). amax / 448 needs one more power of two exactly when amax's mantissa exceeds
    1.75 (0x600000); the single exception, amax bits 0x04600001, is the one fp32 value whose
    product with fp32(1/448) rounds down onto 2^-127 in the subnormal range. Checked against
    `e8m0_rceil(amax * fp32(1/448))` for all 2^31 non-negative fp32 patterns (the test covers
    the binades around the exception)."""
    exponent = amax_bits >> 23
    mantissa = amax_bits & 0x7FFFFF
    threshold = torch.where(exponent == 8, 0x600001, 0x600000)
    byte = (exponent - 8 + (mantissa > threshold).to(torch.int32)).clamp(min=0)
    return torch.where(amax_bits >= F32_INF_BITS, E8M0_NAN, byte).to(torch.uint8)


def e8m0_to_f32(scale: torch.Tensor) -> torch.Tensor:
    """2^(b-127) as fp32, built from bits: byte 0 is the subnormal 2^-127, byte 255 NaN."""
    b = scale.to(torch.int32)
    bits = torch.where(b == 0, F32_TWO_POW_MINUS_127_BITS, b << 23)
    bits = torch.where(b == E8M0_NAN, F32_NAN_BITS, bits)
    return bits.view(torch.float32)


def e8m0_reciprocal_f32(scale: torch.Tensor) -> torch.Tensor:
    """2^(127-b) as fp32 (exact: the reciprocal of a power of two): byte 254 gives the subnormal
    2^-127, byte 255 NaN (which turns its whole block into NaN)."""
    b = scale.to(torch.int32)
    bits = (254 - b) << 23
    bits = torch.where(b == 254, F32_TWO_POW_MINUS_127_BITS, bits)
    bits = torch.where(b == E8M0_NAN, F32_NAN_BITS, bits)
    return bits.view(torch.float32)


def f32_to_e4m3_bits(v: torch.Tensor) -> torch.Tensor:
    """fp32 -> E4M3 byte with integer operations: round-to-nearest-even, saturating (Inf and
    anything >= 464 give +-448), NaN -> 0x7F, fp32 subnormals -> +-0. The Triton kernels use the
    same steps (`kernels.triton.quant._e4m3_bits`); torch's own cast agrees on every finite
    input (tests/kernels/test_mxfp8_ref.py)."""
    bits = f32_bits(v).to(torch.int64)
    sign = (bits >> 24) & 0x80
    a = bits & 0x7FFFFFFF
    exponent = a >> 23
    # Normal E4M3 (|v| >= 2^-6, fp32 biased exponent >= 121): round the mantissa to 3 bits at
    # bit 20 (ties to even; a carry moves into the exponent), re-bias 127 -> 7, saturate.
    a_c = a.clamp(max=F32_INF_BITS)
    rounded = (a_c + 0x7FFFF + ((a_c >> 20) & 1)) >> 20
    normal = (rounded - (120 << 3)).clamp(max=E4M3_MAX_CODE)
    # Subnormal E4M3 (|v| < 2^-6): the code is RNE(|v| * 2^9) in [0, 8]; 8 is 0x08 = 2^-6.
    shift = (141 - exponent).clamp(1, 30)  # >= 26 gives 0 anyway; lanes with exponent >= 121 are unused
    m = (a & 0x7FFFFF) | 0x800000
    q = m >> shift
    rem = m & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    sub = q + ((rem > half) | ((rem == half) & ((q & 1) == 1))).to(torch.int64)
    code = torch.where(exponent >= 121, normal, sub) | sign
    return torch.where(a > F32_INF_BITS, E4M3_NAN_CODE, code).to(torch.uint8)


def cast_e4m3(v: torch.Tensor) -> torch.Tensor:
    """fp32 -> E4M3 with torch's cast: clamp first (eager casts before torch 2.13 do not
    saturate), NaN canonicalised to 0x7F. Equal to `f32_to_e4m3_bits` (tested)."""
    q = v.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    return torch.where(torch.isnan(v), E4M3_NAN_CODE, q).to(torch.uint8)


# ---- quantisation --------------------------------------------------------------------------------


def _check(x: torch.Tensor, dim_size: int, what: str) -> None:
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"MXFP8 quantises fp32, bf16 or fp16 tensors, got {x.dtype}")
    if dim_size % BLOCK:
        raise ValueError(f"MXFP8 needs the {what} ({dim_size}) to be a multiple of {BLOCK}")


def quantize(x: torch.Tensor) -> MX:
    """Row-wise MXFP8: blocks of 32 along the last dimension. (..., n) -> MX((..., n), (..., n/32))."""
    _check(x, x.shape[-1], "last dimension")
    blocks = x.reshape(*x.shape[:-1], x.shape[-1] // BLOCK, BLOCK)
    amax = blocks.abs().amax(-1, keepdim=True).to(torch.float32)  # NaN propagates
    scale = e8m0_rceil(amax * RCP_448)
    scaled = blocks.to(torch.float32) * e8m0_reciprocal_f32(scale)  # exact (power of two)
    data = cast_e4m3(scaled).view(torch.float8_e4m3fn).reshape(x.shape)
    return MX(data, scale.squeeze(-1))


def quantize_colwise(x: torch.Tensor) -> MX:
    """Column-wise MXFP8: blocks of 32 along the second-to-last dimension, returned transposed:
    (..., m, n) -> MX((..., n, m), (..., n, m/32)). The same as `quantize` of the transpose."""
    if x.dim() < 2:
        raise ValueError(f"column-wise quantisation needs a matrix, got shape {tuple(x.shape)}")
    _check(x, x.shape[-2], "second-to-last dimension")
    return quantize(x.transpose(-1, -2).contiguous())


def dequantize(q: MX, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """MX -> dtype, computed in fp32 (float64 when asked for). Exact (an E4M3 value times a power
    of two) except at fp32's top: an input within 2^-5 of fp32's max rounds to 256 * 2^120 =
    2^128, which decodes to Inf in fp32 (finite in float64)."""
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    data = q.data.view(torch.float8_e4m3fn).to(compute)
    blocks = data.reshape(*data.shape[:-1], data.shape[-1] // BLOCK, BLOCK)
    out = blocks * e8m0_to_f32(q.scale).to(compute).unsqueeze(-1)
    return out.reshape(data.shape).to(dtype)


# ---- the Blackwell scale layout ------------------------------------------------------------------


def blocked_offset(r: torch.Tensor, c: torch.Tensor, num_cols: int) -> torch.Tensor:
    """Byte offset of scale (r, c) of an (R, C) scale matrix in the blocked layout: 128x4 tiles,
    row-block-major, each tile 512 bytes interleaved as 32 rows of 16 (rows r, r+32, r+64, r+96
    of the tile side by side, 4 scale columns each)."""
    tiles_per_row = (num_cols + 3) // 4
    tile = (r // 128) * tiles_per_row + c // 4
    return tile * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4


def blocked_size(num_rows: int, num_cols: int) -> int:
    return ((num_rows + 127) // 128) * 128 * ((num_cols + 3) // 4) * 4


def to_blocked(scale_RC: torch.Tensor) -> torch.Tensor:
    """(R, C) scales -> the flat blocked layout (padded to multiples of (128, 4) with zeros), as
    cuBLAS and `tcgen05.mma ... block_scale` read them (torch's SWIZZLE_32_4_4)."""
    R, C = scale_RC.shape
    Rp, Cp = (R + 127) // 128 * 128, (C + 3) // 4 * 4
    padded = scale_RC.new_zeros(Rp, Cp)
    padded[:R, :C] = scale_RC
    # (row tile, 4 row quarters, 32 rows, col tile, 4 cols) -> (row tile, col tile, 32, 4, 4)
    tiles = padded.view(Rp // 128, 4, 32, Cp // 4, 4).permute(0, 3, 2, 1, 4)
    return tiles.reshape(-1)


def from_blocked(blocked: torch.Tensor, num_rows: int, num_cols: int) -> torch.Tensor:
    """The inverse of `to_blocked`: flat blocked bytes -> (R, C) scales."""
    Rp, Cp = (num_rows + 127) // 128 * 128, (num_cols + 3) // 4 * 4
    tiles = blocked.view(Rp // 128, Cp // 4, 32, 4, 4).permute(0, 3, 2, 1, 4)
    return tiles.reshape(Rp, Cp)[:num_rows, :num_cols]


def to_blocked_grouped(scale_MC: torch.Tensor, offsets_E: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-expert-group blocked layout for M-grouped GEMMs: each group of rows [offsets[e-1],
    offsets[e]) is padded to a multiple of 128 rows and blocked on its own, the groups laid end to
    end. Returns (flat bytes, start_E: each group's first byte)."""
    chunks, starts, start, at = [], [], 0, 0
    for end in offsets_E.tolist():
        starts.append(at)
        if end > start:
            chunks.append(to_blocked(scale_MC[start:end]))
            at += chunks[-1].numel()
        start = end
    flat = torch.cat(chunks) if chunks else scale_MC.new_zeros(0)
    return flat, torch.tensor(starts, dtype=torch.int64)
