"""The two policy backends speak the same protocol (the endpoint one against Composer's own
OpenAI-compatible server), and the system prompt carries the workspace's rules files."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from aiohttp import web

from agent import session as session_module
from agent.policy import EndpointPolicy, EnginePolicy
from agent.prompt import system_prompt
from model.config import ModelConfig
from model.engine import Engine
from model.serve import create_app
from model.tokenizer import Tokenizer
from model.transformer import Transformer

READ_FILE = {
    "type": "function",
    "function": {"name": "read_file", "description": "Read a file.",
                 "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
}


@pytest.fixture(scope="module")
def engine():
    from gguf import GGUFReader

    from model.gguf_import import bundled_gguf_path

    tokenizer = Tokenizer.from_gguf_metadata(GGUFReader(bundled_gguf_path()))
    model = Transformer(ModelConfig.debug(vocab_size=49152, max_position_embeddings=2048)).init_weights(seed=0)
    engine = Engine(model.eval(), tokenizer, max_batch=2)
    yield engine
    engine.close()


async def test_engine_and_endpoint_policies_return_the_same_reply(engine):
    messages = [{"role": "user", "content": "hello"}]
    direct = await EnginePolicy(engine).complete(messages, [], max_tokens=12)
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    number = port.getsockname()[1]
    port.close()
    runner = web.AppRunner(create_app(engine, "composer-mini"))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", number).start()
    try:
        remote = EndpointPolicy(f"http://127.0.0.1:{number}/v1", model="composer-mini")
        streamed: list[str] = []
        reply = await remote.complete(messages, [], max_tokens=12, on_text=streamed.append)
        await remote.client.close()
    finally:
        await runner.cleanup()
    assert reply.completion_token_ids == direct.completion_token_ids
    assert reply.logprobs == pytest.approx(direct.logprobs, abs=1e-4)
    assert reply.content == direct.content and "".join(streamed).strip() == direct.content


async def test_engine_policy_tool_calls_are_well_formed_under_the_constraint(engine):
    reply = await EnginePolicy(engine).complete([{"role": "user", "content": "read a.py"}], [READ_FILE], max_tokens=80)
    for call in reply.tool_calls:
        assert call.name == "read_file" and isinstance(call.arguments, dict)
    assert not reply.tool_call_errors
    assert len(reply.routed_experts) == len(reply.prompt_token_ids) + len(reply.completion_token_ids) - 1


def test_system_prompt_carries_rules_files(tmp_path):
    (tmp_path / "AGENTS.md").write_text("Always run pytest -q before answering.")
    (tmp_path / ".cursorrules").write_text("Prefer small functions.")
    rules = tmp_path / ".cursor" / "rules"
    rules.mkdir(parents=True)
    (rules / "style.mdc").write_text("---\ndescription: style\nglobs: '*.py'\n---\nUse type hints.\n")
    (tmp_path / "elsewhere.md").write_text("not a rules file")
    prompt = system_prompt(tmp_path)
    assert "Always run pytest -q" in prompt and "Prefer small functions" in prompt
    assert "Use type hints." in prompt and "globs:" not in prompt and "not a rules file" not in prompt
    assert str(tmp_path) in prompt


def test_huge_rules_files_are_cut(tmp_path):
    (tmp_path / "AGENTS.md").write_text("rule\n" * 10_000)
    prompt = system_prompt(tmp_path)
    assert len(prompt) < 20_000 and "was cut to fit" in prompt


def test_sessions_starting_together_share_one_engine(monkeypatch):
    built: list[str] = []

    def slow_build(model, quantize, prefault):
        built.append((model, prefault))
        time.sleep(0.2)  # long enough for the other thread to arrive while this one builds
        return object()

    monkeypatch.setattr(Engine, "from_pretrained", staticmethod(slow_build))
    monkeypatch.setattr(session_module, "_ENGINES", {})
    monkeypatch.setenv("COMPOSER_PREFAULT", "1")  # the product's default (the suite turns it off)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(session_module._shared_engine("ckpt", "int4"))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert built == [("ckpt", True)]  # a long-lived engine commits its KV memory (model/prefault.py)
    assert len(got) == 3 and got[0] is got[1] is got[2]
