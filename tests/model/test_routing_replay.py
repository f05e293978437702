"""Routing replay in the training forward (model/transformer.py, model/moe.py): given experts per
position and layer, gate weights renormalised over them, router gradients and logits, gradient
checkpointing, and the check that matters for RL: in fp32 at temperature 1, a full-sequence
forward with the rollout's recorded routing reproduces the engine's sampled logprobs (the
mismatch without replay is reported beside it). The models here are random, so their experts
differ and routing matters; tests/model/test_composer_mini.py runs the same check on the real
checkpoint, whose experts start as identical copies."""

from __future__ import annotations

import pytest
import torch
import transformers
from byte_tokenizer import ByteTokenizer

from model.config import ModelConfig
from model.engine import Engine
from model.moe import load_balancing_loss, router_z_loss
from model.sampling import SamplingParams
from model.transformer import Transformer, completion_logprobs

PROMPTS = [list(b"def f(x): return x + 1\n"), list(b"abcabcabc"), list(b"z"), list(b"import os\nimport sys\n")]


def random_moe(seed: int = 0, **changes) -> Transformer:
    # std 0.1: the experts differ enough that swapping one changes the logprobs clearly.
    config = ModelConfig.debug(max_position_embeddings=256, **changes)
    return Transformer(config).init_weights(seed=seed, std=0.1).eval()


def ids(n: int = 30, rows: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (rows, n), generator=torch.Generator().manual_seed(seed))


def other_experts(routing_BSLk: torch.Tensor, num_experts: int) -> torch.Tensor:
    """The same positions routed elsewhere: every expert moved to the next one (still distinct)."""
    return (routing_BSLk + 1) % num_experts


def rollouts(model: Transformer) -> tuple[Engine, list]:
    engine = Engine(model, ByteTokenizer(stop_token_ids=(0,)), max_batch=4)
    params = [SamplingParams(max_tokens=40, temperature=1.0, top_p=1.0, seed=s, return_routing=True, ignore_eos=True)
              for s in range(len(PROMPTS))]
    try:
        return engine, engine.generate(PROMPTS, params)  # four rows decode together
    finally:
        engine.close()


def test_replaying_the_routers_own_choice_is_bit_identical():
    model = random_moe()
    with torch.no_grad():
        plain = model(ids(), return_routing=True, return_router_logits=True)
        replayed = model(ids(), given_experts_BSLk=plain.routing_BSLk, return_router_logits=True)
        by_router = model(ids(), given_experts_BSLk=torch.full_like(plain.routing_BSLk, -1))
    assert torch.equal(replayed.logits, plain.logits)
    assert torch.equal(by_router.logits, plain.logits)  # -1: the router chooses
    cfg = model.config
    assert plain.router_logits_BSLE.shape == (2, 30, cfg.num_layers, cfg.num_experts)
    assert plain.router_logits_BSLE.dtype == torch.float32
    assert torch.equal(plain.routing_BSLk, plain.router_logits_BSLE.topk(cfg.top_k, dim=-1).indices)


def test_given_experts_take_over_with_weights_renormalised_over_them():
    model = random_moe()
    moe = model.layers[0].moe
    x_ND = torch.randn(6, model.config.hidden_size, generator=torch.Generator().manual_seed(1))
    given = torch.tensor([[3, 0], [1, 2], [2, 3], [0, 1], [-1, -1], [1, 3]])
    with torch.no_grad():
        weights, experts, logits = moe.router(x_ND, given)
        _, own, _ = moe.router(x_ND)
    assert torch.equal(experts[[0, 1, 2, 3, 5]], given[[0, 1, 2, 3, 5]])
    assert torch.equal(experts[4], own[4])
    # The softmax restricted to the given experts: Mixtral's softmax-then-renormalise, replayed.
    torch.testing.assert_close(weights, logits.gather(-1, experts).softmax(-1), rtol=1e-6, atol=1e-7)
    with torch.no_grad():
        plain = model(ids(), return_routing=True)
        moved = model(ids(), given_experts_BSLk=other_experts(plain.routing_BSLk, 4))
    assert (moved.logits - plain.logits).abs().max() > 1e-2  # routing matters in this model


