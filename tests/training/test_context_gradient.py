"""A detached context (model/transformer.py `grad_at`, training/config.py `context_gradient`):
the logits equal the full forward's, and the gradient is exactly the one where the other
positions' keys and values are constants."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model.config import ModelConfig
from model.layers import GradPositions, PackedRows
from model.transformer import Transformer
from training.batch import micro_batches, prepare
from training.buffer import Group, Sample
from training.config import BufferConfig, LossConfig


def _batch(routing: bool):
    """Three samples packed behind their shared prompt, policy tokens in spans between context
    tokens (tool outputs), with or without recorded routes."""
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(0, 64, 16)]
    samples = []
    for n, reward in ((12, 1.0), (10, 0.0), (6, 1.0)):
        tokens = prompt + [int(t) for t in rng.integers(0, 64, n)]
        mask = [False] * len(prompt) + [bool(i % 5 < 3) for i in range(n)]
        route = rng.integers(0, 4, (len(tokens), 2, 2)).astype(np.uint8) if routing else None
        if route is not None:
            route[:, :, 1] = (route[:, :, 0] + 1) % 4  # two distinct experts per position
        samples.append(Sample(tokens=tokens, mask=mask, behaviour_logprobs=[-0.5] * len(tokens),
                              reward=reward, weight_version=0, routing=route))
    if routing:  # the prompt's routes agree, so the samples still share it
        for s in samples[1:]:
            s.routing[: len(prompt)] = samples[0].routing[: len(prompt)]
    batch = prepare([Group(0, 0, samples)], LossConfig(), BufferConfig(), 0)
    (mb,) = micro_batches(batch, micro_batch_tokens=1000)
    return mb


def _model():
    cfg = ModelConfig.debug(vocab_size=64, max_position_embeddings=128)
    return Transformer(cfg).init_weights(seed=3).double()


def _constant_context_keys(model: Transformer, grad_positions_BS: torch.Tensor):
    """Hooks that make every position's keys and values outside `grad_positions_BS` constants in
    an ordinary forward: the reference the detached context must equal."""
    H, K, Dh = model.config.num_heads, model.config.num_kv_heads, model.config.head_dim
    is_kv = torch.arange((H + 2 * K) * Dh) >= H * Dh

    def hook(_module, _inputs, out):
        keep = grad_positions_BS.unsqueeze(-1) | ~is_kv
        return torch.where(keep, out, out.detach())

    return [layer.attn.qkv.register_forward_hook(hook) for layer in model.layers]


@pytest.mark.parametrize("routing", [False, True])
def test_detached_context_equals_constant_context_keys(routing):
    mb = _batch(routing)
    assert mb.shared
    model = _model()
    packed = PackedRows.from_segments(mb.segments_BS)
    given = None if mb.routing_BSLk is None else mb.routing_BSLk
    args = dict(positions_BS=mb.position_ids_BS, given_experts_BSLk=given, packed=packed)
    weights_BP = torch.randn(mb.positions_BP.shape, dtype=torch.float64) * mb.valid_BP

    def loss_and_grads(logits_BPV):
        logp = logits_BPV.log_softmax(-1).gather(-1, mb.targets_BP.unsqueeze(-1)).squeeze(-1)
        loss = (logp * weights_BP).sum()
        return logp.detach(), torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)

    grad_at = GradPositions.of(mb.positions_BP, mb.valid_BP, mb.segments_BS)
    detached = loss_and_grads(model(mb.input_ids_BS, grad_at=grad_at, **args).logits)
    full = loss_and_grads(model(mb.input_ids_BS, logits_at=mb.positions_BP, **args).logits)
    on_BS = torch.zeros(mb.input_ids_BS.shape, dtype=torch.bool)
    on_BS[torch.arange(len(on_BS)).unsqueeze(1), mb.positions_BP] = mb.valid_BP
    hooks = _constant_context_keys(model, on_BS)
    reference = loss_and_grads(model(mb.input_ids_BS, logits_at=mb.positions_BP, **args).logits)
    for h in hooks:
        h.remove()

    v = mb.valid_BP
    assert torch.allclose(detached[0][v], full[0][v], atol=1e-12)
    differs = False
    for a, b, c in zip(detached[1], reference[1], full[1], strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.allclose(a, b, atol=1e-12)
            differs |= not torch.allclose(a, c, atol=1e-6)
    assert differs  # the context's own paths are left out


def test_a_gradient_pass_needs_the_recorded_context():
    model = _model()
    mb = _batch(False)
    grad_at = GradPositions.of(mb.positions_BP, mb.valid_BP, mb.segments_BS)
    with pytest.raises(ValueError, match="logits at `grad_at` only"):
        model(mb.input_ids_BS, positions_BS=mb.position_ids_BS, grad_at=grad_at, logits_at=mb.positions_BP)
    x = torch.zeros(1, 2, model.config.hidden_size, dtype=torch.float64)
    rope = model.rotary(torch.zeros(1, 2, dtype=torch.long), x.dtype)
    with pytest.raises(ValueError, match="recorded keys and values"):
        model.layers[0].attn(x, rope, grad=grad_at)


def test_padding_queries_see_one_position_and_the_rule_is_the_packed_layout():
    seg = torch.tensor([[0, 0, 1, 1, 2, 2, -1]])
    g = GradPositions.of(torch.tensor([[3, 5, 9]]), torch.tensor([[True, True, False]]), seg)
    assert g.at_BG.tolist() == [[3, 5, 0]]
    assert g.visible_BGS.int().tolist() == [[[1, 1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 1, 1, 0], [1, 0, 0, 0, 0, 0, 0]]]
