"""Token in, token out: model.serve's `/v1/completions` (model/serve_completions.py) driven by the
real `openai.AsyncOpenAI` client and by the agent's EndpointPolicy, against the in-process engine
over a tiny random MoE with the real tokenizer. At temperature 0 the ids are the in-process ones.
"""

from __future__ import annotations

import json

import aiohttp
import openai
import pytest
from aiohttp import web

from agent.policy import EndpointPolicy, EnginePolicy
from model.config import ModelConfig
from model.engine import Engine
from model.quotes_protocol import encode
from model.sampling import SamplingParams
from model.serve import create_app
from model.toolcalls import parse_tool_calls
from model.transformer import Transformer

NAME = "composer-mini"
READ_FILE = {
    "type": "function",
    "function": {"name": "read_file", "description": "Read a file",
                 "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
}
EDIT_FILE = {
    "type": "function",
    "function": {"name": "edit_file", "description": "Replace old_string with new_string in a file",
                 "parameters": {"type": "object", "required": ["path", "old_string", "new_string"], "properties": {
                     "path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"}}}},
}
SOURCE = "def median(xs):\n    xs = sorted(xs)\n    return xs[len(xs) // 2]\n"
QUOTES = {"edit_file": {"old_string": {"stats.py": SOURCE, "./stats.py": SOURCE}}}
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say something about ü."}]


@pytest.fixture(scope="module")
def engine(real_tokenizer):
    config = ModelConfig.debug(vocab_size=49152, max_position_embeddings=512)
    engine = Engine(Transformer(config).init_weights(0), real_tokenizer, max_batch=4)
    yield engine
    engine.close()


@pytest.fixture
async def url(engine, unused_tcp_port):
    runner = web.AppRunner(create_app(engine, NAME))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    yield f"http://127.0.0.1:{unused_tcp_port}"
    await runner.cleanup()


@pytest.fixture
async def oai(url):
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    yield client
    await client.close()


def in_process(engine, ids: list[int], max_tokens: int):
    [done] = engine.generate([ids], SamplingParams(max_tokens=max_tokens, temperature=0.0))
    return done


async def test_ids_in_ids_out_through_the_openai_client_equal_the_engines(oai, engine, real_tokenizer):
    ids = real_tokenizer.encode_chat(MESSAGES)
    expected = in_process(engine, ids, 12)
    plain = await oai.completions.create(model=NAME, prompt=[ids], max_tokens=12, temperature=0, logprobs=0,
                                         extra_body={"return_token_ids": True})
    choice = plain.choices[0].model_extra
    assert choice["token_ids"] == expected.token_ids and choice["prompt_token_ids"] == ids
    assert plain.choices[0].text == expected.text
    assert plain.choices[0].logprobs.token_logprobs == pytest.approx(expected.logprobs, abs=1e-4)
    assert choice["forced"] == [0] * len(expected.token_ids)
    assert plain.model_extra["weight_version"] == 0 and plain.model_extra["logprob_convention"] == "sampling"
    assert plain.usage.prompt_tokens == len(ids) and plain.usage.completion_tokens == len(expected.token_ids)
    streamed, text, first = [], "", None
    async for chunk in await oai.completions.create(model=NAME, prompt=ids, max_tokens=12, temperature=0, stream=True,
                                                    extra_body={"return_token_ids": True}):
        if chunk.choices:
            extra = chunk.choices[0].model_extra
            streamed += extra.get("token_ids") or []
            first = first or extra.get("prompt_token_ids")
            text += chunk.choices[0].text
    assert streamed == expected.token_ids and first == ids and text == expected.text
    as_text = await oai.completions.create(model=NAME, prompt=real_tokenizer.decode(ids), max_tokens=12, temperature=0)
    assert as_text.choices[0].text == expected.text  # a string prompt is encoded as it is


