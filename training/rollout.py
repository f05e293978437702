"""Rollout sources: where the buffer's groups come from. A source runs job k (a task and its
seeds, fixed by the job number) with the weights it holds and returns a `Group`; `sync` gives it
new weights. The loop (training/rl.py) only sees this protocol, so in-process engines and Ray
actors are the same code path to it.

    source = make_source(config, tokenizer, model.config)
    await source.sync(sync_tensors(trainer.model), version=0)      # training/weights.py
    group = await source.run(job=7, version=0)
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import torch

from model.config import ModelConfig
from model.engine import Engine
from model.transformer import Transformer
from training.buffer import Group
from training.config import RLConfig
from training.weights import push_to_engine, supports_live_load


class RolloutSource(Protocol):
    async def run(self, job: int, version: int) -> Group:
        """Job `job` sampled with the weights of `version` (the last `sync`)."""
        ...

    async def sync(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """New weights (HF names, merged and gathered, plus a LoRA's residuals: training.weights.sync_tensors)."""
        ...

    def close(self) -> None: ...


class ToySource:
    """training/toy.py's task on an in-process engine (fp32) of the given architecture; its
    weights arrive by `sync`."""

    def __init__(self, config: RLConfig, tokenizer, model_config: ModelConfig) -> None:
        self.config = config
        self.engine = Engine(Transformer(model_config), tokenizer, max_batch=config.rollout.group_size,
                             max_seq_len=min(1024, model_config.max_position_embeddings))

    async def run(self, job: int, version: int) -> Group:
        from training.toy import toy_rollout

        r = self.config.rollout
        return await asyncio.to_thread(
            toy_rollout, self.engine, job, r.group_size, version, r, self.config.train.seed
        )

    async def sync(self, weights: dict[str, torch.Tensor], version: int) -> None:
        await asyncio.to_thread(push_to_engine, self.engine, weights, version)

    def close(self) -> None:
        self.engine.close()


class _SourceActor:
    """A source inside a Ray actor (async methods: one actor runs several jobs at once)."""

    def __init__(self, factory: Callable[[], RolloutSource]) -> None:
        self.source = factory()

    async def run(self, job: int, version: int) -> Group:
        return await self.source.run(job, version)

    async def sync(self, weights: dict[str, torch.Tensor], version: int) -> None:
        await self.source.sync(weights, version)


class RaySource:
    """`actors` copies of a source (each with its own engine and environments) as Ray actors,
    placed by Ray on this machine or a cluster (`address`); jobs go to the actor with the fewest
    running, weights to all of them through the object store (one copy per node). The loop
    sees the same protocol as an in-process source."""

    def __init__(self, factory: Callable[[], RolloutSource], actors: int = 1, cpus_per_actor: float = 1.0,
                 address: str | None = None) -> None:
        import ray

        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        remote = ray.remote(num_cpus=cpus_per_actor)(_SourceActor)
        self.actors = [remote.remote(factory) for _ in range(actors)]
        self.busy = [0] * actors

    async def run(self, job: int, version: int) -> Group:
        i = self.busy.index(min(self.busy))
        self.busy[i] += 1
        try:
            return await self.actors[i].run.remote(job, version)
        finally:
            self.busy[i] -= 1

    async def sync(self, weights: dict[str, torch.Tensor], version: int) -> None:
        import ray

        ref = ray.put(weights)
        await asyncio.gather(*(actor.sync.remote(ref, version) for actor in self.actors))

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)


def make_source(config: RLConfig, tokenizer, model_config: ModelConfig, run_dir: Path | None = None) -> RolloutSource:
    """The configured task set on the configured backend ("engine": in this process; "ray":
    `rollout.workers` actors): "toy" (training/toy.py), else a suite or tasks file run in the
    agent harness (training/harness_rollout.py), its session logs and environments under `run_dir`."""
    r = config.rollout
    if config.buffer.max_offpolicy_steps > 0 and r.backend == "engine" and not supports_live_load(Engine):
        raise ValueError(
            "asynchronous rollouts (max_offpolicy_steps > 0) need Engine.load_weights to swap "
            "weights under running requests; use max_offpolicy_steps=0"
        )
    if r.tasks == "toy":
        factory = functools.partial(ToySource, config, tokenizer, model_config)
    else:
        from training.harness_rollout import HarnessSource

        factory = functools.partial(HarnessSource, config, tokenizer, model_config, run_dir or Path(config.checkpoint.dir))
    if r.backend == "ray":
        return RaySource(factory, actors=r.workers)
    if r.backend == "engine":
        return factory()
    raise ValueError(f"rollout backend {r.backend!r} does not run task set {r.tasks!r}")
