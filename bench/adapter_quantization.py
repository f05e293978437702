"""Whether int4 weights keep what a LoRA run taught composer-mini: on the held-out prompts an
evaluation logged (the first model call of each attempt: the harness's real prompt), the
probability that the reply starts a tool call, for the base and the trained checkpoint, each in
full precision, int4 of the merged weights, and int4 with the adapter kept beside it in fp32
(model/adapter.py: what `Engine.from_pretrained(.., quantize="int4")` serves since). Then per
matrix kind, how much of the trained change int4 of the merged weights keeps:

  kept     <Q(W + D) - Q(W), D> / |D|^2: 1 keeps the change, 0 rounds it away
  |D| / |Q(W) - W|   the change against the rounding error int4 adds anyway

And what the adapter costs: the engine's decoding speed (one sequence, 64 tokens after the
last 64 tokens of a held-out prompt; the fused C++ step where it runs) for the base in int4,
the trained checkpoint in int4 with its adapter, and the trained checkpoint in full precision.

    python bench/adapter_quantization.py --trained runs/cpu/final \\
        --sessions EVAL_DIR/bugfix-heldout/sessions [--prompts 4] [--no-write]

Writes bench/results/adapter_quantization.json and its block in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.machine import machine_line  # noqa: E402
from bench.report import publish  # noqa: E402
from model.engine import Engine  # noqa: E402
from model.hf import load_model  # noqa: E402
from model.home import ensure_default_model  # noqa: E402
from model.quant import Int4Linear, load_quantized, quantize_model  # noqa: E402
from model.sampling import SamplingParams  # noqa: E402
from model.tokenizer import Tokenizer  # noqa: E402

TOOL_CALL_OPEN = "<tool_call>"


def first_prompts(sessions: Path, count: int) -> list[list[int]]:
    """The prompt token ids of each logged attempt's first model call, in file-name order."""
    prompts = []
    for log in sorted(sessions.glob("*/*.jsonl")):
        for line in log.read_text().splitlines():
            record = json.loads(line)
            if record.get("type") == "model_call":
                prompts.append(record["prompt_token_ids"])
                break
        if len(prompts) == count:
            break
    if not prompts:
        raise SystemExit(f"no model calls logged under {sessions}")
    return prompts


@torch.no_grad()
def tool_call_start(model, prompts: list[list[int]], token: int) -> dict[str, float]:
    """Mean probability of the tool call's first token after each prompt, and how many prompts
    have it as the greedy choice."""
    probs, greedy = [], 0
    for prompt in prompts:
        out = model(torch.tensor([prompt]), logits_at=torch.tensor([[len(prompt) - 1]]))
        p = torch.softmax(out.logits.reshape(-1).float(), -1)
        probs.append(float(p[token]))
        greedy += int(p.argmax()) == token
    return {"p_tool_call": sum(probs) / len(probs), "greedy_tool_calls": greedy, "prompts": len(prompts)}


def kept_change(base, trained) -> dict[str, dict[str, float]]:
    """Per kind of matrix (attention, experts), summed over layers: the kept share of the trained
    change under int4 and the change's size against int4's rounding error."""
    sums: dict[str, list[float]] = {}
    for lb, lt in zip(base.layers, trained.layers):
        pairs = [("attention", lb.attn.qkv.weight, lt.attn.qkv.weight),
                 ("attention", lb.attn.o_proj.weight, lt.attn.o_proj.weight)]
        for name in ("w13_EFD", "w2_EDF"):
            for wb, wt in zip(getattr(lb.moe.experts, name), getattr(lt.moe.experts, name)):
                pairs.append(("experts", wb, wt))
        for kind, wb, wt in pairs:
            wb, wt = wb.detach().float(), wt.detach().float()
            delta = wt - wb
            qb, qt = Int4Linear(wb).dequantize(), Int4Linear(wt).dequantize()
            s = sums.setdefault(kind, [0.0, 0.0, 0.0])
            s[0] += float(((qt - qb) * delta).sum())
            s[1] += float((delta * delta).sum())
            s[2] += float(((qb - wb) ** 2).sum())
    return {kind: {"kept": dot / sq, "change_vs_rounding": (sq / err) ** 0.5} for kind, (dot, sq, err) in sums.items()}


