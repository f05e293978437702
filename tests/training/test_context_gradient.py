"""A detached context (model/transformer.py `grad_at`, training/config.py `context_gradient`):
the logits equal the full forward's, and the gradient is exactly the one where the other
positions' keys and values are constants. The same with constant instructions only
(`instructions_gradient`): every position from the user turn's opening on carries gradient."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from model.config import ModelConfig
from model.layers import GradPositions, PackedRows
from model.transformer import Transformer
from training.batch import first_occurrence, micro_batches, prepare
from training.buffer import Group, Sample
from training.config import BufferConfig, LossConfig

OPENING = [62, 63]
"""The user turn's opening in these samples: tokens 62 and 63, at prompt positions 9 and 10."""


def _batch(routing: bool):
    """Three samples packed behind their shared prompt, policy tokens in spans between context
    tokens (tool outputs), with or without recorded routes."""
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(0, 62, 16)]
    prompt[9:11] = OPENING
    samples = []
    for n, reward in ((12, 1.0), (10, 0.0), (6, 1.0)):
        tokens = prompt + [int(t) for t in rng.integers(0, 62, n)]
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


def _loss_and_grads(model: Transformer, mb, weights_BP: torch.Tensor, logits_BPV: torch.Tensor):
    """The targets' logprobs (detached) and the gradient of their weighted sum, per parameter."""
    logp = logits_BPV.log_softmax(-1).gather(-1, mb.targets_BP.unsqueeze(-1)).squeeze(-1)
    return logp.detach(), torch.autograd.grad((logp * weights_BP).sum(), list(model.parameters()), allow_unused=True)


@pytest.mark.parametrize("routing", [False, True])
def test_detached_context_equals_constant_context_keys(routing):
    mb = _batch(routing)
    assert mb.shared
    model = _model()
    packed = PackedRows.from_segments(mb.segments_BS)
    given = None if mb.routing_BSLk is None else mb.routing_BSLk
    args = dict(positions_BS=mb.position_ids_BS, given_experts_BSLk=given, packed=packed)
    weights_BP = torch.randn(mb.positions_BP.shape, dtype=torch.float64) * mb.valid_BP
    loss_and_grads = functools.partial(_loss_and_grads, model, mb, weights_BP)

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


@pytest.mark.parametrize("routing", [False, True])
def test_constant_instructions_equal_constant_keys_before_the_user_turn(routing):
    mb = _batch(routing)
    model = _model()
    args = dict(positions_BS=mb.position_ids_BS, packed=PackedRows.from_segments(mb.segments_BS),
                given_experts_BSLk=mb.routing_BSLk)
    weights_BP = torch.randn(mb.positions_BP.shape, dtype=torch.float64) * mb.valid_BP
    loss_and_grads = functools.partial(_loss_and_grads, model, mb, weights_BP)

    at_BG, valid_BG, index_BP = mb.conversation_positions(OPENING)
    assert at_BG[0, 0] == 9 and int(valid_BG.sum()) == int((mb.segments_BS >= 0).sum()) - 9
    grad_at = GradPositions.of(at_BG, valid_BG, mb.segments_BS)
    conversation = loss_and_grads(model(mb.input_ids_BS, grad_at=grad_at, logits_at=index_BP, **args).logits)
    full = loss_and_grads(model(mb.input_ids_BS, logits_at=mb.positions_BP, **args).logits)
    detached = loss_and_grads(model(mb.input_ids_BS, grad_at=GradPositions.of(
        mb.positions_BP, mb.valid_BP, mb.segments_BS), **args).logits)
    hooks = _constant_context_keys(model, (torch.arange(mb.input_ids_BS.shape[1]) >= 9) & (mb.segments_BS >= 0))
    reference = loss_and_grads(model(mb.input_ids_BS, logits_at=mb.positions_BP, **args).logits)
    for h in hooks:
        h.remove()

    v = mb.valid_BP
    assert torch.allclose(conversation[0][v], full[0][v], atol=1e-12)
    from_full = from_detached = False
    for a, b, c, d in zip(conversation[1], reference[1], full[1], detached[1], strict=True):
        if a is not None:
            assert torch.allclose(a, b, atol=1e-12)
            from_full |= not torch.allclose(a, c, atol=1e-6)
            from_detached |= not torch.allclose(a, d, atol=1e-6)
    assert from_full and from_detached


def test_without_the_opening_the_whole_row_carries_gradient():
    mb = _batch(False)
    at_BG, valid_BG, index_BP = mb.conversation_positions([61, 61, 61])
    assert at_BG[0].tolist() == list(range(mb.input_ids_BS.shape[1])) and bool(valid_BG.all())
    assert torch.equal(index_BP, mb.positions_BP)


def test_a_gradient_pass_needs_the_recorded_context():
    model = _model()
    mb = _batch(False)
    grad_at = GradPositions.of(mb.positions_BP, mb.valid_BP, mb.segments_BS)
    with pytest.raises(ValueError, match="logits at `grad_at`'s positions only"):
        model(mb.input_ids_BS, positions_BS=mb.position_ids_BS, grad_at=grad_at, return_routing=True)
    x = torch.zeros(1, 2, model.config.hidden_size, dtype=torch.float64)
    rope = model.rotary(torch.zeros(1, 2, dtype=torch.long), x.dtype)
    with pytest.raises(ValueError, match="recorded keys and values"):
        model.layers[0].attn(x, rope, grad=grad_at)


def test_padding_queries_see_one_position_and_the_rule_is_the_packed_layout():
    seg = torch.tensor([[0, 0, 1, 1, 2, 2, -1]])
    g = GradPositions.of(torch.tensor([[3, 5, 9]]), torch.tensor([[True, True, False]]), seg)
    assert g.at_BG.tolist() == [[3, 5, 0]]
    assert g.visible_BGS.int().tolist() == [[[1, 1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 1, 1, 0], [1, 0, 0, 0, 0, 0, 0]]]


def test_the_instructions_end_at_the_chat_templates_user_turn_opening():
    from training.toy import byte_tokenizer

    tokenizer = byte_tokenizer()
    opening = tokenizer.user_turn_opening()
    assert tokenizer.decode(opening) == "<|im_start|>user"
    ids = tokenizer.encode_chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])
    text = tokenizer.decode(ids[:first_occurrence(ids, opening)])
    assert text.endswith("Be brief.<|im_end|>\n") and "user" not in text


def test_constant_instructions_need_the_opening():
    from training.config import RLConfig, TrainModelConfig
    from training.trainer import Trainer

    config = RLConfig(model=TrainModelConfig(path="debug", instructions_gradient=False))
    with pytest.raises(ValueError, match="user turn opening"):
        Trainer(config, _model())
