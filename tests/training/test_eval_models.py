"""The benchmark with the real composer-mini (slow): `python -m training.eval` runs a held-out
bug-fix task end to end in-process, then the same task through model.serve as a URL; at
temperature 0 with --parallel 1 both runs make the same model calls (prompt and completion token
ids, step by step), the same tool calls and the same scores, whatever those scores are.

The budget is cut to two short steps so the test stays minutes long on a shared CPU. Every
environment is a new directory and the system prompt names the workspace by its absolute path,
so prompts are compared decoded with that path masked; completions are compared as token ids.

Run: .venv/bin/python -m pytest -m slow tests/training/test_eval_models.py
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from pathlib import Path

import pytest
from aiohttp import web

from agent.session import _shared_engine
from agent.session_log import read_session
from model.serve import create_app
from model.tokenizer import Tokenizer
from training.eval.__main__ import main as eval_main
from training.eval.suite import SUITES_DIR

TASK = "bugfix__bankkit.ledger.balance__operator_swap-af9e52cf__L0"


def write_suite(tmp_path: Path) -> Path:
    manifest = tmp_path / "one.toml"
    manifest.write_text(f'name = "one"\ntasks = "{SUITES_DIR / "bugfix-heldout.jsonl"}"\ninstances = ["{TASK}"]\n'
                        'description = "one held-out bug-fix task"\ndifficulty = "easy"\n[budget]\nmax_steps = 2\n'
                        'max_tokens_per_step = 24\nmax_tokens = 48\ntemperature = 0.0\nseeds = [0]\n'
                        'timeout_s = 1800\n[scores]\nperfect = 1.0\ntrivial = 0.0\n')
    return manifest


def serve_in_thread(engine) -> tuple[str, callable]:
    """model.serve's app on `engine` (the in-process run's own: no second copy in memory), in a
    thread with its own event loop; returns its base URL and a stop function."""
    loop = asyncio.new_event_loop()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    runner = web.AppRunner(create_app(engine, "composer-mini"))
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def stop() -> None:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)

    return f"http://127.0.0.1:{port}/v1", stop


def calls_of(record: dict, tokenizer: Tokenizer) -> list[list[tuple]]:
    """The model calls (prompt, completion ids, finish) and tool calls of an attempt's log, with
    its environment's absolute path written as <ROOT>: each environment has its own directory,
    which the system prompt names (see the module docstring)."""
    records = read_session(Path(record["log"]))
    root = records[0]["workspace"]
    models = [(tokenizer.decode(r["prompt_token_ids"]).replace(root, "<ROOT>"), r["completion_token_ids"],
               r["finish_reason"]) for r in records if r["type"] == "model_call"]
    tools = [(r["name"], json.dumps(r["arguments"], sort_keys=True).replace(root, "<ROOT>"), r["status"])
             for r in records if r["type"] == "tool_call"]
    return [models, tools]


def the_record(out: Path) -> dict:
    (line,) = (out / "one" / "records.jsonl").read_text().splitlines()
    return json.loads(line)


@pytest.mark.slow
def test_composer_mini_in_process_and_through_model_serve_run_the_same(composer_mini_dir, tmp_path):
    manifest = write_suite(tmp_path)
    common = ["--suite", str(manifest), "--parallel", "1", "--no-progress"]
    assert eval_main([*common, "--policy", str(composer_mini_dir), "--out", str(tmp_path / "engine")]) == 0
    local = the_record(tmp_path / "engine")
    report = json.loads((tmp_path / "engine" / "one" / "report.json").read_text())
    assert report["complete"] and report["summary"]["attempts"] == 1
    assert (tmp_path / "engine" / "one" / "report.png").stat().st_size > 0
    assert local["status"] == "scored" and local["resolved"] in (True, False)
    tokenizer = Tokenizer.from_dir(composer_mini_dir)
    engine_calls = calls_of(local, tokenizer)
    assert engine_calls[0] and all(prompt and len(out) <= 24 for prompt, out, _ in engine_calls[0])

    url, stop = serve_in_thread(_shared_engine(str(Path(composer_mini_dir).resolve()), "int4"))  # the run's own
    try:
        assert eval_main([*common, "--policy", url, "--out", str(tmp_path / "served")]) == 0
    finally:
        stop()
    served = the_record(tmp_path / "served")
    assert served["status"] == "scored"
    assert calls_of(served, tokenizer) == engine_calls  # the same tokens step by step, the same tool calls
    for key in ("resolved", "steps", "tool_calls", "stop_reason"):
        assert served[key] == local[key], key
    assert served["reward"]["success"] == local["reward"]["success"]
    if not local["resolved"]:  # a resolved run's reward counts wall time, which differs
        assert served["reward"]["reward"] == local["reward"]["reward"]
    eff = ("turns", "tool_calls", "parallel_calls", "prompt_tokens", "completion_tokens")
    assert [served["reward"]["efficiency"][k] for k in eff] == [local["reward"]["efficiency"][k] for k in eff]
    assert served["reward"]["claims"]["unsupported"] == local["reward"]["claims"]["unsupported"]
    assert served["reward"]["terms"]["success"] == local["reward"]["terms"]["success"]
