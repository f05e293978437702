"""LoRA as parametrizations (training/lora.py), and checkpoints (training/checkpoint.py)."""

from __future__ import annotations

import pytest
import torch

from model.config import ModelConfig
from model.hf import hf_state_dict, load_model
from model.transformer import Transformer
from training.buffer import Group
from training.checkpoint import Checkpointer, export_model
from training.config import debug, replace_in
from training.lora import (
    adapters_replaced,
    add_lora,
    clone_factors,
    load_adapter,
    lora_modules,
    save_adapter,
)
from training.toy import byte_tokenizer, demonstrations
from training.trainer import Trainer

TARGETS = ("qkv", "o_proj", "w13_EFD", "w2_EDF")

pytestmark = pytest.mark.usefixtures("one_thread")


def model(seed=0):
    return Transformer(ModelConfig.debug(vocab_size=261)).init_weights(seed=seed)


def logits(m, ids):
    with torch.no_grad():
        return m(ids).logits


def test_a_fresh_adapter_is_the_base_model_and_trains_only_its_factors():
    ids = torch.randint(0, 261, (2, 12))
    base, tuned = model(), model()
    names = add_lora(tuned, rank=4, alpha=8.0, targets=TARGETS)
    assert len(names) == 4 * 2  # two layers
    assert torch.equal(logits(base, ids), logits(tuned, ids))
    trainable = {n for n, p in tuned.named_parameters() if p.requires_grad}
    assert trainable and all(n.endswith(("lora_A", "lora_B")) for n in trainable)
    experts = dict(lora_modules(tuned))["layers.0.moe.experts.w13_EFD"]
    assert experts.lora_A.shape == (4, 4, 64) and experts.lora_B.shape == (4, 192, 4)  # one pair per expert
    with pytest.raises(ValueError, match="no parameter matches"):
        add_lora(model(), 4, 8.0, ["nope"])


def test_merged_weights_are_base_plus_scaled_low_rank_product():
    tuned = model()
    add_lora(tuned, rank=2, alpha=6.0, targets=("o_proj",))
    delta = dict(lora_modules(tuned))["layers.1.attn.o_proj.weight"]
    with torch.no_grad():
        delta.lora_B.normal_()
    base = model().layers[1].attn.o_proj.weight
    expected = base + 3.0 * delta.lora_B @ delta.lora_A
    torch.testing.assert_close(tuned.layers[1].attn.o_proj.weight, expected)
    torch.testing.assert_close(hf_state_dict(tuned)["model.layers.1.self_attn.o_proj.weight"], expected)
    factors = clone_factors(tuned)
    with adapters_replaced(tuned, {k: torch.zeros_like(v) for k, v in factors.items()}):
        assert torch.equal(tuned.layers[1].attn.o_proj.weight, base)  # B = 0: the base model
    with torch.no_grad():
        delta.lora_B.zero_()  # the adapter moves on; the copy still holds the earlier factors
    with adapters_replaced(tuned, factors):
        torch.testing.assert_close(tuned.layers[1].attn.o_proj.weight, expected)
    assert torch.equal(tuned.layers[1].attn.o_proj.weight, base)  # its own factors again
    with pytest.raises(ValueError, match="no factors"), adapters_replaced(tuned, {}):
        pass


def test_adapter_round_trip_and_export(tmp_path):
    ids = torch.randint(0, 261, (1, 9))
    tuned = model()
    add_lora(tuned, rank=4, alpha=8.0, targets=TARGETS)
    for _, delta in lora_modules(tuned):
        with torch.no_grad():
            delta.lora_B.normal_(std=0.02)
    save_adapter(tuned, tmp_path / "adapter", base="debug")
    again = load_adapter(model(), tmp_path / "adapter")
    torch.testing.assert_close(logits(again, ids), logits(tuned, ids))
    assert not torch.equal(logits(model(), ids), logits(tuned, ids))
    export_model(tuned, byte_tokenizer(), tmp_path / "merged")
    torch.testing.assert_close(logits(load_model(tmp_path / "merged"), ids), logits(tuned, ids))
    with pytest.raises(ValueError, match="adapter tensor"):
        load_adapter(Transformer(ModelConfig.debug(vocab_size=261, hidden_size=32, head_dim=8)), tmp_path / "adapter")


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_checkpoint_restores_weights_optimizer_and_step(tmp_path, lora_rank):
    config = replace_in(debug(), model={"lora_rank": lora_rank})
    tok = byte_tokenizer()
    groups = [Group(-1, -1, demonstrations(tok))]
    trainer = Trainer(config, model())
    trainer.update(groups, 0)
    ckpt = Checkpointer(tmp_path / "ckpt", keep=1)
    path = ckpt.save(trainer.step, trainer, tok, extra={"buffer": {"version": 3}})
    assert (path / ("adapter" if lora_rank else "model")).is_dir() and ckpt.latest() == path
    after_one = trainer.update(groups, 1)
    resumed = Trainer(config, model())
    assert ckpt.load(ckpt.latest(), resumed) == {"buffer": {"version": 3}}
    assert resumed.step == 1
    assert resumed.update(groups, 1)["sft_loss"] == after_one["sft_loss"]
    for (n, a), (_, b) in zip(trainer.model.named_parameters(), resumed.model.named_parameters()):
        assert torch.equal(a, b), n
    ckpt.save(resumed.step, resumed, tok)
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("step_*")) == ["step_000002"]  # keep=1
