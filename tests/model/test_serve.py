"""model/serve.py in-process on 127.0.0.1, driven by the real `openai.AsyncOpenAI` client, raw
aiohttp, and model/client.py's OpenAICompatibleClient.

Most tests run an Engine over a tiny random MoE with the REAL tokenizer (read from the bundled
GGUF's metadata), so prompts, chat template, tool calls and logprob tokens are the real ones; a
scripted engine replays fixed model text (tool-call streaming, failures). One slow test runs the
real composer-mini. Run: .venv/bin/python -m pytest tests/model/test_serve.py -q [-m "not slow"]
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import aiohttp
import openai
import pytest
from aiohttp import web

from model.client import (
    APIConnectionError,
    APIError,
    ChatAccumulator,
    OpenAICompatibleClient,
    parse_chat_response,
)
from model.config import ModelConfig
from model.engine import Engine
from model.sequence import Completion, StreamEvent
from model.serve import create_app
from model.tokenizer import Tokenizer
from model.transformer import Transformer

NAME = "composer-mini"
KEY = "test-key"
CONTEXT = 512
USER = [{"role": "user", "content": "Say something about Python."}]
READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file", "description": "Read a file from the repository",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}
WRITE_FILE = {
    "type": "function",
    "function": {"name": "write_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
}
SCRIPT = (
    'Let me look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "src/a.py"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "grep", "arguments": {"pattern": "</tool_call>"}}\n</tool_call>'
)


class RecordingEngine(Engine):
    """The engine, keeping every finished Completion (to see cancellations)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.finished: list[Completion] = []
        self.params: list = []

    def submit(self, prompt_ids, params, on_event=lambda _: None, on_done=lambda _: None):
        self.params.append(params)

        def done(result):
            if isinstance(result, Completion):
                self.finished.append(result)
            on_done(result)

        return super().submit(prompt_ids, params, on_event, done)


class ScriptedEngine:
    """Stands in for the engine: every request gets the same model text, one token per event.
    `fail`: "submit" raises at once, "midway" fails the request after two tokens."""

    def __init__(self, tokenizer: Tokenizer, text: str, fail: str | None = None, delay: float = 0.0) -> None:
        self.tokenizer, self.max_seq_len, self.fail, self.delay = tokenizer, CONTEXT, fail, delay
        self.ids = [*tokenizer.encode(text), tokenizer.eos_token_id]
        self.cancelled = threading.Event()
        """Set when a request was cancelled before its end."""

    def tool_call_constraint(self, tools, mode="auto", quotes=None):
        return None  # the script's text is fixed: nothing to constrain

    def submit(self, prompt_ids, params, on_event, on_done):
        if self.fail == "submit":
            raise RuntimeError("the scripted engine broke")
        cancel = threading.Event()
        threading.Thread(target=self._run, args=(prompt_ids, on_event, on_done, cancel), daemon=True).start()
        return cancel.set

    def _run(self, prompt_ids, on_event, on_done, cancel):
        detok, text = self.tokenizer.incremental_decoder(), ""
        for i, token in enumerate(self.ids):
            time.sleep(self.delay)
            if cancel.is_set():
                self.cancelled.set()
                on_done(Completion(list(prompt_ids), [], text, [], [], "cancelled", None, 0.0, 0.0))
                return
            if self.fail == "midway" and i == 2:
                on_done(RuntimeError("the scripted engine broke midway"))
                return
            last = i == len(self.ids) - 1
            piece = "" if last else detok.feed(token)
            text += piece
            on_event(StreamEvent([token], piece, [-0.25], [], last, "stop" if last else None))
        on_done(Completion(
            list(prompt_ids), list(self.ids), text, [-0.25] * len(self.ids), [], "stop", None, 0.0, 0.0,
            stop_reason=self.ids[-1],
        ))


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    from gguf import GGUFReader

    from model.gguf_import import bundled_gguf_path

    return Tokenizer.from_gguf_metadata(GGUFReader(bundled_gguf_path()))


