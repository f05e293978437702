"""The KV cache's precision on the agent turn (model/kv.py: fp32, bf16, or int8 rows with a
per-row scale), composer-mini with int4 weights, in one run:

  accuracy  the last prompt of a turn that is not timed (~7.4k tokens: the harness's system prompt
            and tools, five read_file calls and results; its greedy run leaves the system prompt
            cached, as a served workspace has it, and nothing of the timed turns) teacher-forced
            through the engine's runner, against the fp32 cache: its last PREFILL_POSITIONS
            positions as a prompt is prefilled (chunks that write the cache, then attend over what
            it stored: bf16 tiles for int4 weights, whatever the cache holds), its last
            DECODE_POSITIONS one at a time as tokens are decoded (fp32 arithmetic over the stored
            rows); per position the top-1 agreement, the drift of the fp32 top token's logprob
            (mean and max |diff|) and KL(fp32 || other); and 64 greedy tokens decoded from that
            prompt: how many match fp32's before the first difference
  speed     the 6-step turn as bench/agent_turn.py's engine backend runs it (tool-call
            constraint, routed experts recorded, 64 tokens a step), the three caches' engines
            side by side, turns interleaved: per step TTFT and decode rate at 4.7-7.4k positions

    python bench/kv_cache.py [--reps 2] [--no-write]

Writes bench/results/kv_cache.json and its block in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.agent_turn import STEPS, EngineBackend, Step, run_turn  # noqa: E402
from bench.agent_workload import AgentWorkload  # noqa: E402
from bench.machine import load_average, machine_line, run_line  # noqa: E402
from bench.report import publish  # noqa: E402
from model.kernels import DECODE, PREFILL  # noqa: E402
from model.sampling import SamplingParams  # noqa: E402

DTYPES = ("fp32", "bf16", "int8")
PREFILL_POSITIONS = 1024
DECODE_POSITIONS = 256
GREEDY_TOKENS = 64
ACCURACY_TURN = 9
"""bench/agent_workload.py's turn the accuracy prompt is taken from (the timed turns are 0, 1, ...)."""


def teacher_forced_logprobs(backend: EngineBackend, prompt: list[int], role: str, positions: int) -> torch.Tensor:
    """(positions, V) logprobs at the prompt's last `positions`, in row 0 of the engine's cache:
    PREFILL, the whole prompt in the engine's chunks; DECODE, the part before them prefilled,
    then each of them fed alone."""
    engine = backend.engine
    first = len(prompt) - positions
    chunks = range(0, len(prompt) if role == PREFILL else first, engine.prefill_chunk)
    out = []
    with torch.inference_mode():
        for start in chunks:
            end = min(start + engine.prefill_chunk, len(prompt) if role == PREFILL else first)
            wanted = [i - start for i in range(max(start, first), end)]
            res = engine.runner.forward(torch.tensor(prompt[start:end]), torch.zeros(end - start, dtype=torch.long),
                                        torch.arange(start, end), PREFILL, logits_at=wanted or [0])
            if wanted:
                out.append(res.logits.float().log_softmax(-1))
        if role == DECODE:
            for p in range(first, len(prompt)):
                res = engine.runner.forward(torch.tensor([prompt[p]]), torch.zeros(1, dtype=torch.long),
                                            torch.tensor([p]), DECODE)
                out.append(res.logits.float().log_softmax(-1))
    return torch.cat(out)


def accuracy(reference: torch.Tensor, other: torch.Tensor) -> dict[str, float]:
    top = reference.argmax(-1, keepdim=True)
    drift = (reference.gather(-1, top) - other.gather(-1, top)).abs()
    kl = (reference.exp() * (reference - other)).sum(-1)
    return {"top1_agreement": float((other.argmax(-1) == top[:, 0]).float().mean()),
            "logprob_drift_mean": float(drift.mean()), "logprob_drift_max": float(drift.max()),
            "kl_mean": float(kl.mean())}


def greedy(backend: EngineBackend, prompt: list[int]) -> list[int]:
    [done] = backend.engine.generate([prompt], SamplingParams(max_tokens=GREEDY_TOKENS, ignore_eos=True))
    return done.token_ids


