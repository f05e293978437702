"""The detached context (training/config.py `context_gradient`) on the warm start's real batch:
gold demonstrations of bug-fix train tasks acted out in the harness (training/demos.py), the
cpu preset's LoRA on composer-mini, the same micro-batches both ways.

    python bench/context_gradient.py [--demos 4] [--bf16] [--no-write]

  exact     every position computed with gradient (gradient checkpointing, as the preset)
  detached  the positions whose next token carries loss, over the others' keys and values
            computed once without gradient

For each: seconds for forward and backward over the batch, and training tokens per second;
then how the detached gradient compares with the exact one: cosine and norm ratio over all
adapter weights, and per kind (attention projections, experts). Both runs also report the
loss, which must agree. Writes bench/results/context_gradient.json and its block in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.machine import load_average, machine_line  # noqa: E402
from bench.report import publish  # noqa: E402
from training.buffer import Group  # noqa: E402
from training.config import PRESETS, replace_in  # noqa: E402
from training.demos import gold_demonstrations  # noqa: E402
from training.harness_rollout import ordered_tasks  # noqa: E402
from training.rl import load_tokenizer  # noqa: E402
from training.trainer import Trainer, load_policy  # noqa: E402


def kind(name: str) -> str:
    return "experts" if "w13" in name or "w2" in name else "attention"


def measure(trainer: Trainer, demos: list, context_gradient: bool) -> tuple[dict, dict[str, torch.Tensor]]:
    trainer.config = replace_in(trainer.config, model={"context_gradient": context_gradient})
    load = load_average()
    started = time.perf_counter()
    metrics = trainer.accumulate([Group(-1, -1, demos)], version=0)
    seconds = time.perf_counter() - started
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return {"seconds": round(seconds, 1), "tokens_per_s": round(metrics["train_tokens"] / seconds, 1),
            "train_tokens": int(metrics["train_tokens"]), "loss_tokens": int(metrics["sft_tokens"]),
            "sft_loss": round(metrics["sft_loss"], 5), "load_before": load}, grads


def compare(exact: dict[str, torch.Tensor], detached: dict[str, torch.Tensor]) -> dict[str, dict[str, float]]:
    out = {}
    for group in ("all", "attention", "experts"):
        names = [n for n in exact if group == "all" or kind(n) == group]
        if not names:
            continue
        e = torch.cat([exact[n].flatten().double() for n in names])
        d = torch.cat([detached[n].flatten().double() for n in names])
        out[group] = {"cosine": round(float(e @ d / (e.norm() * d.norm())), 4),
                      "norm_ratio": round(float(d.norm() / e.norm()), 4)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", type=int, default=4, help="demonstrations in the batch")
    parser.add_argument("--bf16", action="store_true", help="matmuls in bf16 under autocast (the preset's AMX path)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    config = replace_in(PRESETS["cpu"](), model={"autocast_bf16": args.bf16}, progress=False)
    tokenizer = load_tokenizer(config)
    tasks = ordered_tasks(config.rollout.tasks, config.train.seed)[: args.demos]
    with tempfile.TemporaryDirectory(prefix="composer-bench-demos-") as tmp:
        demos = asyncio.run(gold_demonstrations(tasks, tokenizer, Path(tmp)))
    trainer = Trainer(config, load_policy(config.model, config.train.seed))
    exact, exact_grads = measure(trainer, demos, context_gradient=True)
    detached, detached_grads = measure(trainer, demos, context_gradient=False)
    agreement = compare(exact_grads, detached_grads)
    results = {"machine": machine_line(), "demos": len(demos), "bf16": args.bf16, "exact": exact,
               "detached": detached, "speedup": round(exact["seconds"] / detached["seconds"], 2),
               "gradient": agreement}
    rows = [
        "| mode | seconds | train tokens/s | loss |",
        "| --- | --- | --- | --- |",
        *(f"| {name} | {r['seconds']} | {r['tokens_per_s']} | {r['sft_loss']} |"
          for name, r in (("exact", exact), ("detached", detached))),
        "",
        "| adapter weights | cosine to the exact gradient | norm ratio |",
        "| --- | --- | --- |",
        *(f"| {group} | {a['cosine']} | {a['norm_ratio']} |" for group, a in agreement.items()),
    ]
    meta = (f"{machine_line()}; {len(demos)} demonstrations, {exact['train_tokens']} training positions "
            f"({exact['loss_tokens']} with loss), {'bf16 autocast' if args.bf16 else 'fp32'}, LoRA r16 on "
            f"{', '.join(config.model.lora_targets)}; detached {results['speedup']}x the exact update's speed; "
            f"load {exact['load_before']} / {detached['load_before']} before each; {time.strftime('%Y-%m-%d')}.")
    publish("context_gradient", "Trainer: the detached context", results, "\n".join(rows) + "\n", meta,
            write=not args.no_write)


if __name__ == "__main__":
    main()