@pytest.fixture(scope="module")
def engine(tokenizer) -> RecordingEngine:
    config = ModelConfig.debug(vocab_size=49152, max_position_embeddings=CONTEXT)
    engine = RecordingEngine(Transformer(config).init_weights(0), tokenizer, max_batch=4)
    yield engine
    engine.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def start(engine, api_key: str | None = None) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(create_app(engine, NAME, api_key=api_key))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


@pytest.fixture
async def server(engine):
    runner, url = await start(engine, api_key=KEY)
    yield url
    await runner.cleanup()


@pytest.fixture
async def oai(server):
    client = openai.AsyncOpenAI(base_url=server + "/v1", api_key=KEY, max_retries=0)
    yield client
    await client.close()


async def post(url: str, body, *, key: str | None = KEY, raw: bytes | None = None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with aiohttp.ClientSession() as session:
        data = raw if raw is not None else json.dumps(body).encode()
        async with session.post(url + "/v1/chat/completions", data=data, headers=headers) as resp:
            return resp.status, await resp.json()


async def assert_serving(url: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(url + "/health") as resp:
        assert resp.status == 200 and (await resp.json())["status"] == "ok"


# ---- chat ---------------------------------------------------------------------------------------


async def test_models_health_and_unknown_route(server, oai):
    models = await oai.models.list()
    assert [m.id for m in models.data] == [NAME]
    await assert_serving(server)
    headers = {"Authorization": f"Bearer {KEY}"}
    async with aiohttp.ClientSession() as session, session.get(server + "/v1/nope", headers=headers) as resp:
        assert resp.status == 404 and "/v1/nope" in (await resp.json())["error"]["message"]


async def test_chat_and_stream_agree(oai, tokenizer):
    args = dict(model=NAME, messages=USER, max_tokens=12, temperature=0)
    full = await oai.chat.completions.create(**args)
    assert full.object == "chat.completion" and full.id.startswith("chatcmpl-") and full.model == NAME
    choice = full.choices[0]
    assert choice.message.role == "assistant" and choice.message.content and choice.finish_reason == "length"
    assert full.usage.prompt_tokens == len(tokenizer.encode_chat(USER))
    assert full.usage.completion_tokens == 12 and full.usage.total_tokens == full.usage.prompt_tokens + 12
    stream = await oai.chat.completions.create(**args, stream=True, stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    assert {c.id for c in chunks} == {chunks[0].id} and chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == choice.message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    totals = {k: v for k, v in full.usage.model_dump().items() if k != "prompt_tokens_details"}
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump(include=set(totals)) == totals
    # The second request of the same prompt: its full blocks came from the prefix cache.
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == (full.usage.prompt_tokens - 1) // 32 * 32
    assert all(c.usage is None for c in chunks[:-1])


async def test_logprobs_and_token_ids(oai, tokenizer):
    extra = {"return_token_ids": True, "return_routed_experts": True}
    args = dict(model=NAME, messages=USER, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3, extra_body=extra)
    full = await oai.chat.completions.create(**args)
    choice = full.choices[0]
    entries = choice.logprobs.content
    assert len(entries) == len(choice.token_ids) == full.usage.completion_tokens == 8
    strings = tokenizer.token_strings()
    for entry, token in zip(entries, choice.token_ids):
        assert entry.token == strings[token] and bytes(entry.bytes) == tokenizer.id_to_bytes[token]
        assert len(entry.top_logprobs) == 3 and entry.logprob <= 0
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob)  # greedy takes the top
    assert full.prompt_token_ids == tokenizer.encode_chat(USER)
    assert tokenizer.decode(choice.token_ids) == choice.message.content
    experts = choice.routed_experts  # (prompt + completion - 1, layers, k)
    assert (len(experts), len(experts[0]), len(experts[0][0])) == (len(full.prompt_token_ids) + 7, 2, 2)
    stream = await oai.chat.completions.create(**args, stream=True)
    chunks = [c async for c in stream]
    assert chunks[0].prompt_token_ids == full.prompt_token_ids
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in entries]
    assert [t for c in chunks for t in getattr(c.choices[0], "token_ids", None) or []] == choice.token_ids
    assert chunks[-1].choices[0].routed_experts == experts


async def test_vllm_request_extensions_reach_the_sampler(oai, engine):
    args = dict(model=NAME, messages=USER, max_tokens=8, temperature=0)
    greedy = await oai.chat.completions.create(**args)
    extra = {"ignore_eos": True, "min_tokens": 5, "top_k": 1, "repetition_penalty": 1.0}
    top1 = await oai.chat.completions.create(**{**args, "temperature": 1.0}, seed=1, extra_body=extra)
    params = engine.params[-1]
    assert (params.ignore_eos, params.min_tokens, params.top_k, params.repetition_penalty) == (True, 5, 1, 1.0)
    assert top1.choices[0].message.content == greedy.choices[0].message.content  # top_k 1 is greedy
    assert top1.usage.completion_tokens == 8
    await oai.chat.completions.create(**args, extra_body={"top_k": -1, "repetition_penalty": 1.3})
    assert (engine.params[-1].top_k, engine.params[-1].repetition_penalty) == (0, 1.3)  # vLLM's -1: off


async def test_cached_tokens_report_prefix_hits(oai, server, tokenizer):
    messages = [{"role": "user", "content": "Explain this code:\n" + "def f(x):\n    return x + 1\n" * 12}]
    args = dict(model=NAME, messages=messages, max_tokens=6, temperature=0)
    first = await oai.chat.completions.create(**args)
    second = await oai.chat.completions.create(**args)
    n = len(tokenizer.encode_chat(messages))
    assert first.usage.prompt_tokens == second.usage.prompt_tokens == n
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens == (n - 1) // 32 * 32 > 0
    assert second.choices[0].message.content == first.choices[0].message.content
    stream = await oai.chat.completions.create(**args, stream=True, stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == (n - 1) // 32 * 32
    async with aiohttp.ClientSession() as session, session.get(server + "/health") as resp:
        report = (await resp.json())["prefix_cache"]
    assert report["enabled"] and report["hit_tokens"] >= 2 * ((n - 1) // 32 * 32)
    assert 0 < report["used_tokens"] <= report["capacity_tokens"]
async def test_answers_carry_the_weight_version_they_ran_on(oai, engine):
    args = dict(model=NAME, messages=USER, max_tokens=4, temperature=0)

    async def versions() -> tuple[int, list]:
        full = await oai.chat.completions.create(**args)
        chunks = [c async for c in await oai.chat.completions.create(**args, stream=True)]
        return full.weight_version, [getattr(c, "weight_version", None) for c in chunks]

    before = await versions()
    same = {"model.norm.weight": engine.model.norm.weight.clone()}  # new version, same weights
    await asyncio.to_thread(engine.load_weights, same, version=engine.weight_version + 3)
    after = await versions()
    old = engine.weight_version - 3
    # The version rides on the plain answer and on the stream's chunk with the finish reason only.
    assert before == (old, [None] * (len(before[1]) - 1) + [old])
    assert after == (old + 3, [None] * (len(after[1]) - 1) + [old + 3])


async def test_required_tool_call_is_well_formed_even_for_a_random_model(oai):
    args = dict(model=NAME, messages=[{"role": "user", "content": "Read src/app.py"}], tools=[READ_FILE],
                tool_choice="required", max_tokens=80, temperature=0)
    full = await oai.chat.completions.create(**args)
    [call] = full.choices[0].message.tool_calls[:1]
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "read_file"
    assert isinstance(json.loads(call.function.arguments), dict)
    assert "<tool_call>" not in (full.choices[0].message.content or "")
    stream = await oai.chat.completions.create(**args, stream=True)
    chunks = [c async for c in stream]
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    assert deltas[0].index == 0 and deltas[0].function.name == "read_file" and deltas[0].type == "function"
    assert json.loads(deltas[0].function.arguments) == json.loads(call.function.arguments)
    assert not any("<tool_" in (c.choices[0].delta.content or "") for c in chunks if c.choices)


async def test_named_tool_choice_and_single_call(oai):
    full = await oai.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "Write it"}], tools=[READ_FILE, WRITE_FILE],
        tool_choice={"type": "function", "function": {"name": "write_file"}}, parallel_tool_calls=False,
        max_tokens=80, temperature=0,
    )
    [call] = full.choices[0].message.tool_calls
    assert call.function.name == "write_file" and isinstance(json.loads(call.function.arguments), dict)
    assert full.choices[0].finish_reason == "tool_calls"


