"""From groups of samples to the trainer's micro-batches: advantages, filtering, packing.

    batch = prepare(groups, loss_config, buffer_config, current_version)   # advantages, filters
    for mb in micro_batches(batch, micro_batch_tokens): ...                # packed rows

A sample's token t is predicted from position t - 1, so a row feeds tokens[:-1] and the loss
targets are later tokens; only positions whose target carries loss get logits (`positions_BP`):
the output head is the largest matmul per token, and prompts and tool outputs are most of an
agent's tokens.

Prefix sharing: the samples of a group (and often of a whole batch: one system prompt) begin
with the same prompt. A row holds that shared prefix once, then each sample's remaining tokens
as its own segment, positions continuing from the prefix; a token sees the prefix and its own
segment, causally (model/layers.py PackedRows attends segment by segment, computing no pair
across segments). The forward computes the prompt once for the group,
and every member's gradient still flows into it, so logprobs and gradients equal those of
separate rows (tests/training/test_batch.py) for a fraction of the tokens. The prefix stops
before the first position whose next token carries loss in any member (that position belongs
to each member), and where recorded routes differ. Rows of one kind (routing or not, one
temperature) are packed into micro-batches of at most `micro_batch_tokens` padded positions.

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
    position_ids_BS: torch.Tensor
    """Each token's position in its own sample (rotary embeddings)."""
    segments_BS: torch.Tensor
    """0: the row's shared prefix; i >= 1: the row's i-th sample; -1: padding."""
    positions_BP: torch.Tensor
    """Row positions whose next token carries loss (padded with 0; see `valid_BP`)."""
    targets_BP: torch.Tensor
    valid_BP: torch.Tensor
    mask_BP: torch.Tensor
    sft_mask_BP: torch.Tensor
    behaviour_BP: torch.Tensor
    advantages_BP: torch.Tensor
    temperature: float
    routing_BSLk: torch.Tensor | None = None
    shared: bool = False
    """Some row holds more than one sample (the forward lays it out: model/layers.py PackedRows)."""

    @property
    def num_tokens(self) -> int:
        return int((self.segments_BS >= 0).sum())

    def conversation_positions(self, opening: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each row's positions from its first `opening` (the chat template's user turn opening:
        where the instructions end) to its end, as (at_BG, valid_BG), and where each loss
        position falls among them (index_BP). A row starts no later than its first loss position;
        one without the opening starts at 0."""
        lengths = (self.segments_BS >= 0).sum(1).tolist()  # a row's padding is at its end
        starts = []
        for b, ids in enumerate(self.input_ids_BS.tolist()):
            start = first_occurrence(ids[:lengths[b]], opening)
            if bool(self.valid_BP[b].any()):
                start = min(start, int(self.positions_BP[b][self.valid_BP[b]].min()))
            starts.append(start)
        start_B1 = torch.tensor(starts).unsqueeze(1)
        G = max(n - s for n, s in zip(lengths, starts))
        at_BG = start_B1 + torch.arange(G)
        valid_BG = at_BG < torch.tensor(lengths).unsqueeze(1)
        index_BP = torch.where(self.valid_BP, self.positions_BP - start_B1, 0)
        return torch.where(valid_BG, at_BG, 0), valid_BG, index_BP


def first_occurrence(ids: list[int], pattern: list[int]) -> int:
    """The first position of `pattern` in `ids`, 0 when it is not there."""
    n = len(pattern)
    for i, token in enumerate(ids):
        if token == pattern[0] and ids[i:i + n] == pattern:
            return i
    return 0


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


def micro_batches(batch: PreparedBatch, micro_batch_tokens: int, share_prefixes: bool = True) -> list[MicroBatch]:
    """Rows (training/batch.py docstring) packed into micro-batches of at most
    `micro_batch_tokens` padded positions, shortest rows together."""
    rows = plan_rows(batch, micro_batch_tokens if share_prefixes else 0)
    rows.sort(key=lambda r: (r.kind(batch), r.length(batch), r.members[0]))
    out: list[MicroBatch] = []
    current: list[Row] = []
    for row in rows:
        if current:
            longest = max(row.length(batch), *(r.length(batch) for r in current))
            if current[0].kind(batch) != row.kind(batch) or longest * (len(current) + 1) > micro_batch_tokens:
                out.append(_build(batch, current))
                current = []
        current.append(row)
    if current:
        out.append(_build(batch, current))
    return out


@dataclass
class Row:
    """Samples that share their first `prefix` tokens, laid out as the prefix once, then each
    sample's remaining tokens (its own segment)."""

    prefix: int
    members: list[int]

    def kind(self, batch: PreparedBatch) -> tuple[bool, float]:
        head = batch.samples[self.members[0]]
        return head.routing is None, head.temperature

    def length(self, batch: PreparedBatch) -> int:
        return self.prefix + sum(len(batch.samples[i].tokens) - 1 - self.prefix for i in self.members)


def _shareable(a: Sample, b: Sample) -> int:
    """How many leading positions two samples may share: equal tokens (and routes), before
    either's first loss token's predecessor (that position must be in each sample's own segment)."""
    limit = min(a.mask.index(True) if True in a.mask else len(a.tokens),
                b.mask.index(True) if True in b.mask else len(b.tokens)) - 1
    n = 0
    while n < limit and a.tokens[n] == b.tokens[n]:
        n += 1
    if n and a.routing is not None and b.routing is not None:
        same = np.all(a.routing[:n] == b.routing[:n], axis=(1, 2))
        n = int(np.argmin(same)) if not same.all() else n
    return max(n, 0)


