"""Golden MXFP8 vectors (RCEIL scales, E4M3 elements), as data.

Most are transcribed from torchao's bitwise contract, `torchao/testing/_mxfp8_test_utils.py`
(pytorch/ao, `make_mxfp8_semantic_cases` with scaling mode "rceil", and
`make_f32_to_e8m0_rceil_cases`; added by PR #4725, read at commit 5d73a0c1): 18 named 1x32
blocks for fp32 and bf16 inputs with the expected scale byte and E4M3 bytes. The fp16 blocks and
the RNE-tie blocks at the end are derived by hand from the spec (not from torchao); the
derivation is in each comment.

A block is `fill` everywhere and `first` at element 0 (None: fill too). Values are floats or
names: "tiny" (the dtype's smallest normal), "max"/"-max" (its largest finite), "sub"/"-sub"
(its smallest subnormal, bit pattern 1), or "0x..." (fp32 bits, then cast to the dtype).
Expected: (scale byte, data byte of the fill, data byte of element 0 or None), either for every
dtype or per dtype.
"""

from __future__ import annotations

import torch

INF, NAN = float("inf"), float("nan")

SEMANTIC_CASES = [
    # name, fill, first, expected
    ("zero", 0.0, None, (0, 0x00, None)),  # scale 2^-127 (byte 0: E8M0 has no zero)
    ("smallest_normal", "tiny", None, (0, 0x40, None)),  # 2^-126 / 2^-127 = 2.0
    ("mixed_inf", 1.0, INF, (255, 0x7F, None)),  # Inf makes the block NaN (no saturation)
    ("mixed_nan", 1.0, NAN, (255, 0x7F, None)),
    ("positive_fp8_max", 448.0, None, (127, 0x7E, None)),
    ("negative_fp8_max", -448.0, None, (127, 0xFE, None)),
    ("positive_dtype_max", "max", None, (247, 0x78, None)),  # ~2^128/448 rounds up to 2^120; 256
    ("negative_dtype_max", "-max", None, (247, 0xF8, None)),
    ("positive_smallest_subnormal", "sub", None,
     {torch.float32: (0, 0x00, None), torch.bfloat16: (0, 0x08, None)}),  # 2^-149 -> 0; 2^-133 -> 2^-6
    ("negative_smallest_subnormal", "-sub", None,
     {torch.float32: (0, 0x80, None), torch.bfloat16: (0, 0x88, None)}),
    ("mixed_positive_underflow", 1.0, "sub", (119, 0x78, 0x00)),  # scale 2^-8, 1.0 -> 256
    ("mixed_negative_underflow", 1.0, "-sub", (119, 0x78, 0x80)),  # -0 keeps its sign
    ("mixed_saturation_and_underflow", 1.0, "max", (247, 0x00, 0x78)),
    ("rceil_premature_bf16_lowers_scale", "0x40600001", None,  # 3.5 + 1 ulp; bf16 makes it 3.5
     {torch.float32: (121, 0x76, None), torch.bfloat16: (120, 0x7E, None)}),
    ("floor_premature_bf16_raises_scale", "0x43FFFFFF", None, (128, 0x78, None)),
    ("all_nan", NAN, None, (255, 0x7F, None)),
    ("positive_satfinite", 480.0, None, (128, 0x77, None)),  # 480/448 rounds up to 2; 240
    ("negative_satfinite", -480.0, None, (128, 0xF7, None)),
]

HAND_CASES = [
    # Derived by hand (every input dtype): scale 1.0 from the 448 fill, element 0 at an E4M3 tie.
    # 272 = 256 + 16 lies halfway between 256 (0x78, even) and 288 (0x79): RNE gives 0x78.
    ("rne_tie_to_even_down", 448.0, 272.0, (127, 0x7E, 0x78)),
    # 304 lies halfway between 288 (0x79, odd) and 320 (0x7A, even): 0x7A.
    ("rne_tie_to_even_up", 448.0, 304.0, (127, 0x7E, 0x7A)),
    # 2^-10 is half the smallest E4M3 subnormal 2^-9: the tie goes to 0.
    ("subnormal_tie_to_zero", 448.0, 2.0**-10, (127, 0x7E, 0x00)),
    # 3 * 2^-10 = 1.5 * 2^-9: halfway between codes 1 and 2, to 2 (even).
    ("subnormal_tie_to_even", 448.0, 3 * 2.0**-10, (127, 0x7E, 0x02)),
    # 464 = 448 + 16 is halfway between 448 (0x7E) and 480 (0x7F is NaN, not a number): amax 464
    # gives descale 464/448 > 1, rounded up to scale 2 (byte 128), 232 -> 224 or 240: tie, 224
    # (0x76, even mantissa 100).
    ("amax_above_fp8_max", 464.0, None, (128, 0x76, None)),
]

