"""`python -m training.rl`: reinforcement learning of the policy in its own harness.

    python -m training.rl --preset smoke                  # composer-mini, this CPU, < 10 minutes
    python -m training.rl --preset debug --checkpoint.dir runs/d    # the tiny model on the toy task
    python -m training.rl --preset cpu --train.steps 60   # any field after the preset (--help)

Independent parts joined by a bounded buffer (training/buffer.py): rollout workers run jobs
through a source (training/rollout.py) while the trainer (training/trainer.py) consumes groups
and pushes new weights (training/weights.py). Before RL, `train.warm_start_steps` supervised
updates on demonstrations go through the same loss (its off-policy likelihood term).

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
import sys
from pathlib import Path

import torch

from training.buffer import Group, StalenessBuffer
from training.checkpoint import Checkpointer, export_model, full_tensors
from training.config import PRESETS, RLConfig
from training.lora import save_adapter
from training.metrics import RunLog, plot_run
from training.rollout import RolloutSource, make_source
from training.trainer import Trainer, load_policy, resolve_model_path


@dataclasses.dataclass
class Run:
    """Everything one run holds, built by `setup`."""

    config: RLConfig
    dir: Path
    trainer: Trainer
    tokenizer: object
    source: RolloutSource
    buffer: StalenessBuffer
    checkpoints: Checkpointer
    log: RunLog


def load_tokenizer(config: RLConfig):
    path = resolve_model_path(config.model.path)
    if path is None:
        from training.toy import byte_tokenizer

        return byte_tokenizer()
    from model.tokenizer import Tokenizer

    return Tokenizer.from_dir(path)


def setup(config: RLConfig) -> Run:
    run_dir = Path(config.checkpoint.dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    _record_config(run_dir, config)
    torch.manual_seed(config.train.seed)
    tokenizer = load_tokenizer(config)
    model = load_policy(config.model, config.train.seed, vocab_size=tokenizer.vocab_size)
    trainer = Trainer(config, model)
    checkpoints = Checkpointer(run_dir / "checkpoints", keep=config.checkpoint.keep)
    extra: dict = {}
    latest = checkpoints.latest() if config.checkpoint.resume else None
    if latest is not None:
        extra = checkpoints.load(latest, trainer)
    buffer = StalenessBuffer(
        config.rollout.tasks_per_step, config.buffer.max_offpolicy_steps,
        journal=run_dir / "groups.jsonl", **extra.get("buffer", {}),
    )
    source = make_source(config, tokenizer, trainer.model.config)
    asyncio.run(source.sync(full_tensors(trainer.model), trainer.step))
    log = RunLog(run_dir, start_step=trainer.step)
    return Run(config, run_dir, trainer, tokenizer, source, buffer, checkpoints, log)


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
    demos = demonstrations(run)
    size = cfg.rollout.tasks_per_step * cfg.rollout.group_size
    while run.trainer.step < cfg.train.warm_start_steps:
        start = (run.trainer.step * size) % len(demos)
        batch = (demos + demos)[start : start + min(size, len(demos))]
        metrics = run.trainer.update([Group(-1, -1, batch)], run.trainer.step)
        _after_update(run, metrics, progress)
    asyncio.run(run.source.sync(full_tensors(run.trainer.model), run.trainer.step))


def demonstrations(run: Run) -> list:
    cfg = run.config
    if cfg.train.warm_start != "gold" or cfg.rollout.tasks != "toy":
        raise ValueError(
            f"warm start {cfg.train.warm_start!r} on tasks {cfg.rollout.tasks!r} is not available in this build"
        )
    from training.toy import demonstrations as toy_demonstrations

    return toy_demonstrations(run.tokenizer)


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
            groups = take.result()
            metrics = await asyncio.to_thread(run.trainer.update, groups, run.trainer.step)
            metrics["staleness"] = sum(run.buffer.version - g.version for g in groups) / len(groups)
            await run.source.sync(full_tensors(run.trainer.model), run.trainer.step)
            run.buffer.advance(groups)
            metrics["dropped_stale_total"] = float(run.buffer.dropped_stale)
            wake.set()
            _after_update(run, metrics, progress)
    finally:
        producer.cancel()
        for task in list(running):
            task.cancel()


async def _run_job(run: Run, job: int) -> Group:
    """Job `job` with the weights the source holds now; the group is stamped with the buffer's
    version (staleness counts updates), its samples with the weight version (optimizer steps)."""
    version = run.buffer.version
    group = await run.source.run(job, run.trainer.step)
    group.version = version
    return group


def _after_update(run: Run, metrics: dict[str, float], progress) -> None:
    step = run.trainer.step
    run.log.write(step, metrics)
    if progress is not None:
        progress.update(1)
        progress.set_postfix(reward=f"{metrics.get('reward', float('nan')):.3f}")
    if step % run.config.checkpoint.every == 0:
        run.checkpoints.save(step, run.trainer, run.tokenizer, extra={"buffer": run.buffer.state()})


def finish(run: Run) -> Path:
    """The last checkpoint, the merged model (`final/`, plus `final/adapter` for LoRA) and the plot."""
    step = run.trainer.step
    if run.checkpoints.latest() is None or run.checkpoints.latest().name != f"step_{step:06d}":
        run.checkpoints.save(step, run.trainer, run.tokenizer, extra={"buffer": run.buffer.state()})
    final = export_model(run.trainer.model, run.tokenizer, run.dir / "final")
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
    if config.progress:
        from tqdm import tqdm

        progress = tqdm(total=total, initial=run.trainer.step, desc="training.rl", unit="update")
    try:
        warm_start(run, progress)
        asyncio.run(reinforce(run, progress))
        finish(run)
    finally:
        if progress is not None:
            progress.close()
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
    print(json.dumps({"run": str(run.dir), "steps": run.trainer.step, "final": str(run.dir / "final"),
                      "plot": str(run.dir / "plot.png")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
