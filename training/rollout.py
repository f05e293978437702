"""Rollout sources: where the buffer's groups come from. A source runs job k (a task and its
seeds, fixed by the job number) with the weights it holds and returns a `Group`; `sync` gives it
new weights. The loop (training/rl.py) only sees this protocol, so in-process engines and Ray
actors are the same code path to it.

    source = make_source(config, tokenizer, model)
    group = await source.run(job=7, version=3)
    await source.sync(trainer.model, version=4)
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import torch

from model.engine import Engine
from model.transformer import Transformer
from training.buffer import Group
from training.config import RLConfig
from training.weights import push_to_engine, supports_live_load


class RolloutSource(Protocol):
    async def run(self, job: int, version: int) -> Group: ...

    async def sync(self, model: torch.nn.Module, version: int) -> None: ...


class ToySource:
    """training/toy.py's task on an in-process engine of the trainer's architecture (fp32)."""

    def __init__(self, config: RLConfig, tokenizer, model: Transformer) -> None:
        self.config = config
        replica = Transformer(model.config).to(next(model.parameters()).dtype)
        self.engine = Engine(replica, tokenizer, max_batch=config.rollout.group_size, max_seq_len=1024)
        push_to_engine(self.engine, model, version=0)

    async def run(self, job: int, version: int) -> Group:
        from training.toy import toy_rollout

        r = self.config.rollout
        return await asyncio.to_thread(
            toy_rollout, self.engine, job, r.group_size, version, r, self.config.train.seed
        )

    async def sync(self, model: torch.nn.Module, version: int) -> None:
        await asyncio.to_thread(push_to_engine, self.engine, model, version)

    def close(self) -> None:
        self.engine.close()


def make_source(config: RLConfig, tokenizer, model: Transformer) -> RolloutSource:
    if config.buffer.max_offpolicy_steps > 0 and config.rollout.backend == "engine" and not supports_live_load(Engine):
        raise ValueError(
                "asynchronous rollouts (max_offpolicy_steps > 0) need Engine.load_weights to swap "
                "weights under running requests; use max_offpolicy_steps=0"
            )
    if config.rollout.tasks == "toy":
        return ToySource(config, tokenizer, model)
    raise ValueError(f"unknown task set {config.rollout.tasks!r}; this build knows: toy")
