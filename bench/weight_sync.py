"""Weight-sync benchmark: how long Engine.load_weights takes on composer-mini (fp32 and int4),
against building a fresh engine from the same checkpoint in the same run, and whether the
engine then computes what the trainer does.

    python bench/weight_sync.py [--model DIR] [--reps 3] [--no-write]

For each of fp32 and int4 weights:
  fresh    Engine.from_pretrained on the checkpoint (the baseline: restart the server)
  full     load_weights(checkpoint directory): every tensor read, checked, converted
           (int4: re-quantized), swapped in; medians of --reps
  partial  load_weights of a LoRA-shaped update, q_proj and v_proj of every layer (what a LoRA
           merge changes), from memory; medians
Then, on the partial update's new weights: fp32, the engine's sampled logprobs (temperature 1,
48 tokens) against the trainer's forward with routing replay (max |difference|); int4, whether
every buffer equals a fresh quantization of the trainer's weights, and single-stream greedy
decode speed on the loaded engine against an engine built fresh from the same weights,
alternating (the fused C++ step is rebuilt on the new buffers: it should be as fast).
Writes bench/results/weight_sync.json and its table in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.engine import decode_ab  # noqa: E402
from bench.report import cpu_description, publish  # noqa: E402
from bench.workloads import chat_prompt  # noqa: E402
from model.engine import Engine  # noqa: E402
from model.hf import load_model  # noqa: E402
from model.home import ensure_default_model  # noqa: E402
from model.quant import quantize_model  # noqa: E402
from model.sampling import SamplingParams  # noqa: E402
from model.transformer import Transformer, completion_logprobs  # noqa: E402


def lora_shaped_update(trainer: Transformer, seed: int = 0) -> dict[str, torch.Tensor]:
    """Moves the trainer's q_proj and v_proj of every layer by a rank-8 delta (as a LoRA merge
    would) and returns those tensors under their HF names."""
    cfg, gen = trainer.config, torch.Generator().manual_seed(seed)
    q_rows, kv_rows = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    update = {}
    with torch.no_grad():
        for i, layer in enumerate(trainer.layers):
            qkv = layer.attn.qkv.weight
            for name, rows in (("q", slice(0, q_rows)), ("v", slice(q_rows + kv_rows, q_rows + 2 * kv_rows))):
                n = rows.stop - rows.start
                delta = torch.randn(n, 8, generator=gen) @ torch.randn(8, cfg.hidden_size, generator=gen) * 2e-3
                qkv[rows] += delta
                update[f"model.layers.{i}.self_attn.{name}_proj.weight"] = qkv[rows].clone()
    return update


def timed_loads(engine: Engine, weights, reps: int) -> dict[str, float]:
    runs = [engine.load_weights(weights) for _ in range(reps)]
    out = {key: statistics.median(getattr(r, f"{key}_seconds") for r in runs) for key in ("prepare", "drain", "swap")}
    out["total"] = statistics.median(r.prepare_seconds + r.drain_seconds + r.swap_seconds for r in runs)
    out["tensors"] = runs[0].tensors
    return out


def arm(model_dir: Path, quantize: str, trainer: Transformer, update: dict, reps: int) -> dict:
    started = time.perf_counter()
    engine = Engine.from_pretrained(model_dir, quantize=quantize)
    res = {"fresh_seconds": time.perf_counter() - started, "fused": engine.fused is not None}
    prompt = engine.tokenizer.encode_chat(chat_prompt())
    res["full"] = timed_loads(engine, model_dir, reps)
    res["partial"] = timed_loads(engine, update, reps)
    if quantize == "none":
        params = SamplingParams(max_tokens=48, temperature=1.0, top_p=1.0, seed=0, return_routing=True, ignore_eos=True)
        [out] = engine.generate([prompt], params)
        with torch.no_grad():
            ours = completion_logprobs(trainer, prompt, out.token_ids, out.routed_experts)
        res["max_logprob_difference"] = float((ours - torch.tensor(out.logprobs)).abs().max())
    else:
        fresh = Engine(quantize_model(trainer, "int4"), engine.tokenizer)
        expected = fresh.model.state_dict()
        res["equals_fresh_quantization"] = all(torch.equal(t, expected[n]) for n, t in engine.model.state_dict().items())
        ab = decode_ab({"loaded": engine, "fresh": fresh}, engine.tokenizer, 64)
        res["decode_loaded"], res["decode_fresh"] = ab["loaded"]["decode-1"], ab["fresh"]["decode-1"]
        fresh.close()
    engine.close()
    return res


def table(results: dict) -> str:
    head = "| weights | fresh engine (s) | full load (s) | prepare / swap (s) | partial load (s) | prepare / swap (s) | full / fresh | partial / fresh |\n"
    head += "|" + " --- |" * 8 + "\n"
    rows = []
    for name in ("fp32", "int4"):
        r = results[name]
        full, part = r["full"], r["partial"]
        rows.append(
            f"| {name} | {r['fresh_seconds']:.2f} | {full['total']:.2f} | {full['prepare']:.2f} / {full['swap']:.2f} "
            f"| {part['total']:.3f} | {part['prepare']:.3f} / {part['swap']:.3f} | {full['total'] / r['fresh_seconds']:.2f}x "
            f"| {part['total'] / r['fresh_seconds']:.4f}x |"
        )
    fp32, int4 = results["fp32"], results["int4"]
    notes = (
        f"\nAfter the partial load, fp32: the engine's sampled logprobs against the trainer's forward with "
        f"routing replay differ by at most {fp32['max_logprob_difference']:.2e}. int4: every buffer equals a "
        f"fresh quantization of the trainer's weights: {int4['equals_fresh_quantization']}; single-stream "
        f"greedy decode {int4['decode_loaded']:.1f} tok/s on the loaded engine, {int4['decode_fresh']:.1f} on "
        f"an engine built fresh from those weights ({int4['decode_loaded'] / int4['decode_fresh']:.2f}x; fused C++ "
        f"step: {int4['fused']}; alternating, medians of 3). "
        f"Full loads: {fp32['full']['tensors']} tensors; partial: "
        f"{fp32['partial']['tensors']}. The engine pauses only for the swap column; preparing runs "
        "while it serves.\n"
    )
    return head + "\n".join(rows) + "\n" + notes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None, help="checkpoint (default: composer-mini)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    model_dir = args.model or ensure_default_model()
    trainer = load_model(model_dir).eval()
    update = lora_shaped_update(trainer)
    results = {"fp32": arm(model_dir, "none", trainer, update, args.reps)}
    gc.collect()
    results["int4"] = arm(model_dir, "int4", trainer, update, args.reps)  # quantizes the trainer last
    meta = (
        f"composer-mini ({trainer.config.num_experts} experts, top-{trainer.config.top_k}) on "
        f"{cpu_description()}, {torch.get_num_threads()} threads, torch {torch.__version__}; medians of "
        f"{args.reps} loads; {time.strftime('%Y-%m-%d')}."
    )
    results["meta"] = meta
    publish("weight_sync", "Weight sync", results, table(results), meta, write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
