"""A trained checkpoint's LoRA adapter served in int4 (model/adapter.py, model/quant.py): the
residual kept beside the int4 matrices reproduces the trained model where int4 of the merged
weights does not; the engine picks the adapter up from a checkpoint; bad adapters and weight
updates that would count the adapter twice are refused.

Run: .venv/bin/python -m pytest tests/model/test_adapter.py
"""

from __future__ import annotations

import json

import pytest
import torch
from byte_tokenizer import ByteTokenizer
from safetensors.torch import save_file

from model.adapter import ADAPTER_CONFIG, ADAPTER_FILE, LowRank, read_adapter, residual_tensors
from model.config import ModelConfig
from model.engine import Engine
from model.hf import save_model
from model.quant import ADAPTABLE, Int4Linear, load_quantized, quantize_model, supports_int4
from model.sampling import SamplingParams
from model.transformer import Transformer
from model.weights import WeightUpdate, WeightUpdateError

pytestmark = pytest.mark.skipif(not supports_int4(), reason="this torch has no CPU int4 kernel")

RANK, ALPHA = 4, 8.0


def on_int4_grid(model: Transformer) -> Transformer:
    """composer-mini's situation: every matrix int4 quantizes lies on int4's grid (its Q4_1 origin)."""
    with torch.no_grad():
        for layer in model.layers:
            for linear in (layer.attn.qkv, layer.attn.o_proj):
                linear.weight.copy_(Int4Linear(linear.weight).dequantize())
            for stacked in (layer.moe.experts.w13_EFD, layer.moe.experts.w2_EDF):
                stacked.copy_(torch.stack([Int4Linear(w).dequantize() for w in stacked]))
    return model


def random_adapter(model: Transformer, size: float, seed: int = 5) -> dict[str, torch.Tensor]:
    """LoRA factors (training/lora.py's names and shapes) whose product is `size` of the weights' spread."""
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for i in range(model.config.num_layers):
        for target in ADAPTABLE:
            name = f"layers.{i}.{target}"
            weight = model.get_parameter(name)
            *lead, out_features, in_features = weight.shape
            tensors[f"{name}.lora_A"] = torch.randn(*lead, RANK, in_features, generator=gen) / in_features**0.5
            tensors[f"{name}.lora_B"] = torch.randn(*lead, out_features, RANK, generator=gen) * size * float(weight.detach().std())
    return tensors


def write_adapter(directory, tensors: dict[str, torch.Tensor]) -> None:
    directory.mkdir(parents=True)
    names = sorted({key.rsplit(".", 1)[0] for key in tensors})
    save_file(tensors, str(directory / ADAPTER_FILE))
    (directory / ADAPTER_CONFIG).write_text(json.dumps({"r": RANK, "lora_alpha": ALPHA, "target_parameters": names}))


def merged(model: Transformer, adapter: dict[str, LowRank]) -> Transformer:
    with torch.no_grad():
        for name, low_rank in adapter.items():
            model.get_parameter(name).add_(low_rank.delta())
    return model


def trained_checkpoint(tmp_path, size: float = 0.2):
    """(checkpoint directory with merged weights and adapter/, the base model's state, the adapter)."""
    config = ModelConfig.debug()
    base = on_int4_grid(Transformer(config).init_weights(seed=3).eval())
    write_adapter(tmp_path / "ckpt" / "adapter", random_adapter(base, size))
    adapter = read_adapter(tmp_path / "ckpt" / "adapter")
    base_state = {k: v.clone() for k, v in base.state_dict().items()}
    save_model(merged(base, adapter), tmp_path / "ckpt")
    return tmp_path / "ckpt", base_state, adapter


