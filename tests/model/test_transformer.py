"""The MoE transformer against Hugging Face transformers (the reference implementation), the KV
cache against full recomputation, and checkpoint round trips and errors."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from model.config import ModelConfig
from model.hf import CheckpointError, load_model, load_state_dict, save_model
from model.transformer import Transformer


def tiny(**changes) -> Transformer:
    return Transformer(ModelConfig.debug(**changes)).init_weights(seed=1).eval()


@pytest.mark.parametrize(
    ("changes", "hf_class"),
    [
        ({}, transformers.MixtralForCausalLM),
        ({"num_experts": 1, "top_k": 1}, transformers.LlamaForCausalLM),
        ({"num_experts": 1, "top_k": 1, "tie_word_embeddings": True}, transformers.LlamaForCausalLM),
        ({"num_experts": 8, "top_k": 3, "num_kv_heads": 1}, transformers.MixtralForCausalLM),
    ],
)
def test_logits_match_transformers(tmp_path, changes, hf_class):
    model = tiny(**changes)
    save_model(model, tmp_path)
    reference = hf_class.from_pretrained(tmp_path, dtype=torch.float32).eval()
    ids = torch.randint(0, model.config.vocab_size, (2, 37), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = model(ids).logits
        theirs = reference(ids).logits
    torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=1e-4)
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))


def test_routing_is_reported_per_layer():
    model = tiny()
    out = model(torch.randint(0, 256, (2, 5)), return_routing=True)
    assert out.routing_BSLk.shape == (2, 5, model.config.num_layers, model.config.top_k)
    assert int(out.routing_BSLk.max()) < model.config.num_experts


def test_checkpoint_round_trip(tmp_path):
    model = tiny()
    save_model(model, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["MixtralForCausalLM"]
    assert "model.layers.1.block_sparse_moe.experts.3.w2.weight" in load_state_dict(tmp_path)
    again = load_model(tmp_path)
    assert again.config == model.config
    for (name, p), (_, q) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(p, q), name


def test_bad_checkpoints_name_the_file_and_field(tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_model(tmp_path / "missing")
    model = tiny()
    save_model(model, tmp_path)
    (tmp_path / "config.json").write_text('{"architectures": ["GPT2LMHeadModel"]}')
    with pytest.raises(ValueError, match=r"config.json.*architectures"):
        load_model(tmp_path)
    hf = model.config.to_hf_dict()
    del hf["num_hidden_layers"]
    (tmp_path / "config.json").write_text(json.dumps(hf))
    with pytest.raises(ValueError, match="num_hidden_layers"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(model.config.replace(hidden_size=32).to_hf_dict()))
    with pytest.raises(CheckpointError, match=r"embed_tokens.*shape"):
        load_model(tmp_path)
    model.config.save(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        load_model(tmp_path)


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="num_kv_heads"):
        ModelConfig.debug(num_kv_heads=3)
    with pytest.raises(ValueError, match="top_k"):
        ModelConfig.debug(top_k=9)
    with pytest.raises(ValueError, match="hidden_size"):
        ModelConfig.debug(hidden_size=0)


def test_positions_beyond_context_are_refused():
    model = tiny(max_position_embeddings=16)
    with pytest.raises(ValueError, match="context of 16"):
        model(torch.zeros(1, 17, dtype=torch.long))
