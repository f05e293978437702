"""From groups to micro-batches (training/batch.py): filters, advantages, shared-prefix rows."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from model.layers import PackedRows
from training.batch import micro_batches, plan_rows, prepare
from training.buffer import Group, Sample
from training.config import BufferConfig, LossConfig

NAN = math.nan


def sample(tokens, first_policy, reward=1.0, off=False, version=20, routing=None):
    n = len(tokens)
    return Sample(tokens=list(tokens), mask=[False] * first_policy + [True] * (n - first_policy),
                  behaviour_logprobs=[NAN if off else -0.1 * t for t in range(n)], reward=reward,
                  off_policy=off, weight_version=version, routing=routing)


def test_prepare_filters_and_assigns_group_advantages():
    groups = [
        Group(0, 0, [sample([1, 2, 3], 1, 1.0), sample([1, 2, 4], 1, 0.0), sample([1, 5], 1, NAN)]),
        Group(1, 0, [sample([1, 2], 1, 1.0), sample([1, 3], 1, 1.0)]),  # all equal: no signal
        Group(2, 0, [sample([7, 8], 1, 1.0, off=True), sample([7, 9], 1, 0.0, off=True)]),
        Group(3, 0, [sample([1, 2], 1, 1.0, version=0), sample([1, 3], 1, 0.0, version=20)]),
    ]
    batch = prepare(groups, LossConfig(), BufferConfig(max_policy_age=8), version=20)
    assert batch.advantages[:2] == [0.5, -0.5]
    # The stale sample of group 3 (20 versions old) is imitated, not weighted; its fresh sibling
    # is alone in its group: no baseline, advantage 0, dropped with the all-equal group 1.
    assert batch.dropped == {"masked_reward": 1, "zero_advantage": 3, "off_policy_below_reward": 1}
    assert batch.sft == [False, False, True, True]
    assert batch.samples[2].tokens == [7, 8] and batch.samples[3].tokens == [1, 2]
    assert batch.policy_tokens == 4 and batch.sft_tokens == 2


def test_rows_share_the_prompt_once_and_map_every_target_back():
    prompt = [5, 6, 7, 8, 9]
    a, b, c = sample([*prompt, 1, 2, 3], 5), sample([*prompt, 4, 4], 5), sample([5, 6, 1, 2], 2)
    batch = prepare([Group(0, 0, [a, b]), Group(1, 0, [c])], LossConfig(), BufferConfig(drop_zero_advantage=False), 20)
    # The prefix stops before the position that predicts the first completion token (index 4).
    # c shares only [5, 6] with the others and its own loss starts at index 2, so joining it would
    # cut the row's prefix to 1 position: it costs more than it saves, and c goes alone.
    rows = plan_rows(batch, budget=100)
    assert [(r.prefix, r.members) for r in rows] == [(0, [2]), (4, [0, 1])]
    assert [(r.prefix, r.members) for r in plan_rows(batch, budget=8)] == [(0, [2]), (0, [0]), (0, [1])]
    [mb] = micro_batches(batch, 100)
    assert mb.shared and mb.num_tokens == 3 + (4 + 3 + 2)
    for b, row in enumerate(rows):  # micro_batches orders rows by length, as these already are
        for p in range(mb.positions_BP.shape[1]):
            if not mb.valid_BP[b, p]:
                continue
            pos = int(mb.positions_BP[b, p])
            seg = int(mb.segments_BS[b, pos])
            s = batch.samples[row.members[seg - 1]]
            t = int(mb.position_ids_BS[b, pos]) + 1  # the target's index in its sample
            assert s.tokens[t] == int(mb.targets_BP[b, p]) and s.tokens[t - 1] == int(mb.input_ids_BS[b, pos])
            assert mb.behaviour_BP[b, p].item() == pytest.approx(-0.1 * t)
    assert int(mb.valid_BP.sum()) == batch.policy_tokens == 3 + 2 + 2


def test_rows_gather_samples_of_one_prompt_wherever_they_sit_in_the_batch():
    """A warm start's batch interleaves tasks of several repositories: sorting brings each
    prompt's samples together, and a sample that shares little stays alone."""
    p, q = [1, 2, 3, 4, 5, 6], [1, 2, 9, 9, 9, 9]
    samples = [sample([*p, 7], 6), sample([*q, 7], 6), sample([*p, 8], 6), sample([*q, 8], 6), sample([3, 7], 1)]
    batch = prepare([Group(i, 0, [s]) for i, s in enumerate(samples)], LossConfig(),
                    BufferConfig(drop_zero_advantage=False), 20)
    rows = plan_rows(batch, budget=100)
    assert sorted((r.prefix, sorted(r.members)) for r in rows) == [(0, [4]), (5, [0, 2]), (5, [1, 3])]
    assert sum(r.length(batch) for r in rows) == 1 + 2 * (5 + 1 + 1)


