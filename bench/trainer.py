"""Trainer benchmark: composer-mini's RL update (training/trainer.py) beside TRL's `GRPOTrainer`
on the same model and the same batch, measured in one run (TRL runs in its own interpreter,
`.venv-trl`, with the same torch 2.13.0 CPU build: bench/trl_grpo.py).

    python bench/trainer.py [--trl-python .venv-trl/bin/python] [--quick] [--no-write]
    make bench-trainer              # creates .venv-trl (torch==2.13.0 first, then trl and peft)

The batch: `--prompts` code-reading requests (bench/workloads.py, a few hundred tokens each,
sharing their opening as agent prompts share the system prompt), `--group` completions each of
exactly `--completion-tokens` tokens sampled by our engine at temperature 1, fixed advantages.
Both trainers: fp32, LoRA rank 16 (alpha 32) on the attention projections, AdamW, clip
0.2/0.28, token-level normalisation, no KL.

  update   forward + backward + optimizer step on that batch: batch tokens (prompt and
           completion of every sample, what TRL processes) per second, median of `--repeats`
  e2e      whole RL steps (sample the group with each trainer's own generation, reward, update):
           samples per second, median over `--e2e-steps` steps after the first

Writes bench/results/trainer.json and the table in docs/benchmarks.md (trainer markers).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.report import publish  # noqa: E402
from bench.workloads import long_prompt  # noqa: E402
from model.engine import Engine  # noqa: E402
from model.hf import load_model  # noqa: E402
from model.home import ensure_default_model  # noqa: E402
from model.sampling import SamplingParams  # noqa: E402
from model.tokenizer import Tokenizer  # noqa: E402
from training.buffer import Group, Sample  # noqa: E402
from training.config import RLConfig, replace_in  # noqa: E402
from training.trainer import Trainer  # noqa: E402

LORA = {"lora_rank": 16, "lora_alpha": 32.0, "lora_targets": ("qkv", "o_proj")}


def prompts(n: int, lines: int) -> list[str]:
    return [long_prompt(lines + 12 * i)[0]["content"] for i in range(n)]


def sample_groups(engine: Engine, texts: list[str], group: int, length: int, version: int, seed: int) -> list[Group]:
    """`group` completions of exactly `length` tokens per prompt (end-of-turn ignored)."""
    tok = engine.tokenizer
    out = []
    for job, text in enumerate(texts):
        ids = tok.encode_chat([{"role": "user", "content": text}])
        params = [SamplingParams(max_tokens=length, temperature=1.0, ignore_eos=True, seed=seed * 1000 + job * 10 + i)
                  for i in range(group)]
        samples = []
        for i, c in enumerate(engine.generate([ids] * group, params)):
            samples.append(Sample(
                tokens=ids + c.token_ids, mask=[False] * len(ids) + [True] * len(c.token_ids),
                behaviour_logprobs=[float("nan")] * len(ids) + c.logprobs, reward=float(i % 2),
                weight_version=version,
            ))
        out.append(Group(job, 0, samples))
    return out


def ours(args, model_dir: Path, texts: list[str]) -> tuple[dict, list[Group]]:
    config = replace_in(RLConfig(), model=LORA, optim={"lr": 1e-5}, buffer={"drop_zero_advantage": False},
                        train={"micro_batch_tokens": 1 << 16})
    trainer = Trainer(config, load_model(model_dir))
    # The rollout engine runs on the trainer's own (LoRA-merged) parameters: one copy of the
    # weights in memory, nothing to sync; rollouts and updates alternate, never overlap.
    engine = Engine(trainer.model, Tokenizer.from_dir(model_dir), max_batch=args.group)
    groups = sample_groups(engine, texts, args.group, args.completion_tokens, 0, seed=0)
    res: dict = {}
    seconds = []
    for _ in range(args.repeats + 1):
        started = time.perf_counter()
        trainer.update(groups, 0)
        seconds.append(time.perf_counter() - started)
    res["update_seconds"] = statistics.median(seconds[1:])
    steps = []
    for step in range(args.e2e_steps):
        started = time.perf_counter()
        fresh = sample_groups(engine, texts, args.group, args.completion_tokens, trainer.step, seed=step + 1)
        trainer.update(fresh, trainer.step)
        steps.append(time.perf_counter() - started)
    res["e2e_seconds_per_step"] = statistics.median(steps[1:]) if len(steps) > 1 else steps[0]
    engine.close()
    return res, groups


def trl(args, model_dir: Path, texts: list[str], groups: list[Group]) -> dict:
    rows = []
    for g in groups:
        for i, s in enumerate(g.samples):
            n = s.mask.index(True)
            rows.append({"prompt_ids": s.tokens[:n], "completion_ids": s.tokens[n:], "advantage": 0.5 - (i % 2)})
    with tempfile.TemporaryDirectory() as tmp:
        spec = {
            "model": str(model_dir), "prompts": texts, "samples": rows, "group_size": args.group,
            "completion_tokens": args.completion_tokens, "lora_rank": LORA["lora_rank"],
            "lora_alpha": LORA["lora_alpha"], "lr": 1e-5, "repeats": args.repeats, "e2e_steps": args.e2e_steps,
            "threads": torch.get_num_threads(), "workdir": tmp, "phases": ["update", "e2e"],
        }
        (Path(tmp) / "spec.json").write_text(json.dumps(spec))
        subprocess.run([args.trl_python, str(ROOT / "bench" / "trl_grpo.py"), f"{tmp}/spec.json", f"{tmp}/out.json"],
                       check=True, cwd=ROOT)
        return json.loads((Path(tmp) / "out.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--trl-python", default=str(ROOT / ".venv-trl" / "bin" / "python"))
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--prompt-lines", type=int, default=40)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--completion-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--e2e-steps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one prompt, two completions of 16 tokens")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.prompts, args.prompt_lines, args.group, args.completion_tokens = 1, 10, 2, 16
        args.repeats, args.e2e_steps = 1, 2
    random.seed(0)
    torch.manual_seed(0)
    model_dir = args.model or ensure_default_model()
    texts = prompts(args.prompts, args.prompt_lines)
    ours_res, groups = ours(args, model_dir, texts)
    trl_res = trl(args, model_dir, texts, groups)
    report(args, model_dir, texts, groups, ours_res, trl_res)


def report(args, model_dir, texts, groups, ours_res: dict, trl_res: dict) -> None:
    batch_tokens = sum(len(s.tokens) for g in groups for s in g.samples)
    samples = sum(len(g.samples) for g in groups)
    rows = {
        "update tokens/s": (batch_tokens / ours_res["update_seconds"], batch_tokens / trl_res["update_seconds"]),
        "e2e samples/s": (samples / ours_res["e2e_seconds_per_step"], samples / trl_res["e2e_seconds_per_step"]),
    }
    cpu = _cpu()
    results = {"batch_tokens": batch_tokens, "samples": samples, "ours": ours_res, "trl": trl_res,
               "ratios": {k: a / b for k, (a, b) in rows.items()}, "cpu": cpu, "threads": torch.get_num_threads(),
               "args": {k: str(v) for k, v in vars(args).items()}}
    lines = ["| workload | composer-mini trainer | TRL GRPOTrainer | ratio |", "| --- | --- | --- | --- |"]
    lines += [f"| {k} | {a:.2f} | {b:.2f} | {a / b:.2f}x |" for k, (a, b) in rows.items()]
    meta = (f"`python bench/trainer.py` on {cpu}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
            f"TRL {trl_res.get('trl')}: composer-mini fp32, LoRA r16 on attention, {args.prompts} prompts x "
            f"{args.group} completions of {args.completion_tokens} tokens ({batch_tokens} batch tokens); "
            "our rollouts on the in-process engine over the trainer's weights, TRL's on transformers' generate.")
    publish("trainer", "Trainer (RL update against TRL)", results, "\n".join(lines) + "\n", meta,
            write=not args.no_write and not args.quick)


def _cpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()
