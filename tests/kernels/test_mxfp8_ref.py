"""The PyTorch MXFP8 reference: golden vectors (torchao's bitwise contract and hand-derived
blocks), the integer encodings against torch's cast and the fp32 RCEIL formula, properties
against an independent float64 oracle (hypothesis: random, tiny, huge, subnormal, Inf, NaN), and
the Blackwell scale layout.

Run: .venv/bin/python -m pytest -q tests/kernels/test_mxfp8_ref.py
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mxfp8_golden import E8M0_RCEIL_CASES, FP16_CASES, HAND_CASES, SEMANTIC_CASES, build

from kernels.mxfp8_ref import (
    RCP_448,
    blocked_offset,
    cast_e4m3,
    dequantize,
    e8m0_from_amax_bits,
    e8m0_rceil,
    f32_to_e4m3_bits,
    from_blocked,
    quantize,
    quantize_colwise,
    to_blocked,
    to_blocked_grouped,
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_cases(names, data, scale, expected_data, expected_scale):
    data = data.view(torch.uint8)
    for i, name in enumerate(names):
        assert int(scale[i, 0]) == int(expected_scale[i, 0]), f"scale of {name}: {int(scale[i, 0])}"
        assert torch.equal(data[i], expected_data[i]), f"data of {name}: {[hex(b) for b in data[i].tolist()]}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torchao_semantic_cases(dtype):
    names, x, data, scales = build(SEMANTIC_CASES + HAND_CASES, dtype)
    q = quantize(x)
    assert_cases(names, q.data, q.scale, data, scales)
    qt = quantize_colwise(x.T.contiguous())  # the same blocks, column-wise
    assert_cases(names, qt.data, qt.scale, data, scales)


def test_hand_derived_fp16_cases():
    names, x, data, scales = build(FP16_CASES + HAND_CASES, torch.float16)
    q = quantize(x)
    assert_cases(names, q.data, q.scale, data, scales)


def test_e8m0_rceil_cases():
    bits = torch.tensor([b for b, _ in E8M0_RCEIL_CASES], dtype=torch.int64).to(torch.int32)
    expected = torch.tensor([s for _, s in E8M0_RCEIL_CASES], dtype=torch.uint8)
    assert torch.equal(e8m0_rceil(bits.view(torch.float32)), expected)


def test_integer_scale_rule_equals_the_fp32_descale():
    """e8m0_from_amax_bits (the Triton kernels' rule) == e8m0_rceil(amax * fp32(1/448)):
    exhaustively over the binades around its one exception (fp32 exponent field 8) and at
    random elsewhere (an offline run checked all 2^31 non-negative patterns)."""
    binades = torch.cat([torch.arange(1 << 23, dtype=torch.int64) | (e << 23) for e in (0, 7, 8, 9, 128)])
    rand = torch.randint(0, 0x7F800000, (1 << 20,), generator=torch.Generator().manual_seed(0))
    special = torch.tensor([0x7F800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0x7F7FFFFF, 0x04600001])
    bits = torch.cat([binades, rand, special]).to(torch.int32)
    amax = bits.view(torch.float32)
    assert torch.equal(e8m0_from_amax_bits(bits), e8m0_rceil(amax * RCP_448))


def _e4m3_boundaries() -> torch.Tensor:
    """Every positive E4M3 value, the midpoints between neighbours, and one fp32 ulp either side."""
    values = torch.arange(0, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    mids = (values[1:] + values[:-1]) / 2
    points = torch.cat([values, mids, torch.tensor([464.0, 480.0, 512.0, 1e30])])
    bits = points.view(torch.int32)
    near = torch.cat([points, (bits + 1).view(torch.float32), (bits - 1).clamp(min=0).view(torch.float32)])
    return torch.cat([near, -near])


def test_integer_e4m3_rounding_equals_torch_cast():
    rand_bits = torch.randint(-(2**31), 2**31 - 1, (1 << 20,), generator=torch.Generator().manual_seed(1))
    v = torch.cat([_e4m3_boundaries(), rand_bits.to(torch.int32).view(torch.float32),
                   torch.tensor([math.inf, -math.inf, math.nan, 0.0, -0.0])])
    assert torch.equal(f32_to_e4m3_bits(v), cast_e4m3(v))


# ---- properties against a float64 oracle ---------------------------------------------------------

E4M3_POSITIVE = torch.arange(0, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).double().tolist()


def _oracle_scale(block: list[float]) -> int:
    """RCEIL from first principles: the fp32 product amax * fp32(1/448), then the smallest power
    of two >= it (frexp is exact), clamped to byte 0; 255 for non-finite blocks."""
    if any(not math.isfinite(v) for v in block):
        return 255
    amax = max(abs(v) for v in block)
    descale = (torch.tensor(amax, dtype=torch.float32) * RCP_448).item()
    if descale == 0:
        return 0
    mantissa, exponent = math.frexp(descale)  # descale = mantissa * 2^exponent, mantissa in [0.5, 1)
    ceil_log2 = exponent - 1 if mantissa == 0.5 else exponent
    return max(ceil_log2 + 127, 0)


def _oracle_e4m3(value: float) -> int:
    """Nearest E4M3 (ties to the even code), saturating at 448."""
    magnitude = abs(value)
    best = min(range(len(E4M3_POSITIVE)), key=lambda c: (abs(E4M3_POSITIVE[c] - magnitude), c % 2))
    if magnitude >= 448:
        best = 0x7E
    return best | (0x80 if math.copysign(1.0, value) < 0 else 0)


def _finite_blocks(draw_float):
    return st.lists(draw_float, min_size=32, max_size=32)


@st.composite
def blocks(draw):
    """One block of 32 fp32 values: ordinary, tiny, huge, subnormal, or with Inf/NaN."""
    kind = draw(st.sampled_from(["any", "scaled", "subnormal", "special"]))
    if kind == "any":
        return draw(_finite_blocks(st.floats(width=32, allow_nan=False, allow_infinity=False)))
    if kind == "subnormal":
        tiny = st.floats(min_value=-(2.0**-126), max_value=2.0**-126, width=32, allow_subnormal=True)
        return draw(_finite_blocks(tiny))
    exponent = draw(st.integers(-149, 127))
    unit = st.floats(min_value=-2.0, max_value=2.0, width=32)
    values = [float(torch.tensor(v * 2.0**exponent, dtype=torch.float32)) for v in draw(_finite_blocks(unit))]
    if kind == "special":
        values[draw(st.integers(0, 31))] = draw(st.sampled_from([math.inf, -math.inf, math.nan]))
    return values


@SETTINGS
@given(st.lists(blocks(), min_size=1, max_size=3), st.sampled_from([torch.float32, torch.bfloat16]))
def test_quantize_matches_float64_oracle(rows, dtype):
    x = torch.tensor(rows, dtype=torch.float32).to(dtype)
    q = quantize(x)
    for i, row in enumerate(x.double().tolist()):
        scale = _oracle_scale(row)
        assert int(q.scale[i, 0]) == scale, (row, scale)
        data = q.data[i].view(torch.uint8).tolist()
        if scale == 255:
            assert data == [0x7F] * 32
        else:
            assert data == [_oracle_e4m3(v * 2.0 ** (127 - scale)) for v in row], row


@SETTINGS
@given(st.lists(blocks(), min_size=1, max_size=4))
def test_dequantize_error_is_bounded(rows):
    """|x - dq(q(x))| <= 2^-4 |x| (half an E4M3 ulp, relative) or, below E4M3's normal range,
    half the smallest subnormal step times the scale. NaN blocks decode to NaN. (Decoded in
    float64: near fp32's max a value can round up to 2^128.)"""
    x = torch.tensor(rows, dtype=torch.float32)
    q = quantize(x)
    back = dequantize(q, torch.float64)
    scale = torch.exp2(q.scale.double() - 127).repeat_interleave(32, dim=-1)
    finite = q.scale.repeat_interleave(32, dim=-1) != 255
    bound = torch.maximum(x.double().abs() * 2.0**-4, scale * 2.0**-10)
    assert ((back - x.double()).abs() <= bound)[finite].all()
    assert back[~finite].isnan().all()


@SETTINGS
@given(st.integers(1, 3), st.integers(1, 3), st.sampled_from([torch.float32, torch.bfloat16]))
def test_colwise_is_rowwise_of_the_transpose(m_blocks, n_blocks, dtype):
    x = (torch.randn(32 * m_blocks, 32 * n_blocks) * 1e3).to(dtype)
    a, b = quantize_colwise(x), quantize(x.T.contiguous())
    assert torch.equal(a.data.view(torch.uint8), b.data.view(torch.uint8)) and torch.equal(a.scale, b.scale)


def test_orientations_do_not_commute():
    """Why the backward pass quantises both orientations from the high-precision tensor: the
    transpose of the row-wise copy is not the column-wise copy."""
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(3)) * torch.logspace(-3, 3, 64)
    row, col = quantize(x), quantize_colwise(x)
    assert not torch.equal(dequantize(row).T, dequantize(col))


def test_quantize_rejects_bad_shapes_and_dtypes():
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize(torch.zeros(4, 48))
    with pytest.raises(ValueError, match="fp32, bf16 or fp16"):
        quantize(torch.zeros(4, 32, dtype=torch.float64))


# ---- scale layout --------------------------------------------------------------------------------


@pytest.mark.parametrize(("rows", "cols"), [(128, 4), (200, 7), (1, 1), (300, 40)])
def test_blocked_layout_offsets_and_round_trip(rows, cols):
    scale = torch.randint(0, 256, (rows, cols), dtype=torch.uint8, generator=torch.Generator().manual_seed(rows))
    blocked = to_blocked(scale)
    assert blocked.numel() == (rows + 127) // 128 * 128 * ((cols + 3) // 4 * 4)
    r, c = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    assert torch.equal(blocked[blocked_offset(r, c, cols)], scale)
    assert torch.equal(from_blocked(blocked, rows, cols), scale)


def test_blocked_tile_interleaves_rows_by_32():
    """TransformerEngine's description: a tile's 128 rows appear in the order 0, 32, 64, 96, 1,
    33, ... with the 4 scales of a row together."""
    rows = torch.arange(128, dtype=torch.uint8).view(128, 1).expand(128, 4).contiguous()
    order = to_blocked(rows).view(-1, 4)[:, 0].tolist()
    assert order[:8] == [0, 32, 64, 96, 1, 33, 65, 97] and order[-1] == 127


def test_grouped_blocked_layout_pads_each_group():
    scale = torch.randint(0, 256, (300, 3), dtype=torch.uint8)
    flat, starts = to_blocked_grouped(scale, torch.tensor([100, 100, 300]))
    assert starts.tolist() == [0, 512, 512]
    assert torch.equal(flat[:512], to_blocked(scale[:100]))
    assert torch.equal(flat[512:], to_blocked(scale[100:]))
