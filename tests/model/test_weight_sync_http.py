"""The weight-sync route (model/weight_sync.py) on model/serve.py's app in-process on 127.0.0.1: off
by default, its token, loads by path and by safetensors body, refusals that change nothing, and
the loopback-only rule of `python -m model.serve --enable-weight-sync`.

Run: .venv/bin/python -m pytest tests/model/test_weight_sync_http.py -q
"""

from __future__ import annotations

import re
import socket

import aiohttp
import pytest
import torch
from aiohttp import web
from byte_tokenizer import ByteTokenizer
from safetensors.torch import save

from model import serve, weight_sync
from model.config import ModelConfig
from model.engine import Engine
from model.hf import save_model
from model.transformer import Transformer

KEY, TOKEN = "api-key", "sync-token"


def model(seed: int) -> Transformer:
    return Transformer(ModelConfig.debug(max_position_embeddings=128)).init_weights(seed=seed).eval()


@pytest.fixture
def engine():
    engine = Engine(model(0), ByteTokenizer(stop_token_ids=(0,)), max_batch=2)
    yield engine
    engine.close()


async def start(engine: Engine, token: str | None) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(serve.create_app(engine, "composer-mini", api_key=KEY, weight_sync_token=token))
    await runner.setup()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}{weight_sync.ROUTE}"


async def call(url: str, *, token: str | None = TOKEN, json=None, data: bytes | None = None, method: str = "POST"):
    headers = {"Authorization": f"Bearer {KEY}"}
    if token is not None:
        headers[weight_sync.TOKEN_HEADER] = token
    if data is not None:
        headers["Content-Type"] = "application/octet-stream"
    async with aiohttp.ClientSession() as session, session.request(method, url, json=json, data=data, headers=headers) as resp:
        return resp.status, await resp.json()


async def test_weight_sync_is_off_unless_a_token_turns_it_on(engine):
    runner, url = await start(engine, None)
    try:
        status, _ = await call(url, json={"path": "/nowhere"})
        assert status == 404 and engine.weight_version == 0
    finally:
        await runner.cleanup()


async def test_loads_by_path_and_by_body_behind_the_token(engine, tmp_path):
    trainer = model(7)
    save_model(trainer, tmp_path / "step-5")
    runner, url = await start(engine, TOKEN)
    try:
        for token in (None, "wrong"):
            status, body = await call(url, token=token, json={"path": str(tmp_path / "step-5")})
            assert status == 401 and weight_sync.TOKEN_HEADER in body["error"]["message"]
        assert engine.weight_version == 0
        status, body = await call(url, json={"path": str(tmp_path / "step-5"), "version": 5})
        assert status == 200 and body["weight_version"] == 5 and body["tensors"] > 0
        assert torch.equal(engine.model.layers[1].moe.experts.w2_EDF, trainer.layers[1].moe.experts.w2_EDF)
        norm = torch.full((64,), 1.5)
        status, body = await call(url + "?version=6&in_flight=abort", data=save({"model.norm.weight": norm}))
        assert status == 200 and body["weight_version"] == 6 and body["tensors"] == 1
        assert torch.equal(engine.model.norm.weight, norm)
        assert await call(url, method="GET") == (200, {"weight_version": 6})
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("request_args", "message"),
    [
        ({"data": save({"model.layers.7.self_attn.q_proj.weight": torch.ones(64, 64)})}, "unknown tensor names"),
        ({"data": save({"model.norm.weight": torch.full((64,), float("inf"))})}, "NaN or infinite"),
        ({"data": b"not safetensors"}, "not a safetensors file"),
        ({"json": {"version": 3}}, "Send 'path'"),
        ({"json": {"path": "/no/such/checkpoint"}}, "no such checkpoint|no \\*.safetensors"),
        ({"json": {"path": "/tmp", "version": "seven"}}, "'version' must be an integer"),
        ({"json": {"path": "/tmp", "in_flight": "later"}}, "'in_flight' must be one of"),
    ],
    ids=["unknown-name", "non-finite", "garbage-body", "no-path", "missing-dir", "bad-version", "bad-policy"],
)
async def test_refused_loads_are_400s_that_change_nothing(engine, request_args, message):
    before = {name: t.clone() for name, t in engine.model.state_dict().items()}
    runner, url = await start(engine, TOKEN)
    try:
        status, body = await call(url, **request_args)
    finally:
        await runner.cleanup()
    assert status == 400, body
    assert re.search(message, body["error"]["message"]), body
    assert engine.weight_version == 0
    assert all(torch.equal(engine.model.state_dict()[name], t) for name, t in before.items())


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_hosts_are_allowed(host):
    weight_sync.check_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.com"])
def test_serve_refuses_weight_sync_off_loopback(host, capsys):
    with pytest.raises(SystemExit) as exit_:
        serve.main(["--enable-weight-sync", "--host", host])  # refused before any model loads
    assert exit_.value.code == 2 and "loopback" in capsys.readouterr().err
