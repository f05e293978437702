"""The scheduler's Ray backend: the same Job/JobResult API, with each job's stages executed by a
Ray actor that holds a Runner (base pool, environments, reaping) on its machine.

    sched = Scheduler(backend="ray", actors=4, cpus_per_actor=0.5, address=None,
                      init={"num_cpus": 2})          # ray.init(**init) unless Ray is running
    await sched.start()        # creates the actors; each reaps its machine's stale sandboxes

The driver keeps the queue and the CPU admission (over the cluster's CPUs unless `cpus` is
given); Ray places the actors by their fractional `num_cpus` (`cpus_per_actor`, default the
cluster's CPUs over the number of actors), so many machines fill up as their CPUs allow. A job
stays on one actor from setup to grade (its environment lives there); a new job goes to the
actor with the fewest jobs. An actor that dies (RayActorError) is replaced, and a fresh actor's
start() reaps what the dead one left on that machine; the job is retried elsewhere.

`Job.run` travels by cloudpickle: a module-level function of an importable module, or a closure
(`ray.cloudpickle.register_pickle_by_value(module)` for modules workers cannot import).

Tests: .venv/bin/python -m pytest tests/training/test_envs.py -k ray
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from training.envs.env import BaseSpec
from training.envs.scheduler import Job, Outcome, Runner

log = logging.getLogger(__name__)

DEFAULT_INIT = {"include_dashboard": False, "log_to_driver": False}
_HEALTH_TIMEOUT_S = 30


class RunnerActor:
    """A Runner behind a Ray actor (async methods: one actor serves many environments)."""

    def __init__(self, **runner_args: Any) -> None:
        self.runner = Runner(**runner_args)

    async def start(self) -> dict[str, Any]:
        return await self.runner.start()

    async def setup(self, job: Job) -> Outcome:
        return await self.runner.setup(job)

    async def run(self, job_id: str) -> Outcome:
        return await self.runner.run(job_id)

    async def grade(self, job_id: str) -> Outcome:
        return await self.runner.grade(job_id)

    async def finish(self, job_id: str) -> None:
        await self.runner.finish(job_id)

    async def prepare(self, specs: Sequence[BaseSpec]) -> list[str]:
        return await self.runner.prepare(specs)

    async def health(self) -> dict[str, Any]:
        return await self.runner.health()

    async def close(self) -> None:
        await self.runner.close()


class RayBackend:
    def __init__(self, *, runner_args: dict[str, Any], actors: int | None = None,
                 cpus_per_actor: float | None = None, address: str | None = None,
                 init: dict[str, Any] | None = None, actor_concurrency: int = 1000) -> None:
        self.runner_args, self.num_actors, self.cpus_per_actor = runner_args, actors, cpus_per_actor
        self.address, self.init, self.actor_concurrency = address, init or {}, actor_concurrency
        self.cpus: float | None = None
        self.actors: list[Any] = []
        self.names: dict[Any, str] = {}
        self.load: dict[Any, int] = {}
        self._owns_ray = False

    async def start(self) -> list[dict[str, Any]]:
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, **{**DEFAULT_INIT, **self.init})
            self._owns_ray = True
        self.cpus = float(ray.cluster_resources().get("CPU", 1.0))
        count = self.num_actors or max(1, int(self.cpus))
        self.cpus_per_actor = self.cpus_per_actor or self.cpus / count
        self._actor_class = ray.remote(RunnerActor)
        return list(await asyncio.gather(*(self._spawn() for _ in range(count))))

    async def _spawn(self) -> dict[str, Any]:
        actor = self._actor_class.options(num_cpus=self.cpus_per_actor,
                                          max_concurrency=self.actor_concurrency).remote(**self.runner_args)
        report = await actor.start.remote()
        self.actors.append(actor)
        self.names[actor], self.load[actor] = report["worker"], 0
        return report

    def pick(self, job: Job, avoid: str | None) -> Any:
        candidates = [a for a in self.actors if self.names[a] != avoid] or self.actors
        actor = min(candidates, key=lambda a: self.load[a])
        self.load[actor] += 1
        return actor

    def release(self, actor: Any) -> None:
        if actor in self.load:
            self.load[actor] -= 1

    async def call(self, method: Any, *args: Any) -> Any:
        return await method.remote(*args)

    async def prepare(self, specs: Sequence[BaseSpec]) -> None:
        await asyncio.gather(*(a.prepare.remote(list(specs)) for a in self.actors))

    async def _alive(self, actor: Any) -> dict[str, Any] | None:
        try:
            return await asyncio.wait_for(actor.health.remote(), _HEALTH_TIMEOUT_S)
        except Exception as err:  # RayActorError, timeout: the actor is gone or hung
            log.warning("envs: ray actor %s failed its health check: %s", self.names.get(actor), err)
            return None

    async def replace(self, actor: Any) -> None:
        """Swaps `actor` for a fresh one when it no longer answers."""
        import ray

        if actor not in self.load or await self._alive(actor) is not None:
            return
        self.actors.remove(actor)
        self.load.pop(actor, None)
        self.names.pop(actor, None)
        ray.kill(actor, no_restart=True)
        await self._spawn()

    async def health(self) -> list[dict[str, Any]]:
        reports = []
        for actor in list(self.actors):
            report = await self._alive(actor)
            if report is None:
                reports.append({"worker": self.names.get(actor), "dead": True})
                await self.replace(actor)
            else:
                reports.append(report)
        return reports

    async def close(self) -> None:
        import ray

        await asyncio.gather(*(a.close.remote() for a in self.actors), return_exceptions=True)
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors.clear()
        if self._owns_ray:
            ray.shutdown()