def dense_mask(segments_BS: torch.Tensor) -> torch.Tensor:
    """The reference layout, (B, 1, S, S) bool: a position sees earlier positions of its own
    segment and of the shared prefix (segment 0); padding sees only itself."""
    q, k = segments_BS.unsqueeze(2), segments_BS.unsqueeze(1)
    S = segments_BS.shape[1]
    idx = torch.arange(S)
    visible = (idx.view(1, S, 1) >= idx.view(1, 1, S)) & (q >= 0) & (k >= 0) & ((k == 0) | (k == q))
    return (visible | torch.eye(S, dtype=torch.bool)).unsqueeze(1)


@pytest.mark.parametrize("chunk", [512, 2])
def test_packed_attention_equals_the_dense_mask_with_gradients(chunk, monkeypatch):
    """Rows of a prefix and segments (and a row of one sample, and padding): PackedRows computes
    only the pairs a position may see, whole or a few queries at a time; outputs and gradients
    equal SDPA under the full mask."""
    monkeypatch.setattr(PackedRows, "CHUNK", chunk)
    seg = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 3, -1], [1, 1, 1, 1, 1, 1, -1, -1, -1, -1]])
    packed = PackedRows.from_segments(seg)
    assert packed.prefix == (3, 0) and packed.segments == (((3, 5), (5, 8), (8, 9)), ((0, 6),))
    torch.manual_seed(0)
    q = torch.randn(2, 4, 10, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 2, 10, 8, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 2, 10, 8, dtype=torch.float64, requires_grad=True)
    real = (seg >= 0).view(2, 1, 10, 1)
    weights = torch.randn(2, 4, 10, 8, dtype=torch.float64)
    outs, grads = [], []
    for attend in (packed.attend, lambda *t: F.scaled_dot_product_attention(*t, attn_mask=dense_mask(seg), enable_gqa=True)):
        out = attend(q, k, v) * real
        (g,) = [torch.autograd.grad((out * weights).sum(), (q, k, v))]
        outs.append(out)
        grads.append(g)
    assert torch.allclose(outs[0], outs[1], atol=1e-12)
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, atol=1e-12)


def test_different_routes_end_the_shared_prefix():
    r1 = np.zeros((6, 2, 2), dtype=np.uint8)
    r2 = r1.copy()
    r2[3, 1, 0] = 3
    prompt = [5, 6, 7, 8, 9]
    batch = prepare([Group(0, 0, [sample([*prompt, 1], 5, routing=r1), sample([*prompt, 2], 5, 0.0, routing=r2)])],
                    LossConfig(), BufferConfig(), 20)
    assert plan_rows(batch, budget=100)[0].prefix == 3


def _target_logprobs(trainer, mbs, batch) -> dict[tuple[int, int], torch.Tensor]:
    """(sample index, target index) -> the trainer's logprob, from micro-batches of either layout."""
    out = {}
    for mb in mbs:
        logp = trainer.token_logprobs(trainer.model, mb)
        for b in range(mb.input_ids_BS.shape[0]):
            for p in range(mb.positions_BP.shape[1]):
                if mb.valid_BP[b, p]:
                    pos = int(mb.positions_BP[b, p])
                    target = int(mb.position_ids_BS[b, pos]) + 1
                    tokens = int(mb.targets_BP[b, p])
                    owner = next(i for i, s in enumerate(batch.samples)
                                 if len(s.tokens) > target and s.tokens[target] == tokens
                                 and s.tokens[:target] == _inputs(mb, b, pos))
                    out[owner, target] = logp[b, p]
    return out


def _inputs(mb, b: int, pos: int) -> list[int]:
    """The tokens position `pos` of row b sees: the shared prefix, then its own segment."""
    seg = mb.segments_BS[b]
    keep = [i for i in range(pos + 1) if int(seg[i]) in (0, int(seg[pos]))]
    return [int(mb.input_ids_BS[b, i]) for i in keep]


def test_shared_prefix_rows_give_the_logprobs_and_gradients_of_separate_rows(one_thread):
    from model.config import ModelConfig
    from model.transformer import Transformer
    from training.config import debug
    from training.trainer import Trainer

    prompt = list(range(40, 60))
    gen = torch.Generator().manual_seed(0)
    samples = [sample(prompt + torch.randint(0, 256, (n,), generator=gen).tolist(), len(prompt), reward=float(i % 2))
               for i, n in enumerate((7, 12, 4))]
    batch = prepare([Group(0, 20, samples)], LossConfig(), BufferConfig(), 20)
    results = []
    for share in (True, False):
        trainer = Trainer(debug(), Transformer(ModelConfig.debug()).init_weights(seed=3))
        mbs = micro_batches(batch, 4096, share_prefixes=share)
        assert any(mb.shared for mb in mbs) == share
        logprobs = _target_logprobs(trainer, mbs, batch)
        sum(logprobs.values()).backward()
        results.append((logprobs, {n: p.grad.clone() for n, p in trainer.model.named_parameters()}))
    (shared, shared_grads), (separate, separate_grads) = results
    assert shared.keys() == separate.keys() and len(shared) == 7 + 12 + 4
    for key in shared:
        torch.testing.assert_close(shared[key], separate[key], atol=1e-5, rtol=1e-5)
    for name in shared_grads:
        torch.testing.assert_close(shared_grads[name], separate_grads[name], atol=1e-5, rtol=1e-4)
