"""The weight-sync route of model.serve: a trainer loads new weights into a serving engine over
HTTP (Engine.load_weights, model/engine.py). Off unless the server starts with
`--enable-weight-sync`; then it must listen on a loopback address and every call needs the token
(`--weight-sync-token`, $COMPOSER_WEIGHT_SYNC_TOKEN, or a random one printed at start) in the
`X-Composer-Weight-Sync-Token` header (beside `Authorization` when the server has an API key).

    POST /v1/load_weights   application/json
        {"path": "/ckpt/step-120", "version": 120, "in_flight": "finish"}
        path: a safetensors file or a checkpoint directory the server reads in place (the way for
        full checkpoints); version: default the current + 1; in_flight: "finish" or "abort"
    POST /v1/load_weights?version=120&in_flight=abort   application/octet-stream
        a safetensors file's bytes as the body (the way for small updates: LoRA-merged tensors)
    -> 200 {"weight_version": 120, "tensors": 273, "prepare_seconds": 0.9, "drain_seconds": 0.0,
            "swap_seconds": 0.4, "aborted": 0}
    GET /v1/load_weights -> {"weight_version": 120}

Tensor names, partial updates and what happens to running requests are Engine.load_weights's.
A refused update (unknown name, wrong shape or dtype, NaN, unreadable file) is a 400 naming the
tensor, and nothing was written.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
from dataclasses import asdict
from typing import Any

from aiohttp import web
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors

from model.engine import IN_FLIGHT, Engine
from model.openai_protocol import ProtocolError

ROUTE = "/v1/load_weights"
TOKEN_HEADER = "X-Composer-Weight-Sync-Token"
TOKEN_ENV = "COMPOSER_WEIGHT_SYNC_TOKEN"
MAX_BODY_BYTES = 4 * 2**30
"""Largest safetensors body; bigger updates go by path."""


def check_loopback(host: str) -> None:
    """Raises ValueError unless `host` is a loopback address (weight sync must not face a network)."""
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise ValueError(f"--enable-weight-sync needs a loopback --host (127.0.0.1, ::1 or localhost), got {host!r}")


def register(app: web.Application, engine: Engine, token: str) -> None:
    if not token:
        raise ValueError("weight sync needs a non-empty token")
    route = _WeightSync(engine, token)
    app.router.add_post(ROUTE, route.load)
    app.router.add_get(ROUTE, route.version)


class _WeightSync:
    def __init__(self, engine: Engine, token: str) -> None:
        self.engine, self.token = engine, token

    def _authorize(self, request: web.Request) -> None:
        given = request.headers.get(TOKEN_HEADER, "")
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            raise ProtocolError(
                f"{'Incorrect' if given else 'Missing'} weight-sync token: send it in the {TOKEN_HEADER} header.",
                TOKEN_HEADER, code="invalid_weight_sync_token", status=401,
            )

    async def version(self, request: web.Request) -> web.Response:
        self._authorize(request)
        return web.json_response({"weight_version": self.engine.weight_version})

    async def load(self, request: web.Request) -> web.Response:
        self._authorize(request)
        if request.content_type == "application/octet-stream":
            weights, options = await _tensors_from_body(request), dict(request.query)
        else:
            options = await _json_options(request)
            if not isinstance(options.get("path"), str) or not options["path"]:
                raise ProtocolError("Send 'path' (a safetensors file or checkpoint directory) as a string.", "path")
            weights = options["path"]
        version = _version(options.get("version"))
        in_flight = options.get("in_flight", "finish")
        if in_flight not in IN_FLIGHT:
            raise ProtocolError(f"'in_flight' must be one of {list(IN_FLIGHT)}, got {in_flight!r}.", "in_flight")
        try:
            done = await asyncio.to_thread(self.engine.load_weights, weights, version, in_flight=in_flight)
        except ValueError as err:  # WeightUpdateError, CheckpointError, a bad version
            raise ProtocolError(f"The weights were not loaded (nothing changed): {err}", code="invalid_weights") from None
        body = asdict(done)
        body["weight_version"] = body.pop("version")
        return web.json_response(body)


async def _json_options(request: web.Request) -> dict[str, Any]:
    try:
        options = json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ProtocolError(f"The body is not valid JSON ({err}).", code="invalid_json") from None
    if not isinstance(options, dict):
        raise ProtocolError("The body must be a JSON object with 'path'.")
    return options


async def _tensors_from_body(request: web.Request) -> dict[str, Any]:
    chunks, size = [], 0
    async for chunk in request.content.iter_chunked(2**20):
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ProtocolError(
                f"The body exceeds {MAX_BODY_BYTES} bytes; send large updates by 'path'.", status=413
            )
        chunks.append(chunk)
    try:
        return await asyncio.to_thread(load_safetensors, b"".join(chunks))
    except SafetensorError as err:
        raise ProtocolError(f"The body is not a safetensors file: {err}", code="invalid_weights") from None


def _version(value: Any) -> int | None:
    if value is None:
        return None
    try:
        version = int(value) if isinstance(value, str) else value
    except ValueError:
        version = value
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ProtocolError(f"'version' must be an integer >= 0, got {value!r}.", "version")
    return version
