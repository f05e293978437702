"""`python -m training.rl`: reinforcement learning of the policy in its own harness.

    python -m training.rl --preset smoke                  # composer-mini, this CPU, < 10 minutes
    python -m training.rl --preset debug --checkpoint.dir runs/d    # the tiny model on the toy task
    python -m training.rl --preset cpu --train.steps 60   # any field after the preset (--help)

Independent parts joined by a bounded buffer (training/buffer.py): rollout workers run jobs
through a source (training/rollout.py) while the trainer (training/trainer.py) consumes groups
and pushes new weights (training/weights.py). Before RL, `train.warm_start_steps` supervised
updates on demonstrations go through the same loss (its off-policy likelihood term). Logged
sessions (`--rollout.replay-logs DATASET`, training/logged.py: editor sessions, the person's
corrections of edits) join the demonstrations, and each RL update trains on the next
`rollout.group_size` of them too, by the same likelihood term.

A run directory (`--checkpoint.dir`) holds `config.json`, the group journal `groups.jsonl`,
`metrics.jsonl`, TensorBoard events in `tb/`, `checkpoints/` and, at the end, the merged model
in `final/` and `plot.png`. Rerunning the same command resumes from the latest checkpoint: with
max_offpolicy_steps = 0 it ends exactly where an uninterrupted run ends; asynchronous runs lose
and duplicate no sample (the journal).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from training.buffer import Group, StalenessBuffer
from training.checkpoint import Checkpointer, export_model
from training.config import PRESETS, RLConfig
from training.distributed import broadcast_groups, end_rank, init_from_env, shard_model
from training.logged import logged_samples
from training.logged import take as take_logged
from training.lora import save_adapter
from training.memory import release_freed_memory
from training.metrics import RunLog, plot_run
from training.rollout import RolloutSource, make_source
from training.trainer import Trainer, load_policy, resolve_model_path
from training.weights import sync_tensors


@dataclasses.dataclass
class Run:
    """Everything one run holds, built by `setup`. Under torchrun only rank 0 has a source, a
    buffer and a log; every rank trains."""

    config: RLConfig
    dir: Path
    trainer: Trainer
    tokenizer: object
    checkpoints: Checkpointer
    source: RolloutSource | None = None
    buffer: StalenessBuffer | None = None
    log: RunLog | None = None
    group: dist.ProcessGroup | None = None
    logged: list = dataclasses.field(default_factory=list)
    """Samples of the logged sessions in `rollout.replay_logs` (training/logged.py), on every rank."""

    @property
    def leader(self) -> bool:
        return self.group is None or dist.get_rank(self.group) == 0


def load_tokenizer(config: RLConfig):
    path = resolve_model_path(config.model.path)
    if path is None:
        from training.toy import byte_tokenizer

        return byte_tokenizer()
    from model.tokenizer import Tokenizer

    return Tokenizer.from_dir(path)


def setup(config: RLConfig) -> Run:
    """Builds the run, resuming from the latest checkpoint. Under torchrun (WORLD_SIZE > 1) the
    model is sharded with FSDP2 after the checkpoint's full weights are loaded."""
    group = init_from_env()
    leader = group is None or dist.get_rank(group) == 0
    run_dir = Path(config.checkpoint.dir)
    if leader:
        run_dir.mkdir(parents=True, exist_ok=True)
        _record_config(run_dir, config)
    torch.manual_seed(config.train.seed)
    tokenizer = load_tokenizer(config)
    model = load_policy(config.model, config.train.seed, vocab_size=tokenizer.vocab_size)
    model = model.to(_device(config.train.device))
    checkpoints = Checkpointer(run_dir / "checkpoints", keep=config.checkpoint.keep, is_writer=leader)
    latest = checkpoints.latest() if config.checkpoint.resume else None
    if group is not None:
        if config.model.lora_rank:
            raise ValueError("LoRA is not supported under torchrun (FSDP2); train the full model or use one process")
        if latest is not None:
            checkpoints.load_weights(latest, model)
        shard_model(model)
    opening = None if config.model.instructions_gradient else tokenizer.user_turn_opening()
    trainer = Trainer(config, model, group, user_turn_opening=opening)
    extra: dict = {}
    if latest is not None:
        if group is None:
            checkpoints.load_weights(latest, trainer.model)
        extra = checkpoints.load_state(latest, trainer)
    run = Run(config, run_dir, trainer, tokenizer, checkpoints, group=group)
    weights = sync_tensors(trainer.model)  # a collective: every rank
    if leader:
        run.buffer = StalenessBuffer(
            config.rollout.tasks_per_step, config.buffer.max_offpolicy_steps,
            journal=run_dir / "groups.jsonl", **extra.get("buffer", {}),
        )
        run.source = make_source(config, tokenizer, model.config, run_dir)
        asyncio.run(run.source.sync(weights, trainer.step))
        run.log = RunLog(run_dir, start_step=trainer.step)
    run.logged = logged_samples(config.rollout.replay_logs, tokenizer,  # every rank: the warm start's batches
                                max_tokens=model.config.max_position_embeddings)
    return run


