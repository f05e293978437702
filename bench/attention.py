"""Micro benchmark of the engine's attention kernels (model/csrc/kernels.cpp) on the agent turn's
shapes (bench/agent_turn.py), against torch's scaled_dot_product_attention on the same inputs in
the same run (model/kernels.py's fallback, what the engine runs without its extension):

  prefill   one follow-up chunk, 473 new tokens over 5,414 cached positions (the bf16 matrix
            tiles where the CPU has AMX or AVX512-BF16, fp32 tiles otherwise)
  decode    one token for 1 and for 8 sequences at ~6k positions (an RL group's decode step),
            over bf16, int8 (model/kv.py's rows with a scale each) and fp32 keys and values

composer-mini's attention geometry (9 query heads, 3 key/value heads of 64), one layer per call.
Prints ms a call, the arithmetic rate (prefill) or the key/value bytes read a second (decode),
and the ratio to SDPA; writes bench/results/attention.json and its block in docs/benchmarks.md.
Micro: the path the product runs is bench/agent_turn.py.

    python bench/attention.py [--reps 20] [--no-write]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.machine import load_average, machine_line  # noqa: E402
from bench.report import publish  # noqa: E402
from model.kernels import DECODE, PREFILL, Kernels  # noqa: E402
from model.kv import dequantize_rows  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM, MAX_LEN = 9, 3, 64, 8192
CACHED, CHUNK = 5414, 473
DECODE_POSITIONS = 6000


def timed(call, reps: int) -> float:
    """Median seconds of `reps` calls after one warm-up."""
    call()
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def cases(dtype: torch.dtype) -> dict[str, tuple]:
    """name -> (queries, rows, positions): the prefill chunk and the decode steps."""
    gen = torch.Generator().manual_seed(0)
    chunk = (torch.randn(CHUNK, HEADS, HEAD_DIM, generator=gen), torch.zeros(CHUNK, dtype=torch.long),
             torch.arange(CACHED, CACHED + CHUNK))
    out = {} if dtype == torch.float32 else {"prefill": chunk}
    for rows in (1, 8):
        out[f"decode x{rows}"] = (torch.randn(rows, HEADS, HEAD_DIM, generator=gen), torch.arange(rows),
                                  torch.tensor([DECODE_POSITIONS + 37 * r for r in range(rows)]))
    return out


def measure(reps: int) -> list[dict]:
    engine, fallback = Kernels.load(quiet=True), Kernels(None)
    if engine.ext is None:
        raise SystemExit(f"the engine's kernels are unavailable here: {engine.reason}")
    rows_out = []
    for dtype in (torch.bfloat16, torch.int8, torch.float32):
        gen = torch.Generator().manual_seed(1)
        cache_k = engine.store_rows(torch.randn(8, KV_HEADS, MAX_LEN, HEAD_DIM, generator=gen), dtype)
        cache_v = engine.store_rows(torch.randn(8, KV_HEADS, MAX_LEN, HEAD_DIM, generator=gen), dtype)
        for name, (q, rows, pos) in cases(dtype).items():
            role = PREFILL if name == "prefill" else DECODE
            attended = int((pos + 1).sum())  # positions attended, summed over tokens
            row = {"case": name, "kv": str(dtype).removeprefix("torch."), "tokens": len(q), "attended": attended}
            row["engine_s"] = timed(partial(engine.attention, q, cache_k, cache_v, rows, pos, role, bf16=True), reps)
            # SDPA over the same values (int8 rows dequantized first, outside the timing)
            values = [dequantize_rows(c).to(torch.bfloat16) if dtype == torch.int8 else c for c in (cache_k, cache_v)]
            row["sdpa_s"] = timed(partial(fallback.attention, q, *values, rows, pos, role, bf16=True), reps)
            if role == PREFILL:  # 2 FLOP a multiply-add, Q K^T and P V
                row["engine_tflops"] = 4 * HEAD_DIM * HEADS * attended / row["engine_s"] / 1e12
            else:  # each token reads its row's keys and values once per key/value head
                row["kv_gb_per_s"] = 2 * KV_HEADS * cache_k.shape[-1] * cache_k.element_size() * attended / row["engine_s"] / 1e9
                row["ns_per_position_head"] = row["engine_s"] * 1e9 / (attended * KV_HEADS)
            rows_out.append(row)
    return rows_out


def table(rows: list[dict]) -> str:
    lines = ["| case | keys and values | engine (ms) | SDPA (ms) | engine vs SDPA | engine rate |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        rate = (f"{r['engine_tflops']:.2f} TFLOP/s" if "engine_tflops" in r else
                f"{r['kv_gb_per_s']:.1f} GB/s of keys and values, {r['ns_per_position_head']:.1f} ns a position and head")
        lines.append(f"| {r['case']} | {r['kv']} | {r['engine_s'] * 1e3:.2f} | {r['sdpa_s'] * 1e3:.2f} | "
                     f"{r['sdpa_s'] / r['engine_s']:.2f}x | {rate} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=20, help="timed calls per case (the median is kept)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    load = load_average()
    rows = measure(args.reps)
    meta = (f"{machine_line()}; load average (1 min) {load} -> {load_average()}; {time.strftime('%Y-%m-%d')}. "
            f"One layer of composer-mini's attention a call, medians of {args.reps}; micro.")
    publish("attention", "Attention kernels (micro)", {"machine": machine_line(), "rows": rows}, table(rows), meta,
            write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
