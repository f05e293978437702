"""The MXFP8 grouped matmul as the model's expert seam, on the CPU (the emulated reference path):
exact gradients on MXFP8-representable inputs, gradients close to the fp32 path on random ones,
the config switch (default unchanged), a few training steps of the `debug` preset tracking the
bf16 path's loss, and inference on MXFP8 expert weights.

Run: .venv/bin/python -m pytest -q tests/kernels/test_mxfp8_training.py

Tolerances: random-input outputs and gradients within 8% (relative Frobenius norm) of fp32 -
MXFP8 rounds each operand by up to 2^-4 relative, measured here at about 4%; training losses
within 0.02 nats of the bf16 path at every step over 8 steps (measured: at most 0.003).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_testing import report_close

from kernels import moe_ref
from kernels.grouped_mm import MXFP8Experts, mxfp8_grouped_mm, quantize_experts
from model.config import ModelConfig
from model.moe import grouped_mm_reference
from model.transformer import Transformer

OFFSETS = torch.tensor([33, 33, 97, 128])  # group sizes 33, 0, 64, 31: padding and an empty expert


def lossless(shape, g):
    grid = torch.tensor([240.0, 256, 288, 320, 352, 384, 416, 448])
    signs = torch.randint(0, 2, shape, generator=g) * 2 - 1
    return grid[torch.randint(0, 8, shape, generator=g)] * signs * 2.0**-8


def grads(fn, x, w, dy, **kwargs):
    x, w = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    out = fn(x, w, OFFSETS, **kwargs)
    out.backward(dy)
    return out.detach(), x.grad, w.grad


def test_representable_inputs_give_the_exact_matmul_and_gradients():
    g = torch.Generator().manual_seed(0)
    x, w, dy = lossless((128, 64), g), lossless((4, 96, 64), g), lossless((128, 96), g)
    exact = grads(moe_ref.grouped_mm, x.double(), w.double(), dy.double())
    for name, a, b in zip(("out", "dx", "dw"), grads(mxfp8_grouped_mm, x, w, dy, backend="ref"), exact):
        report_close(a, b, 1e-6, name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_random_inputs_track_the_high_precision_gradients(dtype):
    g = torch.Generator().manual_seed(1)
    x, w, dy = (torch.randn(*s, generator=g).to(dtype) for s in ((128, 64), (4, 96, 64), (128, 96)))
    for name, a, b in zip(("out", "dx", "dw"), grads(mxfp8_grouped_mm, x, w, dy, backend="ref"),
                          grads(grouped_mm_reference, x.float(), w.float(), dy.float())):
        assert a.dtype == dtype
        error = ((a.float() - b).norm() / b.norm()).item()
        assert 0.005 < error < 0.08, f"{name}: relative error {error:.4f}"


def test_only_the_needed_gradients_are_computed():
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(128, 64, generator=g), torch.randn(4, 96, 64, generator=g, requires_grad=True)
    mxfp8_grouped_mm(x, w, OFFSETS).sum().backward()
    assert w.grad is not None and x.grad is None


def test_config_selects_the_seam_and_defaults_to_todays_path():
    assert ModelConfig.debug().expert_matmul == "bf16"
    model = Transformer(ModelConfig.debug())
    assert model.layers[0].moe.experts.grouped_mm is grouped_mm_reference
    model = Transformer(ModelConfig.debug(expert_matmul="mxfp8"))
    assert model.layers[0].moe.experts.grouped_mm is mxfp8_grouped_mm
    assert "expert_matmul" not in ModelConfig.debug(expert_matmul="mxfp8").to_hf_dict()
    with pytest.raises(ValueError, match="expert_matmul must be one of"):
        ModelConfig.debug(expert_matmul="fp8")
    with pytest.raises(ValueError, match="divisible by 32"):
        ModelConfig.debug(expert_matmul="mxfp8", intermediate_size=100)


def train(expert_matmul: str, steps: int = 8, device: str = "cpu") -> list[float]:
    """Losses of `steps` AdamW steps on a repeating sequence (learnable within a few steps)."""
    model = Transformer(ModelConfig.debug(expert_matmul=expert_matmul)).init_weights(seed=0).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ids = torch.randint(0, 256, (4, 16), generator=torch.Generator().manual_seed(1)).repeat(1, 4).to(device)
    losses = []
    for _ in range(steps):
        logits = model(ids[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_debug_model_trains_in_mxfp8_like_bf16():
    bf16, mxfp8 = train("bf16"), train("mxfp8")
    assert mxfp8[-1] < mxfp8[0] - 1.0, mxfp8
    worst = max(abs(a - b) for a, b in zip(bf16, mxfp8))
    assert worst < 0.02, f"losses bf16 {bf16} vs mxfp8 {mxfp8}"


def test_inference_on_mxfp8_expert_weights():
    """Weights quantised once at load give the same logits as quantising them on every call (the
    training path), and stay close to the high-precision model; one-token decoding works."""
    config = ModelConfig.debug(expert_matmul="mxfp8")
    model = Transformer(config).init_weights(seed=3).eval()
    ids = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        on_the_fly = model(ids).logits
        high = Transformer(config.replace(expert_matmul="bf16")).init_weights(seed=3).eval()(ids).logits
        quantize_experts(model)
        assert isinstance(model.layers[0].moe.experts, MXFP8Experts)
        assert model.layers[0].moe.experts.w13_data.dtype == torch.float8_e4m3fn
        loaded = model(ids).logits
        one = model(ids[:1, :1]).logits
    report_close(loaded, on_the_fly, 1e-5, "quantised once vs per call")
    assert ((loaded - high).norm() / high.norm()).item() < 0.05
    report_close(one[0, 0], loaded[0, 0], 1e-5, "one token")
