"""Weight-only int4/int8 quantisation: the kernels against dequantised references, and a
quantised model that still decodes through the engine (speculation exact against itself)."""

from __future__ import annotations

import pytest
import torch
from byte_tokenizer import ByteTokenizer

from model.config import ModelConfig
from model.engine import Engine
from model.quant import Int4Linear, Int8Linear, quantize_model, supports_int4
from model.sampling import SamplingParams
from model.transformer import Transformer

pytestmark = pytest.mark.skipif(not supports_int4(), reason="this torch has no CPU int4 kernel")


@pytest.mark.parametrize("rows", [1, 3, 40])  # the int4 kernel and the dequantised GEMM path
def test_int4_linear_matches_its_dequantised_weight(rows):
    torch.manual_seed(0)
    weight = torch.randn(96, 64)
    layer = Int4Linear(weight)
    deq = layer.dequantize()
    assert (deq - weight).abs().max() <= (weight.abs().max() * 2 / 15) / 2 + 1e-3  # half a step at most
    x = torch.randn(rows, 64)
    torch.testing.assert_close(layer(x), x @ deq.T, atol=0.05, rtol=0.02)  # bf16 activations


def test_int4_is_exact_on_a_4bit_grid():
    """Weights already on a 4-bit grid per group of 32 (as composer-mini's Q4_1 origin) come back
    up to the bf16 rounding of the scales."""
    torch.manual_seed(1)
    scale = torch.rand(16, 2, 1) * 0.01 + 0.001
    q = torch.randint(0, 16, (16, 2, 32)).float()
    q[..., 0], q[..., 1] = 0, 15  # every group spans the full grid
    weight = (q * scale + 0.02).reshape(16, 64)
    deq = Int4Linear(weight).dequantize()
    # Within a tenth of a grid step: what the bf16 rounding of the zero point (~0.02) costs.
    assert ((deq - weight).abs() / scale.repeat_interleave(32, -1).reshape(16, 64)).max() < 0.1


def test_int8_linear():
    torch.manual_seed(2)
    weight = torch.randn(200, 64)
    x = torch.randn(2, 64)
    torch.testing.assert_close(Int8Linear(weight)(x), x @ weight.T, atol=0.3, rtol=0.05)  # bf16 activations


def test_quantized_model_decodes_and_speculation_stays_exact():
    model = Transformer(ModelConfig.debug(hidden_size=64, intermediate_size=96)).init_weights(seed=3).eval()
    quantize_model(model, "int4")
    engine = Engine(model, ByteTokenizer())
    prompt = [list(b"abc abc abc abc abc")]
    plain = engine.generate(prompt, SamplingParams(max_tokens=20, ignore_eos=True, speculative=False))
    spec = engine.generate(prompt, SamplingParams(max_tokens=20, ignore_eos=True, speculative=True))
    assert plain[0].token_ids == spec[0].token_ids
    engine.close()


def test_unknown_scheme_is_refused():
    model = Transformer(ModelConfig.debug()).init_weights()
    with pytest.raises(ValueError, match="int4"):
        quantize_model(model, "fp3")


@pytest.mark.slow
def test_int4_composer_mini_follows_the_checkpoint(composer_mini_dir):
    import inspect
    import json.decoder

    from model.hf import load_model
    from model.tokenizer import Tokenizer

    model = load_model(composer_mini_dir)
    text = inspect.getsource(json.decoder)[:3000]
    ids = torch.tensor([Tokenizer.from_dir(composer_mini_dir).encode(text)])
    with torch.no_grad():
        reference = model(ids).logits[0]
        quantize_model(model, "int4")
        quantized = model(ids).logits[0]
    assert (reference.argmax(-1) == quantized.argmax(-1)).float().mean() > 0.9
