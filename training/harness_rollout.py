"""Rollouts in the agent's own harness: a task set (the bug-fix family's train split by default)
run by the editor's agent loop in sandboxed environments, graded with hidden tests, scored, and
read back from the session logs token for token. With `rollout.guided`, that share of the jobs
start at the task's edit: the gold script plays the turns before it (training/guided.py).

    source = HarnessSource(config, tokenizer, model_config, run_dir)   # logs in run_dir/sessions
    await source.sync(sync_tensors(trainer.model), version)    # training/weights.py
    group = await source.run(job=7, version)

Job k runs task k mod n of the task set (in an order shuffled once by the run's seed)
`rollout.group_size` times, each attempt with its own sampler seed, through training/run.py's
`run_task` (environment, session, grading, the grade written to the log as an outcome). Every
attempt's session log becomes trajectory segments (training/trajectories.py: the engine's own
prompt and completion ids, loss mask, behaviour logprobs, routed experts) and each segment a
Sample with the attempt's reward from training/rewards.py's `score`. An attempt the
infrastructure failed keeps its tokens with reward NaN (masked, never scored 0); one that left no
log (its environment never came up) gives no sample.

All attempts share one in-process engine (it batches them), whose weights arrive by `sync`
(Engine.load_weights, tagged with the version the logs then record). Held-out tasks are refused:
a task set whose name or file says held-out, or any task of a `*-heldout.jsonl` suite.

Tests: .venv/bin/python -m pytest tests/training/test_harness_rollout.py
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from agent.loop import LoopConfig
from agent.policy import EnginePolicy
from agent.session_log import read_session
from model.adapter import LowRank, residual_tensors, split_residuals
from model.config import ModelConfig
from model.engine import Engine
from model.hf import load_hf_state_dict
from model.quant import quantize_model
from model.transformer import Transformer
from training.buffer import Group, Sample
from training.config import RLConfig
from training.data import SUITES, heldout_tasks
from training.guided import GuidedPolicy, guided_job, lead_turns
from training.rewards import efficiency, score
from training.run import RunConfig, TaskRun, run_task
from training.tasks import Task, load_tasks
from training.trajectories import session_segments


def train_tasks(name_or_path: str) -> list[Task]:
    """The task set by suite name (training/data/suites/NAME.toml) or JSONL path; ValueError for
    an empty set or one holding held-out benchmark tasks."""
    path = Path(name_or_path)
    if path.suffix == ".jsonl":
        tasks = load_tasks(path)
    elif not (SUITES / f"{name_or_path}.toml").is_file():
        names = sorted(p.stem for p in SUITES.glob("*.toml"))
        raise ValueError(f"unknown task set {name_or_path!r}: not a .jsonl file, and the suites are {names} "
                         "(or 'toy')")
    else:
        from training.eval.suite import load_suite  # the benchmark's suites

        tasks = load_suite(name_or_path).tasks()
    heldout = heldout_tasks(SUITES)
    leaked = sorted(t.instance_id for t in tasks if t.instance_id in heldout)
    if "heldout" in path.name or leaked:
        raise ValueError(f"task set {name_or_path!r} holds held-out benchmark tasks ({leaked[:3]}...); "
                         "train on a train split")
    if not tasks:
        raise ValueError(f"task set {name_or_path!r} is empty")
    return tasks


def ordered_tasks(name_or_path: str, seed: int) -> list[Task]:
    """The train tasks in the run's order (shuffled once by `seed`): job k runs task k mod n, the
    warm start acts out the first ones."""
    tasks = train_tasks(name_or_path)
    random.Random(seed).shuffle(tasks)
    return tasks


def attempt_seed(seed: int, job: int, attempt: int) -> int:
    return (seed * 1_000_003 + job * 1_009 + attempt) % (2**31)


def segment_routing(routed: list) -> np.ndarray | None:
    """(positions, L, k) uint8 experts for Sample.routing when the engine recorded every fed
    position (all but the last token, which is never fed: it copies its neighbour); else None
    (the trainer's router decides)."""
    fed = routed[:-1]
    if not fed or any(r is None for r in fed):
        return None
    return np.asarray([*fed, fed[-1]], dtype=np.uint8)


def samples_of(run: TaskRun, version: int, temperature: float) -> list[Sample]:
    """One attempt's Samples (one per trajectory segment of its log), all with its reward."""
    if run.log_path is None or not run.log_path.is_file():
        return []
    records = read_session(run.log_path)
    reward = score(records, run.grade).reward
    eff = efficiency(records)
    stats = {"turns": eff.turns, "tool_calls": eff.tool_calls, "parallel_calls": eff.parallel_calls,
             "resolved": float(bool(run.grade.resolved))}
    segments, _ = session_segments(records)
    samples = []
    for seg in segments:
        if not seg.trainable:
            continue
        samples.append(Sample(
            tokens=list(seg.token_ids), mask=[bool(m) for m in seg.loss_mask],
            behaviour_logprobs=[math.nan if lp is None else float(lp) for lp in seg.logprobs],
            reward=math.nan if reward is None else float(reward), weight_version=version,
            temperature=temperature, routing=segment_routing(seg.routed_experts), stats=stats,
        ))
    return samples


class HarnessSource:
    """Rollout source (training/rollout.py's protocol) over a task set in the agent harness."""

    def __init__(self, config: RLConfig, tokenizer, model_config: ModelConfig, run_dir: Path) -> None:
        """Session logs go to `run_dir`/sessions, environments' state and bases to `run_dir`/envs."""
        r = config.rollout
        if not 0.0 <= r.guided <= 1.0:
            raise ValueError(f"rollout.guided is a share of the jobs, from 0 to 1, not {r.guided}")
        self.config, self.log_dir = config, Path(run_dir) / "sessions"
        self.tasks = ordered_tasks(r.tasks, config.train.seed)
        self.tokenizer, self.model_config = tokenizer, model_config
        self.engine: Engine | None = None  # built from the first weights `sync` brings
        self.adapted = False  # whether the engine keeps a LoRA adapter beside its int4 weights
        self.policy: EnginePolicy | None = None
        loop = LoopConfig(max_steps=r.max_turns, max_tokens_per_step=r.max_tokens, temperature=r.temperature,
                          top_p=r.top_p)
        envs = Path(run_dir) / "envs"
        self.run_config = RunConfig(log_dir=self.log_dir, session={"loop": loop},
                                    timeout_s=r.attempt_timeout_s, state_dir=str(envs / "state"),
                                    base_dir=str(envs / "bases"))

    def task_of(self, job: int) -> Task:
        return self.tasks[job % len(self.tasks)]

    async def run(self, job: int, version: int) -> Group:
        if self.policy is None:
            raise RuntimeError("no weights yet: call sync before run")
        task, r = self.task_of(job), self.config.rollout
        configs = [
            replace(self.run_config, session={**self.run_config.session, "loop": replace(
                self.run_config.session["loop"], seed=attempt_seed(self.config.train.seed, job, i))})
            for i in range(r.group_size)
        ]
        lead = lead_turns(task) if guided_job(job, r.guided) else None
        async with self.run_config.scheduler(r.group_size) as scheduler:
            runs = await asyncio.gather(*(
                run_task(task, self.policy if lead is None else GuidedPolicy(self.policy, lead), config=c,
                         scheduler=scheduler) for c in configs))
        samples = [s for run in runs for s in await asyncio.to_thread(samples_of, run, version, r.temperature)]
        return Group(job, version, samples)

    async def sync(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """training.weights.sync_tensors' tensors. An int4 engine built with the LoRA's residuals
        keeps them beside its int4 base and takes only new residuals afterwards; a full-precision
        engine takes the merged weights."""
        merged, adapter = split_residuals(weights)
        if self.engine is None:
            await asyncio.to_thread(self._build_engine, merged, adapter, version)
        elif self.adapted:
            if not adapter:
                raise ValueError("this rollout engine keeps a LoRA adapter beside its int4 weights; "
                                 "send its residuals (training.weights.sync_tensors)")
            await asyncio.to_thread(self.engine.load_weights, residual_tensors(adapter), version)
        else:
            await asyncio.to_thread(self.engine.load_weights, merged, version)

    def _build_engine(self, weights: dict[str, torch.Tensor], adapter: dict[str, LowRank], version: int) -> None:
        """The rollout engine on the first weights: built on the meta device and filled from
        them, then quantized, an adapter kept beside the int4 matrices (no random initialisation:
        one full copy of the model at a time)."""
        r = self.config.rollout
        with torch.device("meta"):
            model = Transformer(self.model_config)
        model = model.to_empty(device="cpu")
        model.init_buffers()
        load_hf_state_dict(model, weights, source="trainer weights")
        model = quantize_model(model.eval(), r.engine_quantize, adapter=adapter)
        self.adapted = r.engine_quantize != "none" and bool(adapter)
        self.engine = Engine(model, self.tokenizer, max_batch=r.group_size * max(1, r.workers), weight_version=version)
        self.policy = EnginePolicy(self.engine, model_id="composer-mini-rl", record_routing=True)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
