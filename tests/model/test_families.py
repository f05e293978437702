"""Model families beyond composer-mini: Mixtral and Qwen3-MoE checkpoints written by transformers
itself (tiny random configurations, built here, nothing downloaded) load with the reference's
logits, train through the RL trainer and come back out readable by transformers, and serve on
the engine with transformers' own greedy tokens."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from byte_tokenizer import ByteTokenizer

from model.config import ModelConfig
from model.engine import Engine
from model.hf import load_model, load_state_dict, save_model
from model.sampling import SamplingParams
from training.buffer import Group, Sample
from training.config import debug, replace_in
from training.trainer import Trainer, load_policy

SHAPE = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, num_experts_per_tok=2, max_position_embeddings=256, tie_word_embeddings=False)
ROPE = {"rope_type": "default", "rope_theta": 5e5}  # not the default: a reader that drops it fails

FAMILIES = {
    "mixtral": lambda: transformers.MixtralConfig(**SHAPE, intermediate_size=48, num_local_experts=4,
                                                  rope_parameters=ROPE, rms_norm_eps=1e-6),
    "qwen3_moe": lambda: transformers.Qwen3MoeConfig(**SHAPE, intermediate_size=96, moe_intermediate_size=48,
                                                     num_experts=4, norm_topk_prob=True, rope_parameters=ROPE),
    "qwen3_moe-unnormalised": lambda: transformers.Qwen3MoeConfig(
        **SHAPE, intermediate_size=96, moe_intermediate_size=48, num_experts=4, norm_topk_prob=False,
        rope_parameters=ROPE),
}


def reference(family: str) -> transformers.PreTrainedModel:
    """A transformers model of the family with every weight random, norms included (all ones
    would hide a swapped or missing query/key norm)."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(FAMILIES[family]())
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1 + 0.3 * torch.randn_like(param))
            else:
                param.normal_(0, 0.08)
    return model.float().eval()


@pytest.fixture(scope="module", params=list(FAMILIES))
def checkpoint(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    reference(request.param).save_pretrained(path)
    return request.param, path


IDS = torch.randint(0, 256, (2, 33), generator=torch.Generator().manual_seed(0))


def hf_logits(path, ids=IDS) -> torch.Tensor:
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(ids).logits


def test_transformers_checkpoint_loads_with_the_reference_logits(checkpoint):
    family, path = checkpoint
    model = load_model(path)
    hf = json.loads((path / "config.json").read_text())
    assert model.config.family == family.split("-")[0]
    assert model.config.norm_topk_prob == (family != "qwen3_moe-unnormalised")
    assert model.config.rope_theta == 5e5 and model.config.rms_norm_eps == hf["rms_norm_eps"]
    with torch.no_grad():
        ours = model(IDS).logits
    theirs = hf_logits(path)
    torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=1e-4)
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))


def test_saved_checkpoint_round_trips_through_transformers(checkpoint, tmp_path):
    _, path = checkpoint
    model = load_model(path)
    save_model(model, tmp_path)
    assert set(load_state_dict(tmp_path)) == set(load_state_dict(path))
    assert load_model(tmp_path).config == model.config
    torch.testing.assert_close(hf_logits(tmp_path), hf_logits(path), atol=1e-6, rtol=1e-6)


def _groups(vocab: int) -> list[Group]:
    gen = torch.Generator().manual_seed(1)
    samples = []
    for i in range(4):
        tokens = torch.randint(0, vocab, (24,), generator=gen).tolist()
        samples.append(Sample(tokens=tokens, mask=[False] * 10 + [True] * 14, behaviour_logprobs=[-5.5] * 24,
                              reward=float(i % 2), off_policy=False))
    return [Group(0, 0, samples)]


def test_trains_through_the_rl_trainer_and_transformers_reads_the_result(checkpoint, tmp_path):
    _, path = checkpoint
    config = replace_in(debug(), model={"path": str(path), "lora_rank": 0}, optim={"lr": 1e-2})
    model = load_policy(config.model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = Trainer(config, model)
    for version in range(2):
        metrics = trainer.update(_groups(model.config.vocab_size), version)
    assert metrics["policy_tokens"] > 0
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert any("router" in n for n in changed) and any("w13_EFD" in n for n in changed)
    if model.config.qk_norm:
        assert {"layers.0.attn.q_norm.weight", "layers.0.attn.k_norm.weight"} <= changed
    save_model(model.eval(), tmp_path)
    with torch.no_grad():
        ours = model(IDS).logits
    torch.testing.assert_close(hf_logits(tmp_path), ours, atol=2e-5, rtol=1e-4)


def test_engine_serves_transformers_greedy_tokens(checkpoint):
    _, path = checkpoint
    prompts = [IDS[0, :9].tolist(), IDS[1, :20].tolist()]
    engine = Engine(load_model(path), ByteTokenizer(stop_token_ids=()), max_batch=2)
    try:
        outs = engine.generate(prompts, SamplingParams(max_tokens=12, speculative=False, ignore_eos=True))
    finally:
        engine.close()
    ref = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    for prompt, out in zip(prompts, outs, strict=True):
        expected = ref.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, min_new_tokens=12,
                                pad_token_id=0)[0, len(prompt):].tolist()
        assert out.token_ids == expected