def decode_speed(model, tokenizer, prompt: list[int], tokens: int = 64) -> dict[str, float]:
    """Decoded tokens per second of one sequence: (time for 1 + tokens) - (time for 1)."""
    engine = Engine(model, tokenizer, max_batch=1)
    try:
        engine.generate([prompt], SamplingParams(max_tokens=4))  # warm up (and the fused step's build)
        seconds = []
        for n in (1, 1 + tokens):
            start = time.perf_counter()
            engine.generate([prompt], SamplingParams(max_tokens=n, ignore_eos=True, speculative=False))
            seconds.append(time.perf_counter() - start)
        return {"decode_tok_s": tokens / (seconds[1] - seconds[0]), "fused": engine.fused is not None}
    finally:
        engine.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trained", type=Path, required=True, help="a trained checkpoint (training.rl's final/)")
    ap.add_argument("--sessions", type=Path, required=True, help="an evaluation run's sessions directory")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    torch.set_grad_enabled(False)
    base_dir = ensure_default_model()
    tokenizer = Tokenizer.from_dir(base_dir)
    token = tokenizer.encode(TOOL_CALL_OPEN)[0]
    prompts = first_prompts(args.sessions, args.prompts)
    results: dict[str, Any] = {"machine": machine_line(), "trained": str(args.trained), "rows": {}}
    models = {}
    for name, path in (("base", base_dir), ("trained", args.trained)):
        models[name] = load_model(path, dtype=torch.float32).eval()
        results["rows"][f"{name}, full precision"] = tool_call_start(models[name], prompts, token)
    results["kept"] = kept_change(models["base"], models["trained"])
    short = prompts[0][-64:]
    results["speed"] = {"trained, full precision": decode_speed(models["trained"], tokenizer, short)}
    for name in ("base", "trained"):
        quantized = quantize_model(models.pop(name), "int4")
        results["rows"][f"{name}, int4"] = tool_call_start(quantized, prompts, token)
        if name == "base":
            results["speed"]["base, int4"] = decode_speed(quantized, tokenizer, short)
    served = load_quantized(args.trained, "int4").eval()
    results["rows"]["trained, int4 + its adapter in fp32"] = tool_call_start(served, prompts, token)
    results["speed"]["trained, int4 + its adapter in fp32"] = decode_speed(served, tokenizer, short)
    lines = ["| model, weights | P(reply starts a tool call), mean | greedy replies that start one |",
             "| --- | --- | --- |"]
    for label, row in results["rows"].items():
        lines.append(f"| {label} | {row['p_tool_call']:.3f} | {row['greedy_tool_calls']} of {row['prompts']} |")
    lines += ["", "| model, weights | decoding, tok/s (1 sequence) | fused C++ step |", "| --- | --- | --- |"]
    for label, row in results["speed"].items():
        lines.append(f"| {label} | {row['decode_tok_s']:.1f} | {'yes' if row['fused'] else 'no'} |")
    lines += ["", "| matrices | share of the trained change int4 of the merged weights keeps | "
              "change / int4 rounding error |",
              "| --- | --- | --- |"]
    for kind, row in results["kept"].items():
        lines.append(f"| {kind} | {row['kept']:.2f} | {row['change_vs_rounding']:.2f} |")
    meta = (f"{results['machine']}; trained checkpoint {args.trained}; the first prompts of "
            f"{len(prompts)} held-out attempts logged under {args.sessions}.")
    publish("adapter_quantization", "Int4 and a LoRA's changes", results, "\n".join(lines) + "\n", meta,
            write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
