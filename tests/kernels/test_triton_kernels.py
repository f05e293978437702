"""Every Triton kernel against its PyTorch reference: quantisation bit for bit (both
orientations, stacked weights, blocked scales, golden blocks, hypothesis inputs), permute and
unpermute exactly / to fp32 rounding, the grouped GEMMs in high precision and in the three MXFP8
modes with stated tolerances, and the MXFP8 autograd function on the Triton backend.

Without CUDA these run under TRITON_INTERPRET=1 (set by conftest.py) at small shapes; with CUDA
the same tests run compiled.

Run: .venv/bin/python -m pytest -q tests/kernels/test_triton_kernels.py

Tolerances (relative to the largest |expected|): fp32 outputs 1e-5 (fp32 summation order); bf16
outputs 1e-2 (one bf16 rounding, 2^-8 relative, plus the interpreter's truncating bf16 store).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_testing import DEVICE, report_close
from mxfp8_golden import FP16_CASES, HAND_CASES, SEMANTIC_CASES, build

from kernels import moe_ref
from kernels.grouped_mm import hp_grouped_mm, mxfp8_grouped_mm
from kernels.mxfp8_ref import quantize, quantize_colwise, to_blocked

pytest.importorskip("triton", reason="the Triton kernels need triton (pyproject's train extra)")
from kernels.triton import grouped_gemm, permute, quant

MODES = ["dequant", "fp8", "scaled"]


def stress_matrix(rows: int, cols: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Blocks at scales across the dtype's range (fp32/bf16: from fp32-subnormal to 2^100),
    zero blocks, NaN and Inf, and a block of subnormals."""
    g = torch.Generator().manual_seed(seed)
    low, high = (-24, 12) if dtype == torch.float16 else (-140, 100)
    exps = torch.randint(low, high, (rows, cols // 32), generator=g).float()
    x = torch.randn(rows, cols, generator=g) * torch.exp2(exps).repeat_interleave(32, 1)
    x[0, :32] = 0.0
    x[1, 3], x[2, 40 % cols], x[3, 7] = float("nan"), float("inf"), -float("inf")
    x[4, :32] = torch.randn(32, generator=g) * (2.0**-20 if dtype == torch.float16 else 2.0**-135)
    return x.to(dtype)


def assert_same_mx(a, b, what):
    assert torch.equal(a.data.view(torch.uint8).cpu(), b.data.view(torch.uint8).cpu()), f"{what}: data"
    assert torch.equal(a.scale.cpu(), b.scale.cpu()), f"{what}: scales"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_quantize_both_orientations_bit_exact(dtype):
    x = stress_matrix(96, 160, dtype)
    row, col = quant.quantize_mxfp8(x.to(DEVICE))
    assert_same_mx(row, quantize(x), "row-wise")
    assert_same_mx(col, quantize_colwise(x), "column-wise")
    blocked, _ = quant.quantize_mxfp8(x.to(DEVICE), colwise=False, swizzle=True)
    assert torch.equal(blocked.scale.cpu(), to_blocked(quantize(x).scale)), "blocked scales"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quantize_golden_blocks(dtype):
    _, x, data, scales = build(SEMANTIC_CASES + HAND_CASES, dtype)
    x = torch.cat([x, x[:32 - x.shape[0] % 32]])  # rows to a multiple of 32 for the column-wise copy
    row, col = quant.quantize_mxfp8(x.to(DEVICE))
    n = data.shape[0]
    assert torch.equal(row.data.view(torch.uint8)[:n].cpu(), data)
    assert torch.equal(row.scale[:n].cpu(), scales)
    assert_same_mx(col, quantize_colwise(x), "column-wise")


def test_quantize_fp16_golden_blocks():
    _, x, data, scales = build(FP16_CASES, torch.float16)
    x = torch.cat([x, x.new_zeros(32 - x.shape[0], 32)])
    row, _ = quant.quantize_mxfp8(x.to(DEVICE), colwise=False)
    assert torch.equal(row.data.view(torch.uint8)[: data.shape[0]].cpu(), data)
    assert torch.equal(row.scale[: data.shape[0]].cpu(), scales)


def test_quantize_stacked_weights_keep_blocks_per_expert():
    w = stress_matrix(3 * 64, 96, torch.bfloat16, seed=1).view(3, 64, 96)
    row, col = quant.quantize_mxfp8(w.to(DEVICE))
    assert_same_mx(row, quantize(w), "row-wise")
    assert col.data.shape == (3, 96, 64)
    assert_same_mx(col, quantize_colwise(w), "column-wise")


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(-149, 120), st.sampled_from([torch.float32, torch.bfloat16]),
       st.integers(0, 2**31 - 1))
def test_quantize_random_shapes_and_scales(m_blocks, n_blocks, exponent, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(32 * m_blocks, 32 * n_blocks, generator=g) * 2.0**exponent).to(dtype)
    row, col = quant.quantize_mxfp8(x.to(DEVICE))
    assert_same_mx(row, quantize(x), "row-wise")
    assert_same_mx(col, quantize_colwise(x), "column-wise")


def test_quantize_rejects_unaligned_shapes():
    with pytest.raises(ValueError, match="multiples of 32"):
        quant.quantize_mxfp8(torch.zeros(40, 64, device=DEVICE))
    row, col = quant.quantize_mxfp8(torch.zeros(40, 64, device=DEVICE), colwise=False)
    assert col is None and row.scale.shape == (40, 2)


def test_permute_and_unpermute():
    g = torch.Generator().manual_seed(0)
    experts = torch.randint(0, 5, (37, 2), generator=g)
    weights = torch.rand(37, 2, generator=g)
    x = torch.randn(37, 48, generator=g).to(torch.bfloat16)
    src, dst, offsets = moe_ref.route(experts, 5, align=32)
    assert offsets.tolist()[-1] == src.numel() and all(o % 32 == 0 for o in offsets.tolist())
    out = permute.permute(x.to(DEVICE), src.to(DEVICE))
    assert torch.equal(out.cpu(), moe_ref.permute(x, src))
    assert torch.equal(out.cpu()[dst.flatten()], x.repeat_interleave(2, 0))  # every choice lands
    y = torch.randn(src.numel(), 48, generator=g)
    back = permute.unpermute(y.to(DEVICE), dst.to(DEVICE), weights.to(DEVICE))
    report_close(back, moe_ref.unpermute(y, dst, weights), 1e-6, "unpermute")


def groups(sizes):
    return torch.tensor(sizes).cumsum(0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hp_grouped_gemms(dtype):
    g = torch.Generator().manual_seed(0)
    offsets = groups([40, 0, 70, 18])
    M, K, N = int(offsets[-1]), 96, 64
    x, w, dy = (torch.randn(*s, generator=g).to(dtype) for s in ((M, K), (4, N, K), (M, N)))
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    d = dict(device=DEVICE)
    report_close(grouped_gemm.grouped_mm(x.to(**d), w.to(**d), offsets), moe_ref.grouped_mm(x, w, offsets), tol, "fwd")
    report_close(grouped_gemm.grouped_mm(dy.to(**d), w.to(**d).transpose(1, 2), offsets),
                 moe_ref.grouped_mm(dy, w.transpose(1, 2), offsets), tol, "dgrad")
    wgrad = grouped_gemm.grouped_mm_wgrad(dy.to(**d).T, x.to(**d).T, offsets)
    report_close(wgrad, moe_ref.grouped_mm_wgrad(dy.T, x.T, offsets), tol, "wgrad")
    assert not wgrad[1].any()  # the expert without tokens


@pytest.mark.parametrize("mode", MODES)
def test_mx_grouped_gemms(mode):
    g = torch.Generator().manual_seed(1)
    offsets = groups([40, 0, 70, 18])
    M, K, N = int(offsets[-1]), 96, 64
    x, w = torch.randn(M, K, generator=g), torch.randn(4, N, K, generator=g)
    x[5, :32] *= 2.0**40  # blocks of very different scales in one tile
    xq, wq = quantize(x), quantize(w)
    to = lambda q: type(q)(q.data.to(DEVICE), q.scale.to(DEVICE))  # noqa: E731
    out = grouped_gemm.mx_grouped_mm(to(xq), to(wq), offsets, torch.float32, mode)
    report_close(out, moe_ref.mx_grouped_mm(xq, wq, offsets, torch.float32), 1e-5, f"{mode} fwd")
    out = grouped_gemm.mx_grouped_mm(to(xq), to(wq), offsets, torch.bfloat16, mode)
    report_close(out, moe_ref.mx_grouped_mm(xq, wq, offsets, torch.float32), 1e-2, f"{mode} fwd bf16")
    src, _, padded = moe_ref.pad_groups(offsets, 32)
    dy = torch.randn(M, N, generator=g)
    a, b = quantize_colwise(moe_ref.permute(dy, src)), quantize_colwise(moe_ref.permute(x, src))
    out = grouped_gemm.mx_grouped_mm_wgrad(to(a), to(b), padded, torch.float32, mode)
    report_close(out, moe_ref.mx_grouped_mm_wgrad(a, b, padded, torch.float32), 1e-5, f"{mode} wgrad")


def lossless(shape, g):
    """Values whose every 32-block has amax in (224, 448] * 2^-8: MXFP8 holds them exactly, so
    the MXFP8 matmuls must equal the exact ones (up to fp32 summation order)."""
    grid = torch.tensor([240.0, 256, 288, 320, 352, 384, 416, 448])
    signs = torch.randint(0, 2, shape, generator=g) * 2 - 1
    return grid[torch.randint(0, 8, shape, generator=g)] * signs * 2.0**-8


@pytest.mark.parametrize("mode", MODES)
def test_mxfp8_autograd_on_triton_equals_reference(mode):
    g = torch.Generator().manual_seed(2)
    offsets = groups([40, 0, 70, 18])
    M, K, N = int(offsets[-1]), 64, 96
    x, w, dy = torch.randn(M, K, generator=g), torch.randn(4, N, K, generator=g), torch.randn(M, N, generator=g)
    results = []
    for backend, device in (("ref", "cpu"), ("triton", DEVICE)):
        xd, wd = x.detach().to(device).requires_grad_(), w.detach().to(device).requires_grad_()
        out = mxfp8_grouped_mm(xd, wd, offsets.to(device), backend=backend, mode=mode)
        out.backward(dy.to(device))
        results.append((out, xd.grad, wd.grad))
    for name, ref, tri in zip(("out", "dx", "dw"), *results):
        report_close(tri, ref, 1e-5, f"{mode} {name}")


def test_mxfp8_and_hp_autograd_on_triton_are_exact_on_representable_inputs():
    g = torch.Generator().manual_seed(3)
    offsets = groups([33, 0, 64, 31])
    M, K, N = int(offsets[-1]), 64, 96
    x, w, dy = lossless((M, K), g), lossless((4, N, K), g), lossless((M, N), g)
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    moe_ref.grouped_mm(x64, w64, offsets).backward(dy.double())
    for fn in (mxfp8_grouped_mm, hp_grouped_mm):
        xd, wd = x.detach().to(DEVICE).requires_grad_(), w.detach().to(DEVICE).requires_grad_()
        out = fn(xd, wd, offsets.to(DEVICE), backend="triton")
        out.backward(dy.to(DEVICE))
        report_close(out, moe_ref.grouped_mm(x64, w64, offsets), 1e-6, f"{fn.__name__} out")
        report_close(xd.grad, x64.grad, 1e-6, f"{fn.__name__} dx")
        report_close(wd.grad, w64.grad, 1e-6, f"{fn.__name__} dw")