def test_router_learns_under_replay_and_checkpointing_gives_the_same_gradients():
    model = random_moe().train()
    given = other_experts(model(ids(), return_routing=True).routing_BSLk, 4)

    def grads(checkpointing: bool) -> dict[str, torch.Tensor]:
        model.zero_grad()
        out = model(ids(), given_experts_BSLk=given, return_router_logits=True, gradient_checkpointing=checkpointing)
        loss = out.logits.logsumexp(-1).mean() + 0.01 * router_z_loss(out.router_logits_BSLE.flatten(0, 2))
        loss.backward()
        return {name: p.grad.clone() for name, p in model.named_parameters()}

    plain, checkpointed = grads(False), grads(True)
    for i in range(model.config.num_layers):
        assert plain[f"layers.{i}.moe.router.weight"].abs().max() > 0
    for name, grad in plain.items():
        torch.testing.assert_close(checkpointed[name], grad, rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (torch.zeros(2, 30, 2, 3, dtype=torch.long), r"expected \(B, S, layers, top_k\)"),
        (torch.full((2, 30, 2, 2), 4), r"in \[0, 4\)"),
        (torch.zeros(2, 30, 2, 2, dtype=torch.long), "same expert twice"),
        (torch.tensor([-1, 1]).expand(2, 30, 2, 2), "all -1"),
        (torch.zeros(2, 30, 2, 2), "must be integers"),
    ],
    ids=["shape", "range", "duplicate", "partial-router", "float"],
)
def test_bad_given_experts_are_refused(given, message):
    with pytest.raises(ValueError, match=message):
        random_moe()(ids(), given_experts_BSLk=given)


def test_auxiliary_losses_match_transformers():
    logits = torch.randn(12, 4, generator=torch.Generator().manual_seed(5))  # (N, E)
    experts = logits.topk(2, dim=-1).indices
    theirs = transformers.models.mixtral.modeling_mixtral.load_balancing_loss_func((logits,), 4, 2)
    torch.testing.assert_close(load_balancing_loss(logits, experts, 4), theirs)
    balanced = torch.zeros(8, 4)  # uniform router, every expert chosen equally often: the minimum, 1 * k
    assert float(load_balancing_loss(balanced, torch.tensor([[0, 1], [2, 3]]).repeat(4, 1), 4)) == pytest.approx(2.0)
    assert torch.isclose(router_z_loss(logits), (logits.exp().sum(-1).log() ** 2).mean())


def test_training_forward_with_replay_reproduces_rollout_logprobs():
    """fp32, temperature 1, top_p 1: |engine logprob - trainer logprob| < 1e-4 for every token
    with replay; without replay the mismatch is printed (it may be 0 or not); with the wrong
    experts it is large, which is what replay guards against."""
    model = random_moe(seed=2)
    _, outs = rollouts(model)
    replay_err, plain_err, wrong_err, differ = 0.0, 0.0, 0.0, []
    with torch.no_grad():
        for prompt, out in zip(PROMPTS, outs):
            rollout = torch.tensor(out.logprobs)
            assert out.routed_experts.shape == (len(prompt) + 39, 2, 2)
            replayed = completion_logprobs(model, prompt, out.token_ids, out.routed_experts)
            plain = completion_logprobs(model, prompt, out.token_ids)
            wrong = completion_logprobs(model, prompt, out.token_ids, other_experts(out.routed_experts, 4))
            replay_err = max(replay_err, float((replayed - rollout).abs().max()))
            plain_err = max(plain_err, float((plain - rollout).abs().max()))
            wrong_err = max(wrong_err, float((wrong - rollout).abs().max()))
            own = model(torch.tensor([prompt + out.token_ids[:-1]]), return_routing=True).routing_BSLk[0]
            differ.append((own.sort(-1).values != out.routed_experts.long().sort(-1).values).any(-1).float().mean())
    print(f"\nrouting replay, random 4-expert MoE, {len(PROMPTS)} rollouts x 40 tokens: max |logprob "
          f"difference| with replay {replay_err:.2e}, without {plain_err:.2e}, with other experts {wrong_err:.2e}; "
          f"routes chosen differently without replay {float(torch.stack(differ).mean()):.1%}")
    assert replay_err < 1e-4
    assert wrong_err > 1e-2


def test_replay_needs_one_routing_row_per_fed_position():
    model = random_moe()
    routing = torch.tensor([0, 1]).expand(4, 2, 2)  # prompt 3 + completion 3 - 1 = 5 were fed
    with pytest.raises(ValueError, match="covers 4 positions"):
        completion_logprobs(model, [1, 2, 3], [4, 5, 6], routing)