def _device(name: str) -> torch.device:
    if name == "cuda" and dist.is_initialized():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device(name)


def _record_config(run_dir: Path, config: RLConfig) -> None:
    path = run_dir / "config.json"
    text = json.dumps(dataclasses.asdict(config), indent=2, default=list) + "\n"
    if path.is_file() and path.read_text() != text:
        print(f"training.rl: {path} differs from this run's config; continuing with this one", file=sys.stderr)
    tmp = path.with_name("config.json.tmp")
    tmp.write_text(text)
    tmp.replace(path)


# ---- phases -------------------------------------------------------------------------------------


def warm_start(run: Run, progress) -> None:
    """Supervised updates on demonstrations until `warm_start_steps` (resumable: the trainer's
    step counts them)."""
    cfg = run.config
    if cfg.train.warm_start_steps <= run.trainer.step:
        return
    if cfg.train.warm_start == "logs" and not run.logged:
        raise ValueError("--train.warm-start logs needs --rollout.replay-logs DATASET (`python -m training.data build`)")
    demos = ([] if cfg.train.warm_start == "logs" else demonstrations(run)) + run.logged
    demos = [s for s in demos if s.reward >= cfg.loss.sft_min_reward]  # the rest would not train (NaN: masked)
    if not demos:
        raise ValueError(f"no demonstration has a reward of at least --loss.sft-min-reward {cfg.loss.sft_min_reward}: "
                         "the warm start would train on nothing (`python -m training.data build` reports the rewards)")
    size = cfg.train.warm_start_batch or cfg.rollout.tasks_per_step * cfg.rollout.group_size
    while run.trainer.step < cfg.train.warm_start_steps:
        start = (run.trainer.step * size) % len(demos)
        batch = (demos + demos)[start : start + min(size, len(demos))]
        metrics = run.trainer.update([Group(-1, -1, batch)], run.trainer.step)
        _after_update(run, metrics, progress)
    weights = sync_tensors(run.trainer.model)
    if run.leader:
        asyncio.run(run.source.sync(weights, run.trainer.step))
    del weights
    release_freed_memory()


def demonstrations(run: Run) -> list:
    """The warm start's samples: the toy task's, or the first `train.warm_start_tasks` train
    tasks (in the run's order) acted out in the harness, from their gold patches
    (training/demos.py) or by the stronger model at `train.endpoint` (training/teacher.py); built
    once and kept in RUN/demos for resumes."""
    cfg = run.config
    if cfg.train.warm_start not in ("gold", "endpoint"):
        raise ValueError(f"warm start {cfg.train.warm_start!r}: use gold, endpoint or logs")
    if cfg.rollout.tasks == "toy":
        if cfg.train.warm_start != "gold":
            raise ValueError("the toy task has gold demonstrations only (--train.warm-start gold)")
        from training.toy import demonstrations as toy_demonstrations

        return toy_demonstrations(run.tokenizer)
    from training.demos import cached_demonstrations, gold_demonstrations
    from training.harness_rollout import ordered_tasks

    if cfg.train.warm_start == "endpoint" and not cfg.train.endpoint:
        raise ValueError("--train.warm-start endpoint needs --train.endpoint URL (an OpenAI-compatible base URL)")
    tasks = ordered_tasks(cfg.rollout.tasks, cfg.train.seed)[: cfg.train.warm_start_tasks]
    if cfg.train.warm_start == "gold":
        return cached_demonstrations(run.dir / "demos", lambda d: gold_demonstrations(tasks, run.tokenizer, d))
    from training.teacher import endpoint_demonstrations

    return cached_demonstrations(run.dir / "demos", lambda d: endpoint_demonstrations(
        tasks, run.tokenizer, d, cfg.train.endpoint, model=cfg.train.endpoint_model or None))


def keep_reference(run: Run) -> None:
    """The KL reference is the policy the RL phase starts from (the warm start's result): taken at
    the first update of the run directory with `kl_coef` > 0 and kept beside the checkpoints, so
    a resumed run compares with the same one (every rank calls it: the gathers)."""
    if not run.checkpoints.load_reference(run.trainer):
        run.trainer.take_reference()
        run.checkpoints.save_reference(run.trainer)


