"""Samples, groups, and the bounded-staleness buffer between rollout workers and the trainer.

    buf = StalenessBuffer(groups_per_step=4, max_offpolicy_steps=1, journal=run_dir / "groups.jsonl")
    while (job := buf.next_job()) is not None:       # admission control: None = at capacity
        ...start rollout `job` with the current weights (version buf.version)...
    buf.admit(group)                                 # a finished group (journaled, fsynced)
    groups = await buf.take()                        # the next update's groups (oldest first)
    buf.advance(consumed=groups)                     # the update is done: version + 1

Staleness is bounded by admission, not by dropping (SkyRL's and AReaL's rule): job k (the k-th
group ever started, 0-based) may start only while k < (max_offpolicy_steps + version + 1) *
groups_per_step. With max_offpolicy_steps = 0 that is exactly one update's groups per version:
synchronous RL, every sample drawn with the weights it trains. A group that still comes back
older than `version - max_offpolicy_steps` (a straggler) is dropped, journaled as dropped and
counted, and its job is not issued again.

Jobs are numbered and each number names its task and seeds (the caller's `job_task`), so a
run is a function of its seed. The journal (JSONL, one finished or dropped group per line,
flushed and fsynced, a torn last line ignored) makes a run survive `kill -9` without losing or
duplicating a sample: on resume, the groups consumed by the checkpoint's updates stay consumed,
journaled groups not consumed by them are pending again, and jobs neither journaled nor
consumed (in flight at the crash) are issued again.

Tests: .venv/bin/python -m pytest tests/training/test_buffer.py
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class Sample:
    """One trajectory segment as the trainer reads it: a token stream (the prompt and every
    turn, tool outputs included) and which of its tokens the policy sampled."""

    tokens: list[int]
    mask: list[bool]
    """True where the policy sampled the token (not the prompt, tool output or a forced token)."""
    behaviour_logprobs: list[float]
    """mu per token, aligned with tokens; NaN where the behaviour is unknown or mask is False."""
    reward: float
    """NaN: masked (an infrastructure failure: environment, the attempt's clock, grading), never
    scored as zero."""
    weight_version: int = 0
    """The policy version that sampled it (-1: another model)."""
    off_policy: bool = False
    """No comparable logprobs: trained by reward-filtered likelihood (training/loss.py choice 7)."""
    temperature: float = 1.0
    """The sampling temperature its logprobs are scaled by."""
    routing: np.ndarray | None = None
    """(len(tokens), L, k) uint8 experts each position was routed to, or None."""
    stats: dict = field(default_factory=dict)
    """Per-rollout numbers for the logs: turns, tool_calls, parallel_calls, ..."""

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if len(self.mask) != n or len(self.behaviour_logprobs) != n:
            raise ValueError(
                f"sample fields disagree: {n} tokens, {len(self.mask)} mask entries, "
                f"{len(self.behaviour_logprobs)} behaviour logprobs"
            )
        if self.routing is not None and self.routing.shape[0] != n:
            raise ValueError(f"routing covers {self.routing.shape[0]} positions, the sample has {n} tokens")

    @property
    def num_policy_tokens(self) -> int:
        return sum(self.mask)

    def to_json(self) -> dict:
        out = asdict(self) | {"routing": None}
        out["behaviour_logprobs"] = [None if not math.isfinite(x) else x for x in self.behaviour_logprobs]
        out["reward"] = None if math.isnan(self.reward) else self.reward
        if self.routing is not None:
            r = np.ascontiguousarray(self.routing, dtype=np.uint8)
            out["routing"] = {"shape": list(r.shape), "b64": base64.b64encode(r.tobytes()).decode()}
        return out

    @classmethod
    def from_json(cls, data: dict) -> Sample:
        data = dict(data)
        routing = data.pop("routing", None)
        if routing is not None:
            raw = np.frombuffer(base64.b64decode(routing["b64"]), dtype=np.uint8)
            routing = raw.reshape(routing["shape"]).copy()
        data["behaviour_logprobs"] = [math.nan if x is None else x for x in data["behaviour_logprobs"]]
        data["reward"] = math.nan if data["reward"] is None else data["reward"]
        return cls(**data, routing=routing)


@dataclass
class Group:
    """The samples of one job: one task rolled out group_size times with one weight version."""

    job: int
    version: int
    samples: list[Sample]
    dropped: str = ""
    """Why the buffer dropped it ("stale"), or empty."""

    def to_json(self) -> dict:
        return {"job": self.job, "version": self.version, "dropped": self.dropped,
                "samples": [s.to_json() for s in self.samples]}

    @classmethod
    def from_json(cls, data: dict) -> Group:
        return cls(data["job"], data["version"], [Sample.from_json(s) for s in data["samples"]], data["dropped"])


def read_journal(path: Path) -> list[Group]:
    """Every complete line of a journal; a torn last line (a crash mid-write) is ignored."""
    if not path.is_file():
        return []
    groups = []
    lines = path.read_bytes().split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            groups.append(Group.from_json(json.loads(line)))
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            if number == len(lines):  # the torn tail of a kill -9
                break
            raise ValueError(f"{path}:{number}: not a journal record ({err})") from None
    return groups


class StalenessBuffer:
    def __init__(
        self,
        groups_per_step: int,
        max_offpolicy_steps: int,
        *,
        journal: Path | None = None,
        version: int = 0,
        consumed: Iterable[int] = (),
    ) -> None:
        """`version` and `consumed` (the jobs the checkpoint's updates used) resume a run; the
        journal then supplies the groups finished but not consumed."""
        if groups_per_step < 1 or max_offpolicy_steps < 0:
            raise ValueError(
                f"groups_per_step must be >= 1 and max_offpolicy_steps >= 0, got {groups_per_step} "
                f"and {max_offpolicy_steps}"
            )
        self.groups_per_step, self.max_offpolicy_steps = groups_per_step, max_offpolicy_steps
        self.version = version
        self.consumed: set[int] = set(consumed)
        self.journal = journal
        self.pending: list[Group] = []
        self.finished: set[int] = set(self.consumed)  # jobs never to be issued again
        self.dropped_stale = 0
        if journal is not None:
            self._truncate_torn_tail(journal)
            groups = read_journal(journal)
            dropped = {g.job for g in groups if g.dropped}
            self.finished.update(g.job for g in groups)
            self.pending = [g for g in groups if g.job not in dropped | self.consumed]
        self.running: set[int] = set()
        self._next = 0
        self._changed = asyncio.Event()

    # ---- producers ------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Jobs that may have started by now: (max_offpolicy_steps + version + 1) * groups_per_step."""
        return (self.max_offpolicy_steps + self.version + 1) * self.groups_per_step

    def next_job(self) -> int | None:
        """The next job number to start with the current weights, or None while at capacity.
        Jobs already finished (journaled, consumed) are skipped, in-flight ones re-issued."""
        while self._next in self.finished:
            self._next += 1
        if self._next >= self.capacity:
            return None
        job = self._next
        self._next += 1
        self.running.add(job)
        return job

    def admit(self, group: Group) -> None:
        """A finished group: journaled first, then pending (or dropped when too stale)."""
        self.running.discard(group.job)
        if group.job in self.finished:
            raise ValueError(f"job {group.job} was already finished; a sample would be duplicated")
        if group.version < self.version - self.max_offpolicy_steps:
            group.dropped = "stale"
            self.dropped_stale += 1
        self._append(group)
        self.finished.add(group.job)
        if not group.dropped:
            self.pending.append(group)
        self._changed.set()

    # ---- the trainer ----------------------------------------------------------------------------

    def ready(self) -> bool:
        return len(self.pending) >= self.groups_per_step

    async def take(self) -> list[Group]:
        """The next update's groups: the oldest versions first (then job order), waiting until
        enough have finished."""
        while not self.ready():
            self._changed.clear()
            await self._changed.wait()
        self.pending.sort(key=lambda g: (g.version, g.job))
        taken, self.pending = self.pending[: self.groups_per_step], self.pending[self.groups_per_step :]
        return taken

    def advance(self, consumed: list[Group]) -> None:
        """An update finished: its groups are consumed, the policy version moves on (and with it
        the capacity); stale pending groups are dropped."""
        self.consumed.update(g.job for g in consumed)
        self.version += 1
        keep = []
        for group in self.pending:
            if group.version < self.version - self.max_offpolicy_steps:
                self.dropped_stale += 1
                self._append(Group(group.job, group.version, [], "stale"))  # overrides its record
            else:
                keep.append(group)
        self.pending = keep
        self._changed.set()

    def state(self) -> dict:
        """What a checkpoint records (with the journal beside it)."""
        return {"version": self.version, "consumed": sorted(self.consumed)}

    # ---- journal --------------------------------------------------------------------------------

    def _append(self, group: Group) -> None:
        if self.journal is None:
            return
        line = (json.dumps(group.to_json(), separators=(",", ":")) + "\n").encode()
        with open(self.journal, "ab") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    @staticmethod
    def _truncate_torn_tail(path: Path) -> None:
        """Cuts a partial last line (kill -9 mid-write) so the next append starts a fresh line."""
        if not path.is_file():
            return
        data = path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            with open(path, "r+b") as f:
                f.truncate(end)
