"""GPU checks of the Triton kernels at MoE-sized shapes (compiled, not interpreted): the quantiser
bit for bit against the PyTorch reference, the grouped GEMMs in every MXFP8 mode and in bf16
against the reference and torch's own grouped matmul, the autograd function, and training steps
of the debug model. Skipped without CUDA; `kernels/gpu_check.sh` runs them with `-m gpu`.

Run: .venv/bin/python -m pytest -q -m gpu tests/kernels

On an H200 (SM90) "scaled" is Triton's bf16 emulation of tl.dot_scaled; on SM100+ it is the
native block-scaled MMA. Tolerances: bf16 outputs within 1e-2 of max|expected| (bf16 rounding of
the output plus accumulation order over K up to 4096).
"""

from __future__ import annotations

import pytest
import torch
from kernel_testing import report_close, requires_gpu
from test_mxfp8_training import train

from kernels import moe_ref
from kernels.grouped_mm import hp_grouped_mm, mxfp8_grouped_mm
from kernels.mxfp8_ref import quantize, quantize_colwise, to_blocked

pytestmark = [pytest.mark.gpu, requires_gpu]
MODES = ["dequant", "fp8", "scaled"]


def stress(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    exps = torch.randint(-140, 100, (rows, cols // 32), generator=g).float()
    x = torch.randn(rows, cols, generator=g) * torch.exp2(exps).repeat_interleave(32, 1)
    x[::97, 5] = float("nan")
    x[::89, 70] = float("inf")
    x[7, :64] = 0.0
    return x.bfloat16()


def routed_offsets(num_tokens: int, top_k: int, num_experts: int, seed: int = 0) -> torch.Tensor:
    """Group ends of a skewed routing (some experts empty, sizes not multiples of 32)."""
    g = torch.Generator().manual_seed(seed)
    probs = torch.rand(num_experts, generator=g) ** 3
    experts = torch.multinomial(probs.expand(num_tokens, -1), top_k, generator=g)
    return torch.bincount(experts.flatten(), minlength=num_experts).cumsum(0)


def test_quantizer_bit_exact_at_moe_shapes():
    from kernels.triton.quant import quantize_mxfp8

    x = stress(4096, 2048)
    row, col = quantize_mxfp8(x.cuda())
    ref_row, ref_col = quantize(x), quantize_colwise(x)
    assert torch.equal(row.data.view(torch.uint8).cpu(), ref_row.data.view(torch.uint8))
    assert torch.equal(row.scale.cpu(), ref_row.scale)
    assert torch.equal(col.data.view(torch.uint8).cpu(), ref_col.data.view(torch.uint8))
    assert torch.equal(col.scale.cpu(), ref_col.scale)
    blocked, _ = quantize_mxfp8(x.cuda(), colwise=False, swizzle=True)
    assert torch.equal(blocked.scale.cpu(), to_blocked(ref_row.scale))
    w = stress(8 * 512, 1024, seed=1).view(8, 512, 1024)
    row, col = quantize_mxfp8(w.cuda())
    assert torch.equal(col.data.view(torch.uint8).cpu(), quantize_colwise(w).data.view(torch.uint8))
    assert torch.equal(row.scale.cpu(), quantize(w).scale)


@pytest.mark.parametrize("mode", MODES)
def test_mx_grouped_gemms_at_moe_shapes(mode):
    from kernels.triton.grouped_gemm import mx_grouped_mm, mx_grouped_mm_wgrad

    offsets = routed_offsets(2048, 4, 16).cuda()
    M, K, N = int(offsets[-1]), 1024, 1536
    x, w = torch.randn(M, K, device="cuda").bfloat16(), torch.randn(16, N, K, device="cuda").bfloat16()
    xq, wq = quantize(x), quantize(w)  # the reference quantiser on GPU tensors
    out = mx_grouped_mm(xq, wq, offsets, torch.bfloat16, mode)
    report_close(out, moe_ref.mx_grouped_mm(xq, wq, offsets, torch.float32), 1e-2, f"{mode} fwd")
    src, _, padded = moe_ref.pad_groups(offsets, 32)
    dy = torch.randn(M, N, device="cuda").bfloat16()
    a, b = quantize_colwise(moe_ref.permute(dy, src)), quantize_colwise(moe_ref.permute(x, src))
    out = mx_grouped_mm_wgrad(a, b, padded, torch.float32, mode)
    report_close(out, moe_ref.mx_grouped_mm_wgrad(a, b, padded, torch.float32), 1e-3, f"{mode} wgrad")


def test_bf16_grouped_gemm_matches_torch():
    from kernels.triton.grouped_gemm import grouped_mm

    offsets = routed_offsets(2048, 4, 16, seed=2).cuda()
    M, K, N = int(offsets[-1]), 2048, 1024
    x, w = torch.randn(M, K, device="cuda").bfloat16(), torch.randn(16, N, K, device="cuda").bfloat16()
    ours = grouped_mm(x, w, offsets)
    report_close(ours, moe_ref.grouped_mm(x, w, offsets, torch.float32), 1e-2, "bf16 vs reference")
    if hasattr(torch, "_grouped_mm"):
        theirs = torch._grouped_mm(x, w.transpose(-2, -1), offs=offsets.to(torch.int32))
        report_close(ours, theirs, 1e-2, "bf16 vs torch._grouped_mm")


@pytest.mark.parametrize("mode", MODES)
def test_mxfp8_autograd_matches_the_reference_backend(mode):
    offsets = routed_offsets(1024, 4, 8, seed=3).cuda()
    M, K, N = int(offsets[-1]), 512, 768
    x, w, dy = (torch.randn(*s, device="cuda").bfloat16() for s in ((M, K), (8, N, K), (M, N)))
    results = []
    for backend in ("ref", "triton"):
        xd, wd = x.clone().requires_grad_(), w.clone().requires_grad_()
        out = mxfp8_grouped_mm(xd, wd, offsets, backend=backend, mode=mode)
        out.backward(dy)
        results.append((out, xd.grad, wd.grad))
    for name, ref, tri in zip(("out", "dx", "dw"), *results):
        report_close(tri, ref, 1e-2, f"{mode} {name}")
    xd, wd = x.clone().requires_grad_(), w.clone().requires_grad_()
    hp = hp_grouped_mm(xd, wd, offsets)
    hp.backward(dy)
    assert ((results[1][0].float() - hp.float()).norm() / hp.float().norm()).item() < 0.08


def test_debug_model_trains_in_mxfp8_like_bf16_on_gpu():
    bf16, mxfp8 = train("bf16", device="cuda"), train("mxfp8", device="cuda")
    assert max(abs(a - b) for a, b in zip(bf16, mxfp8)) < 0.02, (bf16, mxfp8)


def test_native_scaled_dot_reported_by_capability():
    from kernels.triton import native_mx_dot

    assert native_mx_dot("cuda") == (torch.cuda.get_device_capability()[0] >= 10)