async def reinforce(run: Run, progress) -> None:
    """The RL phase: producers keep `rollout.workers` jobs running within the buffer's capacity;
    the trainer takes each update's groups, steps, pushes weights, then advances the buffer."""
    cfg = run.config
    wake = asyncio.Event()
    running: set[asyncio.Task] = set()
    failures: list[BaseException] = []

    def finished(task: asyncio.Task) -> None:
        running.discard(task)
        if task.cancelled():
            return
        if task.exception() is not None:
            failures.append(task.exception())
        else:
            run.buffer.admit(task.result())
        wake.set()

    async def produce() -> None:
        while True:
            while len(running) < cfg.rollout.workers and (job := run.buffer.next_job()) is not None:
                task = asyncio.create_task(_run_job(run, job))
                running.add(task)
                task.add_done_callback(finished)
            wake.clear()
            await wake.wait()

    producer = asyncio.create_task(produce())
    try:
        while run.buffer.version < cfg.train.steps:
            take = asyncio.create_task(run.buffer.take())
            while not take.done():
                await asyncio.wait([take], timeout=0.5)
                if failures:
                    take.cancel()
                    raise failures[0]
            taken = take.result()
            if run.logged:  # the logged sessions' next samples, a group of their own
                taken = [*taken, Group(-1, run.buffer.version, take_logged(run.logged, run.trainer.step, cfg.rollout.group_size))]
            groups = broadcast_groups(taken, run.group)
            metrics = await asyncio.to_thread(run.trainer.update, groups, run.trainer.step)
            metrics["staleness"] = sum(run.buffer.version - g.version for g in groups) / len(groups)
            weights = await asyncio.to_thread(sync_tensors, run.trainer.model)
            await run.source.sync(weights, run.trainer.step)
            del weights  # else the next sync's copy is made while this one is held
            run.buffer.advance(groups)
            metrics["dropped_stale_total"] = float(run.buffer.dropped_stale)
            wake.set()
            _after_update(run, metrics, progress)
    finally:
        producer.cancel()
        for task in list(running):
            task.cancel()
        if run.group is not None:
            broadcast_groups(None, run.group)  # the other ranks stop following


def follow(run: Run) -> None:
    """A rank other than 0 in the RL phase: rank 0's groups, the same update, the same gathers."""
    while (groups := broadcast_groups(None, run.group)) is not None:
        metrics = run.trainer.update(groups, run.trainer.step)
        sync_tensors(run.trainer.model)
        _after_update(run, metrics, None)


async def _run_job(run: Run, job: int) -> Group:
    """Job `job` with the weights the source holds now; the group is stamped with the buffer's
    version (staleness counts updates), its samples with the weight version (optimizer steps)."""
    version = run.buffer.version
    group = await run.source.run(job, run.trainer.step)
    group.version = version
    return group


def _after_update(run: Run, metrics: dict[str, float], progress) -> None:
    release_freed_memory()  # training/memory.py: else GBs an update stay resident
    step = run.trainer.step
    if run.log is not None:
        run.log.write(step, metrics)
    if progress is not None:
        progress.update(1)
        progress.set_postfix(reward=f"{metrics.get('reward', float('nan')):.3f}")
    if step % run.config.checkpoint.every == 0:
        _checkpoint(run)


def _checkpoint(run: Run) -> None:
    """Every rank calls it (the gathers); rank 0 writes, with the buffer's state."""
    extra = {"buffer": run.buffer.state()} if run.buffer is not None else None
    run.checkpoints.save(run.trainer.step, run.trainer, run.tokenizer, extra=extra)


def finish(run: Run) -> Path:
    """The last checkpoint, the merged model (`final/`, plus `final/adapter` for LoRA) and the plot."""
    step = run.trainer.step
    latest = run.checkpoints.latest()
    if latest is None or latest.name != f"step_{step:06d}":
        _checkpoint(run)
    final = run.dir / "final"
    export_model(run.trainer.model, run.tokenizer, final, write=run.leader)
    if run.leader:
        if run.config.model.lora_rank:
            save_adapter(run.trainer.model, final / "adapter", base=run.config.model.path, step=step)
        plot_run(run.dir / "metrics.jsonl", run.dir / "plot.png", title=str(run.dir))
        run.log.close()
    return final


def train(config: RLConfig) -> Run:
    """The whole run (resuming when the run directory has a checkpoint)."""
    run = setup(config)
    total = config.train.warm_start_steps + config.train.steps
    progress = None
    if config.progress and run.leader:
        from tqdm import tqdm

        progress = tqdm(total=total, initial=run.trainer.step, desc="training.rl", unit="update")
    try:
        warm_start(run, progress)
        if config.loss.kl_coef > 0:
            keep_reference(run)
        if run.leader:
            asyncio.run(reinforce(run, progress))
        else:
            follow(run)
        finish(run)
    finally:
        if progress is not None:
            progress.close()
        if run.source is not None:
            run.source.close()
    return run


def parse_args(argv: list[str] | None = None) -> RLConfig:
    """`--preset NAME` picks the defaults; every other flag is a field of RLConfig (tyro)."""
    import tyro

    argv = list(sys.argv[1:] if argv is None else argv)
    preset = "smoke"
    if "--preset" in argv:
        i = argv.index("--preset")
        if i + 1 >= len(argv):
            raise SystemExit(f"--preset needs one of {sorted(PRESETS)}")
        preset = argv[i + 1]
        del argv[i : i + 2]
    if preset not in PRESETS:
        raise SystemExit(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    return tyro.cli(RLConfig, default=PRESETS[preset](), args=argv,
                    description=f"training.rl (defaults: preset {preset}; presets: {', '.join(PRESETS)})")


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    run = train(config)
    if run.leader:
        print(json.dumps({"run": str(run.dir), "steps": run.trainer.step, "final": str(run.dir / "final"),
                          "plot": str(run.dir / "plot.png")}))
    if run.group is not None:
        end_rank(run.group)
    return 0


if __name__ == "__main__":
    sys.exit(main())