def logits(model: Transformer, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(ids[None]).logits[0].float()


def test_int4_keeps_the_adapter_that_int4_of_the_merged_weights_rounds_away(tmp_path):
    _, base_state, adapter = trained_checkpoint(tmp_path)
    config = ModelConfig.debug()
    ids = torch.randint(0, config.vocab_size, (12,), generator=torch.Generator().manual_seed(0))

    def model(state: dict[str, torch.Tensor]) -> Transformer:
        fresh = Transformer(config)
        fresh.load_state_dict(state)
        return fresh

    trained_state = merged(model(base_state), adapter).state_dict()  # what the trainer exports
    want = logits(model(trained_state), ids)
    # The floor: int4 serving the base model (bf16 activations, the int8 head) is this far off it.
    floor = float((logits(quantize_model(model(base_state), "int4"), ids) - logits(model(base_state), ids)).norm())
    change = float((want - logits(model(base_state), ids)).norm())
    with_adapter = quantize_model(model(trained_state), "int4", adapter=adapter)
    from_merged = quantize_model(model(trained_state), "int4")
    assert change > 10 * floor  # the test can tell a kept change from a lost one
    assert float((logits(with_adapter, ids) - want).norm()) < 1.2 * floor
    assert float((logits(from_merged, ids) - want).norm()) > 5 * floor
    qkv = with_adapter.layers[0].attn.qkv
    assert qkv.lora_down.shape == (RANK, config.hidden_size)
    torch.testing.assert_close(qkv.dequantize(), base_state["layers.0.attn.qkv.weight"], atol=1e-3, rtol=0)


def test_a_checkpoints_adapter_is_served_in_int4_and_its_merged_weights_in_fp32(tmp_path):
    """load_quantized: what Engine.from_pretrained (make run, training.eval) loads."""
    ckpt, _, _ = trained_checkpoint(tmp_path)
    int4 = load_quantized(ckpt, "int4")
    full = load_quantized(ckpt, "none")
    assert all(layer.attn.qkv.lora_down is not None for layer in int4.layers)
    assert all(e.lora_up is not None for layer in int4.layers for e in layer.moe.experts.w2)
    assert not hasattr(full.layers[0].attn.qkv, "lora_down")  # fp32: the merged weights as they are


def test_a_weight_update_of_an_adapted_int4_matrix_is_refused_and_writes_nothing(tmp_path):
    _, base_state, adapter = trained_checkpoint(tmp_path)
    model = Transformer(ModelConfig.debug()).init_weights(seed=3)
    model.load_state_dict(base_state)
    quantize_model(merged(model, adapter), "int4", adapter=adapter)
    before = model.layers[0].attn.qkv.packed.clone()
    with pytest.raises(WeightUpdateError, match="LoRA adapter"):
        WeightUpdate.prepare(model, {"layers.0.attn.qkv.weight": torch.zeros_like(base_state["layers.0.attn.qkv.weight"])})
    assert torch.equal(model.layers[0].attn.qkv.packed, before)


def test_new_residuals_synced_into_an_engine_serve_like_an_engine_built_with_them(tmp_path):
    """A trainer's sync after an update (training/weights.py): only the residuals move, and the
    prompt's dense copies and the fused step follow them."""
    _, base_state, first = trained_checkpoint(tmp_path)
    write_adapter(tmp_path / "second", random_adapter(Transformer(ModelConfig.debug()).init_weights(seed=3), 0.2, seed=9))
    second = read_adapter(tmp_path / "second")

    def engine(adapter: dict[str, LowRank]) -> Engine:
        model = Transformer(ModelConfig.debug()).init_weights(seed=3)
        model.load_state_dict(base_state)
        return Engine(quantize_model(merged(model, adapter), "int4", adapter=adapter), ByteTokenizer(), max_batch=1)

    synced, built = engine(first), engine(second)
    synced.load_weights(residual_tensors(second), version=1)
    params = SamplingParams(max_tokens=12, ignore_eos=True, speculative=False, temperature=1.0, seed=0)
    prompt = list(b"def median(values):")
    [a], [b] = synced.generate([prompt], params), built.generate([prompt], params)
    assert a.token_ids == b.token_ids and a.weight_version == 1
    torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)
    plain = Engine(quantize_model(Transformer(ModelConfig.debug()).init_weights(seed=3), "int4"), ByteTokenizer(), max_batch=1)
    with pytest.raises(WeightUpdateError, match="keeps no adapter"):
        plain.load_weights(residual_tensors(second), version=1)
    half = {k: v for k, v in residual_tensors(second).items() if not k.endswith("w2_EDF.lora_up")}
    with pytest.raises(WeightUpdateError, match=r"w2_EDF\.lora_up is missing"):
        synced.load_weights(half, version=2)
    for e in (synced, built, plain):
        e.close()


def test_adapters_int4_cannot_keep_and_malformed_adapters_are_named(tmp_path):
    assert read_adapter(tmp_path / "absent") is None
    model = Transformer(ModelConfig.debug()).init_weights(seed=3)
    router = LowRank(torch.zeros(RANK, 64), torch.zeros(4, RANK))
    with pytest.raises(ValueError, match=r"layers\.0\.moe\.router\.weight"):
        quantize_model(model, "int4", adapter={"layers.0.moe.router.weight": router})
    assert getattr(model, "quantization", "none") == "none"  # refused before anything changed
    tensors = random_adapter(model, 0.1)
    del tensors["layers.1.attn.o_proj.weight.lora_B"]
    write_adapter(tmp_path / "broken", tensors)
    with pytest.raises(ValueError, match=r"layers\.1\.attn\.o_proj\.weight\.lora_B is missing"):
        read_adapter(tmp_path / "broken")