async def test_tools_constrain_the_completion(oai):
    ids = [1, 9690, 198]
    answer = await oai.completions.create(
        model=NAME, prompt=ids, max_tokens=60, temperature=1.0, seed=3,
        extra_body={"tools": [READ_FILE], "tool_choice": "required", "return_token_ids": True})
    parsed = parse_tool_calls(answer.choices[0].text, tools=[READ_FILE])
    assert not parsed.errors and [c.name for c in parsed.tool_calls][:1] == ["read_file"]
    assert any(answer.choices[0].model_extra["forced"])  # a random model is pushed into the call


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": [1, 10**7]}, "prompt"), ({"prompt": []}, "prompt"), ({"prompt": [[1], [2]]}, "prompt"),
    ({"prompt": [1], "echo": True}, "echo"), ({"prompt": [1], "n": 2}, "n"), ({"prompt": [1], "logprobs": 99}, "logprobs"),
    ({"prompt": [1], "messages": []}, "messages"), ({"prompt": [1], "tool_choice": "required"}, "tool_choice"),
    ({"prompt": [1], "quotes": [SOURCE]}, "quotes"), ({"prompt": [1], "quotes": {"files": [{"text": SOURCE}]}}, "quotes"),
    ({"prompt": [1], "tools": [EDIT_FILE], "quotes": encode({"edit_file": {"path": {"a.py": SOURCE}}})}, "tools"),
])
async def test_invalid_requests_are_400s_naming_the_field(url, body, param):
    async with aiohttp.ClientSession() as session, session.post(
            url + "/v1/completions", data=json.dumps({"model": NAME, **body})) as resp:
        assert resp.status == 400 and (await resp.json())["error"]["param"] == param


async def test_endpoint_policy_sends_the_files_read_and_the_server_quotes_from_them(url, engine, real_tokenizer,
                                                                                   monkeypatch):
    """EndpointPolicy encodes the loop's quotes (model/quotes_protocol.py) and model.serve builds
    the engine's constraint from them, as EnginePolicy does in process."""
    asked, build = [], engine.tool_call_constraint

    def spy(tools, mode="auto", quotes=None):
        asked.append(quotes)
        return build(tools, mode, quotes)

    monkeypatch.setattr(engine, "tool_call_constraint", spy)
    ids = real_tokenizer.encode_chat(MESSAGES, tools=[EDIT_FILE])
    remote = EndpointPolicy(url + "/v1", model=NAME, tokenizer=real_tokenizer)
    try:
        assert remote.takes_quotes
        reply = await remote.complete(MESSAGES, [EDIT_FILE], max_tokens=24, prompt_ids=ids, quotes=QUOTES)
    finally:
        await remote.aclose()
    direct = await EnginePolicy(engine).complete(MESSAGES, [EDIT_FILE], max_tokens=24, prompt_ids=ids, quotes=QUOTES)
    assert asked == [QUOTES, QUOTES] and reply.completion_token_ids == direct.completion_token_ids


async def test_endpoint_policy_goes_token_in_and_matches_the_engine_policy(url, engine, real_tokenizer):
    ids = real_tokenizer.encode_chat(MESSAGES, tools=[READ_FILE])
    direct = await EnginePolicy(engine).complete(MESSAGES, [READ_FILE], max_tokens=16, prompt_ids=ids)
    remote = EndpointPolicy(url + "/v1", model=NAME, tokenizer=real_tokenizer)
    shown: list[str] = []
    try:
        reply = await remote.complete(MESSAGES, [READ_FILE], max_tokens=16, prompt_ids=ids, on_text=shown.append)
    finally:
        await remote.aclose()
    assert not reply.text_only and remote.token_in is True
    assert reply.prompt_token_ids == ids and reply.completion_token_ids == direct.completion_token_ids
    assert reply.logprobs == pytest.approx(direct.logprobs, abs=1e-4) and reply.forced == direct.forced
    assert reply.content == direct.content == "".join(shown).strip() and reply.weight_version == 0
    assert len(reply.routed_experts) == len(ids) + len(reply.completion_token_ids) - 1


async def test_a_server_without_token_in_gets_text_and_the_reply_says_so(real_tokenizer, unused_tcp_port):
    """A chat-only server (404 on /v1/completions): the policy falls back for good."""
    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        body = {"id": "x", "object": "chat.completion.chunk", "model": "m",
                "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}
        await response.write(f"data: {json.dumps(body)}\n\ndata: [DONE]\n\n".encode())
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", stream)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    policy = EndpointPolicy(f"http://127.0.0.1:{unused_tcp_port}/v1", model="m", tokenizer=real_tokenizer)
    try:
        first = await policy.complete(MESSAGES, [], max_tokens=8, prompt_ids=[1, 2, 3])
        second = await policy.complete(MESSAGES, [], max_tokens=8, prompt_ids=[1, 2, 3])
    finally:
        await policy.aclose()
        await runner.cleanup()
    assert first.text_only and second.text_only and first.content == "hi"
    assert policy.token_in is False and not policy.token_native and not policy.takes_quotes