FP16_CASES = [
    # Derived by hand for fp16 inputs. 65504 / 448 = 146.2 -> 2^8 (byte 135); 65504 / 256 =
    # 255.875, nearest E4M3 is 256 (0x78).
    ("fp16_max", 65504.0, None, (135, 0x78, None)),
    # 2^-24 / 448 = 2^-32.8 -> 2^-32 (byte 95); 2^-24 / 2^-32 = 256 (0x78).
    ("fp16_smallest_subnormal", 2.0**-24, None, (95, 0x78, None)),
    # Scale 2^-8 from 1.0; 2^-24 * 2^8 = 2^-16 is below half of 2^-9: +0.
    ("fp16_mixed_underflow", 1.0, 2.0**-24, (119, 0x78, 0x00)),
]

E8M0_RCEIL_CASES = [
    # fp32 bits of the descale (amax / 448) -> the E8M0 byte (torchao make_f32_to_e8m0_rceil_cases)
    (0x00000000, 0),  # zero
    (0x00000001, 0),  # smallest fp32 subnormal
    (0x00400000, 0),  # 2^-127, exactly byte 0
    (0x00400001, 1),  # just above 2^-127
    (0x007FFFFF, 1),  # largest fp32 subnormal
    (0x00800000, 1),  # 2^-126
    (0x1F800000, 63),  # 2^-64
    (0x1F800001, 64),
    (0x3F7FFFFF, 127),  # just below 1.0
    (0x3F800000, 127),  # 1.0
    (0x3F800001, 128),
    (0x5F800000, 191),  # 2^64
    (0x5F800001, 192),
    (0x7F000000, 254),  # 2^127
    (0x7F000001, 255),  # just above 2^127: overflows to NaN
    (0x7F7FFFFF, 255),  # largest finite fp32
    (0x7F800000, 255),  # Inf
    (0x7FC00000, 255),  # NaN
]


def _value(spec, dtype: torch.dtype) -> torch.Tensor:
    if isinstance(spec, str) and spec.startswith("0x"):
        return torch.tensor(int(spec, 16), dtype=torch.int64).to(torch.int32).view(torch.float32).to(dtype)
    if spec == "tiny":
        return torch.tensor(torch.finfo(dtype).tiny, dtype=dtype)
    if spec in ("max", "-max"):
        return torch.tensor(torch.finfo(dtype).max * (-1 if spec[0] == "-" else 1), dtype=dtype)
    if spec in ("sub", "-sub"):
        bits = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[dtype]
        one = torch.tensor(1, dtype=bits).view(dtype)
        return -one if spec[0] == "-" else one
    return torch.tensor(spec, dtype=dtype)


def build(cases, dtype: torch.dtype) -> tuple[list[str], torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> (names, inputs (n, 32) in dtype, expected data bytes (n, 32), expected scales (n, 1))."""
    names, rows, data, scales = [], [], [], []
    for name, fill, first, expected in cases:
        scale, byte, first_byte = expected[dtype] if isinstance(expected, dict) else expected
        row = _value(fill, dtype).repeat(32)
        data_row = torch.full((32,), byte, dtype=torch.uint8)
        if first is not None:
            row[0] = _value(first, dtype)
        if first_byte is not None:
            data_row[0] = first_byte
        names.append(name)
        rows.append(row)
        data.append(data_row)
        scales.append(scale)
    return names, torch.stack(rows), torch.stack(data), torch.tensor(scales, dtype=torch.uint8).view(-1, 1)
