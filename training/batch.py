"""From groups of samples to the trainer's micro-batches: advantages, filtering, packing.

    batch = prepare(groups, loss_config, buffer_config, current_version)   # advantages, filters
    for mb in micro_batches(batch.samples, micro_batch_tokens): ...           # padded rows

A sample's token t is predicted from position t - 1, so a row feeds tokens[:-1] and targets
tokens[1:]; the per-target fields (mask, behaviour logprob, advantage) are shifted the same
way. Only positions whose target carries loss get logits (`positions_BP`): the output head is
the largest matmul per token, and prompts and tool outputs are most of an agent's tokens.

Rows are sorted by length and cut into micro-batches of at most `micro_batch_tokens` padded
tokens (rows x longest row), samples with routing apart from those without (the forward
replays routing for a whole micro-batch or not at all). Padding sits after a row's tokens, so
causal attention never lets a real token see it.

Legend: B rows, S positions, P loss positions per row, L layers, k experts per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from training.buffer import Group, Sample
from training.config import BufferConfig, LossConfig
from training.loss import group_advantages


@dataclass
class PreparedBatch:
    samples: list[Sample]
    advantages: list[float]
    """Per sample (0 for off-policy samples)."""
    sft: list[bool]
    """Per sample: trained by the off-policy likelihood term instead of the policy term."""
    dropped: dict[str, int] = field(default_factory=dict)
    """Samples left out, by reason."""

    @property
    def policy_tokens(self) -> int:
        return sum(s.num_policy_tokens for s, sft in zip(self.samples, self.sft) if not sft)

    @property
    def sft_tokens(self) -> int:
        return sum(s.num_policy_tokens for s, sft in zip(self.samples, self.sft) if sft)


@dataclass
class MicroBatch:
    input_ids_BS: torch.Tensor
    targets_BS: torch.Tensor
    positions_BP: torch.Tensor
    """Positions whose target carries loss (padded with 0; see `valid_BP`)."""
    valid_BP: torch.Tensor
    mask_BP: torch.Tensor
    sft_mask_BP: torch.Tensor
    behaviour_BP: torch.Tensor
    advantages_BP: torch.Tensor
    temperature: float
    routing_BSLk: torch.Tensor | None = None

    @property
    def num_tokens(self) -> int:
        return self.input_ids_BS.numel()


def prepare(groups: list[Group], loss: LossConfig, buffer: BufferConfig, version: int) -> PreparedBatch:
    """Advantages per group (training/loss.py choice 1); off-policy samples (and on-policy ones
    older than `max_policy_age`) go to the likelihood term if their reward passes
    `sft_min_reward`; masked rewards and, optionally, zero-advantage groups are dropped."""
    out = PreparedBatch([], [], [])
    drop = out.dropped
    for group in groups:
        on, off = [], []
        for s in group.samples:
            stale = version - s.weight_version > buffer.max_policy_age
            (off if s.off_policy or stale else on).append(s)
        for s in off:
            if math.isnan(s.reward) or s.reward < loss.sft_min_reward:
                drop["off_policy_below_reward"] = drop.get("off_policy_below_reward", 0) + 1
            else:
                out.samples.append(s)
                out.advantages.append(0.0)
                out.sft.append(True)
        masked = [s for s in on if math.isnan(s.reward)]
        if masked:
            drop["masked_reward"] = drop.get("masked_reward", 0) + len(masked)
        on = [s for s in on if not math.isnan(s.reward)]
        adv = group_advantages([s.reward for s in on], [str(group.job)] * len(on))
        if buffer.drop_zero_advantage and on and all(a == 0.0 for a in adv):
            drop["zero_advantage"] = drop.get("zero_advantage", 0) + len(on)
            continue
        out.samples += on
        out.advantages += adv
        out.sft += [False] * len(on)
    return out


def shard(batch: PreparedBatch, rank: int, world: int) -> PreparedBatch:
    """This rank's samples (every world-th, after advantages were computed on the whole batch)."""
    keep = range(rank, len(batch.samples), world)
    return PreparedBatch([batch.samples[i] for i in keep], [batch.advantages[i] for i in keep],
                         [batch.sft[i] for i in keep], dict(batch.dropped) if rank == 0 else {})


def micro_batches(batch: PreparedBatch, micro_batch_tokens: int) -> list[MicroBatch]:
    """Rows grouped by routing presence and temperature, sorted by length, packed greedily."""
    order = sorted(
        range(len(batch.samples)),
        key=lambda i: (batch.samples[i].routing is None, batch.samples[i].temperature, len(batch.samples[i].tokens), i),
    )
    out: list[MicroBatch] = []
    current: list[int] = []
    for i in order:
        s = batch.samples[i]
        if current:
            head = batch.samples[current[0]]
            longest = max(len(s.tokens), *(len(batch.samples[j].tokens) for j in current)) - 1
            same_kind = (head.routing is None) == (s.routing is None) and head.temperature == s.temperature
            if not same_kind or longest * (len(current) + 1) > micro_batch_tokens:
                out.append(_build(batch, current))
                current = []
        current.append(i)
    if current:
        out.append(_build(batch, current))
    return out


def _build(batch: PreparedBatch, rows: list[int]) -> MicroBatch:
    samples = [batch.samples[i] for i in rows]
    S = max(len(s.tokens) for s in samples) - 1
    B = len(samples)
    loss_pos = [[t - 1 for t in range(1, len(s.tokens)) if s.mask[t]] for s in samples]
    P = max(1, max(len(p) for p in loss_pos))
    ids = torch.zeros(B, S, dtype=torch.long)
    targets = torch.zeros(B, S, dtype=torch.long)
    positions = torch.zeros(B, P, dtype=torch.long)
    valid = torch.zeros(B, P, dtype=torch.bool)
    behaviour = torch.zeros(B, P, dtype=torch.float32)
    advantages = torch.zeros(B, P, dtype=torch.float32)
    sft = torch.zeros(B, P, dtype=torch.bool)
    routing = None
    if samples[0].routing is not None:
        L, k = samples[0].routing.shape[1:]
        routing = torch.zeros(B, S, L, k, dtype=torch.long)
    for b, (i, s) in enumerate(zip(rows, samples)):
        n = len(s.tokens) - 1
        ids[b, :n] = torch.tensor(s.tokens[:-1])
        targets[b, :n] = torch.tensor(s.tokens[1:])
        pos = loss_pos[b]
        if pos:
            positions[b, : len(pos)] = torch.tensor(pos)
            valid[b, : len(pos)] = True
            mu = np.asarray(s.behaviour_logprobs, dtype=np.float32)[np.asarray(pos) + 1]
            behaviour[b, : len(pos)] = torch.from_numpy(mu)
            advantages[b, : len(pos)] = batch.advantages[i]
            sft[b, : len(pos)] = batch.sft[i]
        if routing is not None:
            routing[b, :n] = torch.from_numpy(s.routing[:-1].astype(np.int64))
            routing[b, n:] = torch.arange(routing.shape[-1])  # padding: any distinct experts
    return MicroBatch(
        input_ids_BS=ids, targets_BS=targets, positions_BP=positions, valid_BP=valid,
        mask_BP=valid & ~sft, sft_mask_BP=valid & sft, behaviour_BP=behaviour,
        advantages_BP=advantages, temperature=samples[0].temperature, routing_BSLk=routing,
    )
