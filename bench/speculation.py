"""Prompt-lookup speculation on the agent turn (model/speculative.py: a lone greedy sequence's
draft is verified in the fused C++ step, as rows at the next positions of its cache row),
composer-mini with int4 weights, one engine, in one run:

  each turn of bench/agent_turn.py's workload (tool-call constraint, routed experts recorded, 64
  tokens a step) decoded twice, speculation off and on, the order alternating turn by turn;
  per mode the decode time of a turn (each step's time after its first token), the decode rate,
  drafted and accepted tokens, the fused steps by how many tokens they fed and what each cost;
  and whether the two modes' tokens and logprobs are identical at every step.

The second run of a turn finds its prompts in the prefix cache, so only decoding is compared.

    python bench/speculation.py [--reps 2] [--no-write]

Writes bench/results/speculation.json and its block in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.agent_turn import STEPS, EngineBackend  # noqa: E402
from bench.agent_workload import AgentWorkload  # noqa: E402
from bench.machine import load_average, machine_line, run_line  # noqa: E402
from bench.report import publish  # noqa: E402

MODES = {"off": False, "on": None}
"""SamplingParams.speculative per mode: None is the engine's default (on for greedy decoding)."""


class TimedSteps:
    """Wraps the engine's fused step: seconds per call, by how many tokens it fed."""

    def __init__(self, engine) -> None:
        self.seconds: dict[int, list[float]] = defaultdict(list)
        step = engine.fused.step

        def timed(tokens, *args):
            started = time.perf_counter()
            out = step(tokens, *args)
            self.seconds[len(tokens)].append(time.perf_counter() - started)
            return out

        engine.fused.step = timed


async def decode_turn(backend: EngineBackend, work: AgentWorkload, turn: int) -> dict[str, Any]:
    steps, completions = [], []
    for step in range(STEPS):
        steps.append(await backend.step(work.messages(turn, step, turn), work.tools))
        completions.append(backend.last)
    return {
        "decode_s": sum(s.total_s - s.ttft_s for s in steps),
        "decode_tps": [s.decode_tps for s in steps],
        "tokens": sum(s.tokens for s in steps),
        "drafted": sum(c.num_draft_tokens for c in completions),
        "accepted": sum(c.num_accepted_draft_tokens for c in completions),
        "outputs": [(c.token_ids, c.logprobs) for c in completions],
    }


def measure(work: AgentWorkload, reps: int) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": machine_line(), "load_start": load_average()}
    backend = EngineBackend()
    timer = TimedSteps(backend.engine)
    asyncio.run(backend.step(work.warmup_messages(), work.tools))
    turns: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    steps_by_fed: dict[str, dict[int, list[float]]] = {mode: defaultdict(list) for mode in MODES}
    identical = []
    for rep in range(reps):
        for mode in (("off", "on") if rep % 2 == 0 else ("on", "off")):
            backend.speculative = MODES[mode]
            timer.seconds.clear()
            turn = asyncio.run(decode_turn(backend, work, rep))
            for fed, seconds in timer.seconds.items():
                steps_by_fed[mode][fed] += seconds
            turns[mode].append(turn)
            print(f"  turn {rep}, speculation {mode}: decode {turn['decode_s']:.2f} s "
                  f"({', '.join(f'{t:.0f}' for t in turn['decode_tps'])} tok/s), "
                  f"{turn['accepted']}/{turn['drafted']} drafted tokens accepted", flush=True)
        identical.append(turns["off"][rep].pop("outputs") == turns["on"][rep].pop("outputs"))
    asyncio.run(backend.close())
    results.update(turns=turns, identical=identical, load_end=load_average(),
                   fused_steps={mode: {fed: {"calls": len(s), "median_ms": 1e3 * statistics.median(s)}
                                       for fed, s in sorted(by_fed.items())}
                                for mode, by_fed in steps_by_fed.items()})
    return results


def tables(results: dict[str, Any]) -> str:
    turns = results["turns"]

    def median(mode: str, key: str) -> float:
        return statistics.median(t[key] for t in turns[mode])

    def rate(mode: str) -> float:
        return statistics.median(r for t in turns[mode] for r in t["decode_tps"])

    rows = [
        ("decode time of a 6-step turn, median (s)", lambda m: f"{median(m, 'decode_s'):.2f}",
         f"{median('off', 'decode_s') / median('on', 'decode_s'):.2f}x"),
        ("decode rate, all steps, median (tok/s)", lambda m: f"{rate(m):.1f}", f"{rate('on') / rate('off'):.2f}x"),
        ("drafted tokens accepted, all turns",
         lambda m: f"{sum(t['accepted'] for t in turns[m])} / {sum(t['drafted'] for t in turns[m])}", ""),
    ]
    text = "| measure | speculation off | speculation on | on vs off |\n| --- | --- | --- | --- |\n"
    for label, cell, ratio in rows:
        text += f"| {label} | {cell('off')} | {cell('on')} | {ratio} |\n"
    on = results["fused_steps"]["on"]
    text += ("\nFused steps with speculation on, by tokens fed (calls, median ms): "
             + ", ".join(f"{fed}: {s['calls']} x {s['median_ms']:.1f}" for fed, s in on.items())
             + f". Tokens and logprobs identical off and on: {sum(results['identical'])} of "
             f"{len(results['identical'])} turns.\n")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2, help="turns, each decoded with speculation off and on")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    results = measure(AgentWorkload.build(), args.reps)
    meta = (f"{run_line(results)}. composer-mini, int4 weights, int8 KV cache, the engine's defaults "
            f"otherwise; {args.reps} turns, each decoded with speculation off and on.")
    publish("speculation", "Prompt-lookup speculation on the agent turn", results, tables(results), meta,
            write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