def test_unnormalised_routing_keeps_the_plain_probabilities():
    cfg = ModelConfig.debug(family="qwen3_moe", norm_topk_prob=False)
    from model.moe import Router

    router = Router(cfg)
    torch.nn.init.normal_(router.weight, std=0.05)
    x = torch.randn(5, cfg.hidden_size, generator=torch.Generator().manual_seed(0))
    weights, experts = router(x)[:2]
    probs = torch.softmax(x @ router.weight.T, -1)
    torch.testing.assert_close(weights, probs.gather(-1, experts))
    assert bool((weights.sum(-1) < 1 - 1e-3).all())


def test_unsupported_qwen3_moe_layouts_are_refused_by_name():
    hf = ModelConfig.debug(family="qwen3_moe").to_hf_dict()
    for change, field in [({"decoder_sparse_step": 2}, "decoder_sparse_step"), ({"mlp_only_layers": [0]}, "mlp_only_layers"),
                          ({"use_sliding_window": True}, "use_sliding_window"),
                          ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling")]:
        with pytest.raises(ValueError, match=field):
            ModelConfig.from_hf_dict({**hf, **change})
    with pytest.raises(ValueError, match="norm_topk_prob"):
        ModelConfig.debug(norm_topk_prob=False)


def test_fused_int4_step_declines_families_it_does_not_compute():
    from model.fused_decode import unsupported_reason
    from model.quant import quantize_model, supports_int4
    from model.transformer import Transformer

    if not supports_int4():
        pytest.skip("this torch build has no CPU int4 kernel")
    mixtral = quantize_model(Transformer(ModelConfig.debug()).init_weights(), "int4")
    qwen = quantize_model(Transformer(ModelConfig.debug(family="qwen3_moe")).init_weights(), "int4")
    assert unsupported_reason(mixtral) is None
    assert "Qwen3MoeForCausalLM" in unsupported_reason(qwen)


@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_routing_replay_follows_the_family_gate_normalisation(norm_topk_prob):
    from model.moe import Router

    router = Router(ModelConfig.debug(family="qwen3_moe", norm_topk_prob=norm_topk_prob))
    torch.nn.init.normal_(router.weight, std=0.05)
    x = torch.randn(6, 64, generator=torch.Generator().manual_seed(0))
    probs = torch.softmax(x @ router.weight.T, -1)
    own_weights, own_experts, _ = router(x)
    replayed, experts, _ = router(x, own_experts)
    assert torch.equal(replayed, own_weights) and torch.equal(experts, own_experts)
    given = (own_experts + 1) % 4  # other experts than the router's
    given[given[:, 0] == given[:, 1], 1] = (given[given[:, 0] == given[:, 1], 0] + 1) % 4
    weights, experts, _ = router(x, given)
    expected = probs.gather(-1, given)
    if norm_topk_prob:
        expected = expected / expected.sum(-1, keepdim=True)
    assert torch.equal(experts, given)
    torch.testing.assert_close(weights, expected)


def test_rollout_routing_replays_in_the_training_forward(checkpoint):
    from model.transformer import completion_logprobs

    _, path = checkpoint
    model = load_model(path)
    prompt = IDS[0, :12].tolist()
    engine = Engine(model, ByteTokenizer(stop_token_ids=()), max_batch=1)
    try:
        [out] = engine.generate([prompt], SamplingParams(max_tokens=10, temperature=1.0, seed=3, ignore_eos=True,
                                                         return_routing=True, speculative=False))
    finally:
        engine.close()
    with torch.no_grad():
        replayed = completion_logprobs(model, prompt, out.token_ids, out.routed_experts.long())
    torch.testing.assert_close(replayed, torch.tensor(out.logprobs), atol=1e-4, rtol=0)


def test_engine_takes_new_weights_under_the_family_names(checkpoint):
    from model.hf import hf_state_dict

    _, path = checkpoint
    served, trained = load_model(path), load_model(path)
    with torch.no_grad():
        for name, param in trained.named_parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=torch.Generator().manual_seed(len(name))))
    prompt = IDS[0, :9].tolist()
    engine = Engine(served, ByteTokenizer(stop_token_ids=()), max_batch=1)
    try:
        engine.load_weights(hf_state_dict(trained), version=1)
        [out] = engine.generate([prompt], SamplingParams(max_tokens=8, speculative=False, ignore_eos=True))
    finally:
        engine.close()
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(8):
            ids.append(int(trained(torch.tensor([ids])).logits[0, -1].argmax()))
    assert out.token_ids == ids[len(prompt):] and out.weight_version == 1