async def test_scripted_tool_calls_stream_as_openai_deltas(tokenizer):
    runner, url = await start(ScriptedEngine(tokenizer, SCRIPT))
    try:
        oai = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        args = dict(model=NAME, messages=USER, tools=[READ_FILE])
        full = await oai.chat.completions.create(**args)
        message = full.choices[0].message
        assert message.content == "Let me look." and full.choices[0].finish_reason == "tool_calls"
        assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == [
            ("read_file", {"path": "src/a.py"}), ("grep", {"pattern": "</tool_call>"})]
        chunks = [c async for c in await oai.chat.completions.create(**args, stream=True)]
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        calls = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
        assert content == "Let me look." and [d.index for d in calls] == [0, 1]
        assert [d.function.arguments for d in calls] == [c.function.arguments for c in message.tool_calls]
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        plain = await oai.chat.completions.create(model=NAME, messages=USER)  # no tools: text as is
        assert plain.choices[0].message.content == SCRIPT and plain.choices[0].finish_reason == "stop"
        await oai.close()
    finally:
        await runner.cleanup()


async def test_concurrent_requests_all_complete(oai):
    async def one(i):
        messages = [{"role": "user", "content": f"Request number {i}"}]
        return await oai.chat.completions.create(model=NAME, messages=messages, max_tokens=10 + i, temperature=0)

    results = await asyncio.gather(*(one(i) for i in range(6)))
    for i, result in enumerate(results):
        assert result.usage.completion_tokens <= 10 + i and result.choices[0].finish_reason in ("stop", "length")