def plan_rows(batch: PreparedBatch, budget: int) -> list[Row]:
    """Rows of the fewest total positions, each within `budget` (0: every sample alone).

    Samples are sorted by kind and tokens, so samples with a common prompt sit together (a
    group, and the tasks of one repository in a warm start's batch), and a row is a run of
    sorted samples whose prefix is the least shareable length between neighbours. Which runs
    to cut is a small dynamic programme: greedily joining a sample that shares only a few
    tokens would shorten everyone's prefix and cost more than it saves. A row's members each
    add at most as many positions as the prefix they share: a longer segment attends faster
    as a causal row of its own than chunk by chunk behind a short prefix (measured on CPU)."""
    samples = batch.samples
    order = sorted(range(len(samples)), key=lambda i: (samples[i].routing is None, samples[i].temperature,
                                                       samples[i].tokens))
    n = len(order)
    alone = [len(samples[i].tokens) - 1 for i in order]
    shared = [0] * n  # shared[k]: what order[k] may share with order[k - 1] (0: another kind)
    for k in range(1, n):
        a, b = samples[order[k - 1]], samples[order[k]]
        same_kind = (a.routing is None) == (b.routing is None) and a.temperature == b.temperature
        shared[k] = _shareable(a, b) if budget and same_kind else 0
    cost, cut = [0] + [math.inf] * n, [0] * (n + 1)  # cost[j]: fewest positions for order[:j]
    for j in range(1, n + 1):
        total, prefix, longest = 0, math.inf, 0
        for i in range(j - 1, -1, -1):  # the last row is order[i:j]
            total += alone[i]
            longest = max(longest, alone[i])
            if i < j - 1:
                prefix = min(prefix, shared[i + 1])
                if not prefix or longest - prefix > prefix:
                    break
            length = total - (j - i - 1) * prefix if i < j - 1 else total
            if i < j - 1 and length > budget:
                break
            if cost[i] + length < cost[j]:
                cost[j], cut[j] = cost[i] + length, i
    rows, j = [], n
    while j:
        i = cut[j]
        prefix = min(shared[i + 1:j]) if j - i > 1 else 0
        rows.append(Row(prefix, [order[k] for k in range(i, j)]))
        j = i
    return rows[::-1]


def _build(batch: PreparedBatch, rows: list[Row]) -> MicroBatch:
    B, S = len(rows), max(r.length(batch) for r in rows)
    P = max(1, max(sum(sum(batch.samples[i].mask[r.prefix + 1:]) for i in r.members) for r in rows))
    head = batch.samples[rows[0].members[0]]
    mb = MicroBatch(
        input_ids_BS=torch.zeros(B, S, dtype=torch.long), position_ids_BS=torch.zeros(B, S, dtype=torch.long),
        segments_BS=torch.full((B, S), -1, dtype=torch.long), positions_BP=torch.zeros(B, P, dtype=torch.long),
        targets_BP=torch.zeros(B, P, dtype=torch.long), valid_BP=torch.zeros(B, P, dtype=torch.bool),
        mask_BP=torch.zeros(B, P, dtype=torch.bool), sft_mask_BP=torch.zeros(B, P, dtype=torch.bool),
        behaviour_BP=torch.zeros(B, P), advantages_BP=torch.zeros(B, P), temperature=head.temperature,
        routing_BSLk=None if head.routing is None else torch.zeros(B, S, *head.routing.shape[1:], dtype=torch.long),
        shared=any(len(r.members) > 1 for r in rows),
    )
    for b, row in enumerate(rows):
        _fill_row(mb, b, row, batch)
    return mb


def _fill_row(mb: MicroBatch, b: int, row: Row, batch: PreparedBatch) -> None:
    first = batch.samples[row.members[0]]
    n0 = row.prefix
    mb.input_ids_BS[b, :n0] = torch.tensor(first.tokens[:n0], dtype=torch.long)
    mb.position_ids_BS[b, :n0] = torch.arange(n0)
    mb.segments_BS[b, :n0] = 0
    if mb.routing_BSLk is not None:
        mb.routing_BSLk[b, :n0] = torch.from_numpy(first.routing[:n0].astype(np.int64))
        mb.routing_BSLk[b, row.length(batch):] = torch.arange(mb.routing_BSLk.shape[-1])  # any distinct
    at, p = n0, 0
    for segment, i in enumerate(row.members, start=1):
        s = batch.samples[i]
        n = len(s.tokens) - 1 - n0  # this sample's inputs after the prefix
        mb.input_ids_BS[b, at:at + n] = torch.tensor(s.tokens[n0:-1], dtype=torch.long)
        mb.position_ids_BS[b, at:at + n] = torch.arange(n0, n0 + n)
        mb.segments_BS[b, at:at + n] = segment
        if mb.routing_BSLk is not None:
            mb.routing_BSLk[b, at:at + n] = torch.from_numpy(s.routing[n0:-1].astype(np.int64))
        targets = [t for t in range(n0 + 1, len(s.tokens)) if s.mask[t]]
        k = len(targets)
        if k:
            t = torch.tensor(targets)
            mb.positions_BP[b, p:p + k] = at + t - 1 - n0
            mb.targets_BP[b, p:p + k] = torch.tensor([s.tokens[j] for j in targets])
            mb.behaviour_BP[b, p:p + k] = torch.tensor([s.behaviour_logprobs[j] for j in targets], dtype=torch.float32)
            mb.advantages_BP[b, p:p + k] = batch.advantages[i]
            mb.valid_BP[b, p:p + k] = True
            (mb.sft_mask_BP if batch.sft[i] else mb.mask_BP)[b, p:p + k] = True
        at, p = at + n, p + k
