"""The benchmark with the real composer-mini (slow): `python -m training.eval` runs a held-out
bug-fix task end to end in-process (the two-task-run test of the issue, with one task); the run's
own conversation through model.serve as a URL gives the same prompt and completion token ids and
tool calls at temperature 0; and the same suite runs through the URL (token-in, with the model's
tokenizer) to a scored report whose first prompt is the in-process run's.

The budget is cut to two short steps so the test stays minutes long on a shared CPU. Every
environment is a new directory and the system prompt names the workspace by its absolute path, so
two runs' prompts differ in those characters and their greedy completions may then differ: the
token-exact comparison replays the in-process run's own conversation through both paths, and the
whole run through the URL is compared by its prompts with that path masked.

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

from agent.policy import EndpointPolicy, EnginePolicy
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


async def same_call_both_ways(engine, record: dict) -> tuple:
    """The attempt's first model call again, on its logged conversation, through the in-process
    policy and through model.serve's HTTP app on the same engine: (in-process Reply, served)."""
    records = read_session(Path(record["log"]))
    header = records[0]
    request = next(r["text"] for r in records if r["type"] == "user_message")
    messages = [{"role": "system", "content": header["system_prompt"]}, {"role": "user", "content": request}]
    first = next(r for r in records if r["type"] == "model_call")
    max_tokens = len(first["completion_token_ids"])
    local = await EnginePolicy(engine).complete(messages, header["tools"], max_tokens=max_tokens)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    runner = web.AppRunner(create_app(engine, "composer-mini"))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    policy = EndpointPolicy(f"http://127.0.0.1:{port}/v1")
    try:
        served = await policy.complete(messages, header["tools"], max_tokens=max_tokens)
    finally:
        await policy.aclose()
        await runner.cleanup()
    assert local.completion_token_ids == first["completion_token_ids"]  # the run's call, reproduced
    return local, served


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

    engine = _shared_engine(str(Path(composer_mini_dir).resolve()), "int4")  # the run's own
    # the same conversation through model.serve gives the same token ids as in-process
    mine, served = asyncio.run(same_call_both_ways(engine, local))
    assert served.prompt_token_ids == mine.prompt_token_ids
    assert served.completion_token_ids == mine.completion_token_ids
    assert [(c.name, c.arguments) for c in served.tool_calls] == [(c.name, c.arguments) for c in mine.tool_calls]

    # a whole run through the URL: the same prompts but for the environment's own path
    url, stop = serve_in_thread(engine)
    try:
        assert eval_main([*common, "--policy", url, "--tokenizer", str(composer_mini_dir),
                          "--out", str(tmp_path / "served")]) == 0
    finally:
        stop()
    served_record = the_record(tmp_path / "served")
    assert served_record["status"] == "scored"
    assert calls_of(served_record, tokenizer)[0][0][0] == engine_calls[0][0][0]