def same_before_divergence(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def measure(work: AgentWorkload, reps: int) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": machine_line(), "load_start": load_average()}
    backends = {}
    for name in DTYPES:
        started = time.perf_counter()
        backends[name] = EngineBackend(kv_cache_dtype=name, max_batch=2)  # one turn at a time
        print(f"{name}: engine ready in {time.perf_counter() - started:.0f} s "
              f"({backends[name].engine.cache.bytes_per_position} bytes a position)", flush=True)
    last = backends["fp32"].engine.tokenizer.encode_chat(work.messages(ACCURACY_TURN, STEPS - 1), tools=work.tools)
    roles = {"prefill": (PREFILL, PREFILL_POSITIONS), "decode": (DECODE, DECODE_POSITIONS)}
    reference = {name: teacher_forced_logprobs(backends["fp32"], last, *how) for name, how in roles.items()}
    reference_tokens = greedy(backends["fp32"], last)
    for name, backend in backends.items():
        res: dict[str, Any] = {"bytes_per_position": backend.engine.cache.bytes_per_position}
        if name != "fp32":
            for role, how in roles.items():
                res[role] = accuracy(reference[role], teacher_forced_logprobs(backend, last, *how))
            res["greedy_same_before_divergence"] = same_before_divergence(reference_tokens, greedy(backend, last))
        res["turns"] = []
        results[name] = res
    for rep in range(reps):  # interleaved: each dtype's turn rep, then the next rep
        for name, backend in backends.items():
            steps: list[Step] = asyncio.run(run_turn(backend, work, turn=rep, task=rep))
            results[name]["turns"].append([{"prompt_tokens": s.prompt_tokens, "ttft_s": s.ttft_s,
                                            "decode_tps": s.decode_tps, "total_s": s.total_s} for s in steps])
            print(f"  {name} turn {rep}: {sum(s.total_s for s in steps):.1f} s, decode "
                  f"{', '.join(f'{s.decode_tps:.0f}' for s in steps)} tok/s", flush=True)
    for backend in backends.values():
        asyncio.run(backend.close())
    results["load_end"] = load_average()
    return results


def summary(res: dict[str, Any]) -> dict[str, float]:
    turns = res["turns"]
    follow = [s for steps in turns for s in steps[1:]]
    return {
        "turn_s": statistics.median(sum(s["total_s"] for s in steps) for steps in turns),
        "ttft_follow_s": statistics.median(s["ttft_s"] for s in follow),
        "decode_tps": statistics.median(s["decode_tps"] for steps in turns for s in steps),
        "decode_tps_last": statistics.median(steps[-1]["decode_tps"] for steps in turns),
    }


def tables(results: dict[str, Any]) -> str:
    sums = {name: summary(results[name]) for name in DTYPES}
    last = results["fp32"]["turns"][0][-1]["prompt_tokens"]  # of the timed turn 0
    rows = [
        ("bytes of keys and values a position (30 layers)", lambda n: f"{results[n]['bytes_per_position']:,}"),
        ("whole turn, 6 steps (s)", lambda n: f"{sums[n]['turn_s']:.1f}"),
        ("follow-up step TTFT, median (s)", lambda n: f"{sums[n]['ttft_follow_s']:.2f}"),
        ("decode, all steps, median (tok/s)", lambda n: f"{sums[n]['decode_tps']:.1f}"),
        (f"decode, last step ({last:,} prompt tokens) (tok/s)", lambda n: f"{sums[n]['decode_tps_last']:.1f}"),
    ]
    for role, positions in (("prefill", PREFILL_POSITIONS), ("decode", DECODE_POSITIONS)):
        rows += [
            (f"{role}, {positions} positions: top-1 agreement with fp32", lambda n, r=role: _get(results[n], r, "top1_agreement", "{:.2%}")),
            (f"{role}: fp32 top token's logprob drift, mean / max", lambda n, r=role: _drift(results[n], r)),
            (f"{role}: KL(fp32 || this), mean (nats)", lambda n, r=role: _get(results[n], r, "kl_mean", "{:.2e}")),
        ]
    rows.append((f"greedy tokens equal to fp32's (of {GREEDY_TOKENS})",
                 lambda n: "(reference)" if n == "fp32" else str(results[n]["greedy_same_before_divergence"])))
    text = "| measure | " + " | ".join(f"KV {n}" for n in DTYPES) + " |\n|" + " --- |" * (len(DTYPES) + 1) + "\n"
    for label, cell in rows:
        text += f"| {label} | " + " | ".join(cell(n) for n in DTYPES) + " |\n"
    return text


def _get(res: dict[str, Any], role: str, key: str, spec: str) -> str:
    return spec.format(res[role][key]) if role in res else "(reference)"


def _drift(res: dict[str, Any], role: str) -> str:
    if role not in res:
        return "(reference)"
    return f"{res[role]['logprob_drift_mean']:.2e} / {res[role]['logprob_drift_max']:.2e}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2, help="turns per cache, interleaved")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    results = measure(AgentWorkload.build(), args.reps)
    meta = (f"{run_line(results)}. composer-mini, int4 weights, the engine's defaults otherwise; "
            f"speed: medians of {args.reps} turns a cache, interleaved.")
    publish("kv_cache", "KV cache precision", results, tables(results), meta, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