async def test_max_tokens_is_clamped_to_the_context(oai, tokenizer):
    messages = [{"role": "user", "content": "word " * 475}]
    prompt = len(tokenizer.encode_chat(messages))
    assert CONTEXT - 20 < prompt < CONTEXT
    full = await oai.chat.completions.create(model=NAME, messages=messages, max_tokens=1000, temperature=0)
    assert full.usage.completion_tokens == CONTEXT - prompt and full.choices[0].finish_reason == "length"


# ---- errors -------------------------------------------------------------------------------------

BAD_BODIES = [
    ({"model": None}, "model"),
    ({"model": 3, "messages": USER}, "model"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0]"),
    ({"messages": [*USER, {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{"}}]}]},
     "messages[1].tool_calls[0].function.arguments"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools[0].function.name"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [READ_FILE], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": [READ_FILE], "tool_choice": "always"}, "tool_choice"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": "ten"}, "max_tokens"),
    ({"max_completion_tokens": -1}, "max_completion_tokens"),
    ({"temperature": 2.5}, "temperature"),
    ({"temperature": "hot"}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"seed": "x"}, "seed"),
    ({"stop": [""]}, "stop"),
    ({"stop": 5}, "stop"),
    ({"n": 2}, "n"),
    ({"stream": "yes"}, "stream"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"stream": True, "stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
    ({"logprobs": "yes"}, "logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"return_token_ids": "yes"}, "return_token_ids"),
    ({"return_routed_experts": 1}, "return_routed_experts"),
    ({"constrained_tool_calls": "no"}, "constrained_tool_calls"),
    ({"speculative": "x"}, "speculative"),
    ({"speculative": True, "temperature": 0.7}, "speculative"),
    ({"frequency_penalty": 0.5}, "frequency_penalty"),
    ({"ignore_eos": "yes"}, "ignore_eos"),
    ({"min_tokens": -1}, "min_tokens"),
    ({"top_k": -2}, "top_k"),
    ({"top_k": 1.5}, "top_k"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"max_token": 5}, "max_token"),
]


async def test_each_invalid_field_is_a_400_naming_it(server):
    for fields, param in BAD_BODIES:
        status, body = await post(server, {"model": NAME, "messages": USER, **fields})
        error = body["error"]
        assert status == 400, (fields, body)
        assert error["param"] == param and param in error["message"], (fields, error)
        assert error["type"] == "invalid_request_error" and set(error) == {"message", "type", "param", "code"}
    status, body = await post(server, [1, 2])
    assert status == 400 and "JSON object" in body["error"]["message"]
    status, body = await post(server, None, raw=b'{"model": "composer-mini", "messages": [')
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    await assert_serving(server)


async def test_openai_client_sees_errors_and_the_server_goes_on(server, oai, tokenizer):
    with pytest.raises(openai.BadRequestError) as err:
        await oai.chat.completions.create(model=NAME, messages=USER, n=2)
    assert err.value.status_code == 400 and "'n'" in err.value.message
    with pytest.raises(openai.NotFoundError) as err:
        await oai.chat.completions.create(model="gpt-4o", messages=USER)
    assert "gpt-4o" in err.value.message and err.value.body["param"] == "model"
    too_long = [{"role": "user", "content": "word " * 600}]
    with pytest.raises(openai.BadRequestError) as err:
        await oai.chat.completions.create(model=NAME, messages=too_long)
    assert err.value.code == "context_length_exceeded" and f"{CONTEXT} tokens" in err.value.message
    assert f"{len(tokenizer.encode_chat(too_long))} tokens" in err.value.message
    for key in ("wrong", None):
        bad = openai.AsyncOpenAI(base_url=server + "/v1", api_key="unused", max_retries=0,
                                 default_headers={"Authorization": f"Bearer {key}" if key else ""})
        with pytest.raises(openai.AuthenticationError) as err:
            await bad.models.list()
        assert err.value.status_code == 401 and "Authorization" in err.value.message
        await bad.close()
    await assert_serving(server)  # /health needs no key
    reply = await oai.chat.completions.create(model=NAME, messages=USER, max_tokens=2)
    assert reply.usage.completion_tokens == 2


async def test_engine_failures_are_500s_and_the_server_goes_on(tokenizer):
    for fail in ("submit", "midway"):
        runner, url = await start(ScriptedEngine(tokenizer, "Hello there, world.", fail=fail))
        try:
            status, body = await post(url, {"model": NAME, "messages": USER}, key=None)
            assert status == 500 and "scripted engine broke" in body["error"]["message"]
            async with OpenAICompatibleClient(url + "/v1", model=NAME, max_retries=0) as client:
                with pytest.raises(APIError, match="scripted engine broke"):
                    async for _ in client.stream_chat(USER):
                        pass
            await assert_serving(url)
        finally:
            await runner.cleanup()


async def wait_drained(engine: Engine, seconds: float = 3.0) -> None:
    deadline = time.monotonic() + seconds
    while (engine._active or not engine._queue.empty()) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert not engine._active and engine._queue.empty()


async def test_client_disconnect_cancels_the_generation(server, engine):
    body = {"model": NAME, "messages": USER, "max_tokens": 400, "temperature": 0, "stream": True,
            "speculative": False}
    headers = {"Authorization": f"Bearer {KEY}"}
    async with aiohttp.ClientSession() as session:
        resp = await session.post(server + "/v1/chat/completions", json=body, headers=headers)
        await resp.content.readuntil(b"\n\n")
        await resp.content.readuntil(b"\n\n")
        resp.close()  # drops the connection mid-stream
    await wait_drained(engine)
    last = engine.finished[-1]
    assert last.finish_reason == "cancelled" and len(last.token_ids) < 400
    await assert_serving(server)


async def test_client_disconnect_cancels_a_plain_request(tokenizer):
    slow = ScriptedEngine(tokenizer, "word " * 100, delay=0.02)  # two seconds of output
    runner, url = await start(slow)
    try:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(TimeoutError):
                await session.post(url + "/v1/chat/completions", json={"model": NAME, "messages": USER},
                                   timeout=aiohttp.ClientTimeout(total=0.3))
        await asyncio.to_thread(slow.cancelled.wait, 1.0)
        assert slow.cancelled.is_set()
        await assert_serving(url)
    finally:
        await runner.cleanup()


# ---- OpenAICompatibleClient -----------------------------------------------------------------------


async def test_client_chat_stream_and_tool_calls(server):
    async with OpenAICompatibleClient(server + "/v1", api_key=KEY) as client:
        assert await client.list_models() == [NAME]
        extra = {"return_token_ids": True}
        result = await client.chat(USER, max_tokens=9, temperature=0, top_logprobs=2, extra=extra)
        assert client.model == NAME and result.content and result.finish_reason == "length"
        assert result.usage.completion_tokens == 9 == len(result.logprobs) == len(result.completion_token_ids)
        assert len(result.logprobs[0].top_logprobs) == 2 and result.prompt_token_ids
        accumulator, deltas = ChatAccumulator(), []
        async for delta in client.stream_chat(USER, max_tokens=9, temperature=0, extra=extra):
            accumulator.add(delta)
            deltas.append(delta)
        streamed = accumulator.result()
        assert streamed.content == result.content and streamed.usage == result.usage
        assert streamed.completion_token_ids == result.completion_token_ids
        assert [lp.token for lp in streamed.logprobs] == [lp.token for lp in result.logprobs]
        called = await client.chat(USER, tools=[READ_FILE], tool_choice="required", max_tokens=80, temperature=0)
        assert called.tool_calls[0].name == "read_file" and isinstance(called.tool_calls[0].arguments, dict)
        with pytest.raises(APIError) as err:
            await client.chat(USER, temperature=5)
        assert err.value.status == 400 and err.value.param == "temperature" and "temperature" in str(err.value)
    async with OpenAICompatibleClient(server + "/v1", api_key="wrong", model=NAME) as client:
        with pytest.raises(APIError) as err:
            await client.chat(USER)
        assert err.value.status == 401 and err.value.code == "invalid_api_key"


async def test_client_parses_raw_tool_call_content_and_retries():
    raw = {"id": "x", "model": "m", "choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": SCRIPT}}], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}
    result = parse_chat_response(raw)
    assert result.content == "Let me look." and [c.name for c in result.tool_calls] == ["read_file", "grep"]
    assert result.finish_reason == "tool_calls" and result.usage.total_tokens == 7
    bad = {"choices": [{"message": {"tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{"}}]}}]}
    assert parse_chat_response(bad).tool_call_errors[0].message.startswith("tool call 1 (f)")

    calls = []

    async def flaky(request: web.Request) -> web.Response:
        calls.append(request.path)
        if len(calls) < 3:
            return web.json_response({"error": {"message": "busy"}}, status=503, headers={"Retry-After": "0"})
        if request.path.endswith("/models"):
            return web.json_response({"data": [{"id": "m"}]})
        return web.json_response({"error": {"message": "nope", "param": "x"}}, status=400)

    app = web.Application()
    app.router.add_route("*", "/v1/{tail:.*}", flaky)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with OpenAICompatibleClient(f"http://127.0.0.1:{port}/v1", backoff=0.01) as client:
            assert await client.list_models() == ["m"] and len(calls) == 3
            with pytest.raises(APIError, match="nope"):
                await client.chat(USER)
            assert calls[3:] == ["/v1/models", "/v1/chat/completions"]  # model lookup; a 400 is not retried
    finally:
        await runner.cleanup()
    async with OpenAICompatibleClient(f"http://127.0.0.1:{free_port()}/v1", model="m", backoff=0.01) as client:
        with pytest.raises(APIConnectionError, match="could not reach"):
            await client.chat(USER)


# ---- the real model -----------------------------------------------------------------------------


@pytest.mark.slow
async def test_real_composer_mini_answers_and_calls_a_tool(composer_mini_dir):
    engine = Engine.from_pretrained(composer_mini_dir, max_batch=2)
    runner, url = await start(engine)
    try:
        async with OpenAICompatibleClient(url + "/v1", model=NAME) as client:
            question = [{"role": "user", "content": "What is the capital of France?"}]
            deltas = [d async for d in client.stream_chat(question, max_tokens=24, temperature=0)]
            answer = "".join(d.content for d in deltas)
            assert "Paris" in answer, answer
            ask = [{"role": "user", "content": "Read the file src/app.py and tell me what it does."}]
            result = await client.chat(ask, tools=[READ_FILE], tool_choice="required", max_tokens=80,
                                       temperature=0, extra={"parallel_tool_calls": False})
            [call] = result.tool_calls
            assert call.name == "read_file" and isinstance(call.arguments, dict) and call.arguments
            assert result.finish_reason == "tool_calls" and "<tool_call>" not in result.content
    finally:
        await runner.cleanup()
        engine.close()
