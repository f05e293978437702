"""composer-lsp's websocket front end and web chat (aiohttp): JSON-RPC over websockets, one
ComposerServer per connection (pygls' own websocket server holds one client per process), and
the chat page at `/`.

    composer-lsp --ws 127.0.0.1:8765     # prints http://127.0.0.1:8765/?token=...

- `GET /?token=T` serves the page and sets a same-site cookie with the token; `/static/*` needs it.
- `GET /` or `/rpc` with `Upgrade: websocket` is a JSON-RPC connection: one message per text
  frame, no Content-Length headers (as pygls' --ws). The token comes as `?token=`, the cookie, or
  `Authorization: Bearer T`; a browser's Origin must be this server's own.
- Each connection has its own sessions, buffers and permissions; they share the model engine.
  A connection that drops mid-turn stops its turn; its session log is closed, not lost.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web
from pygls.exceptions import JsonRpcException

from server.hub import ServerSettings
from server.lsp import ComposerServer

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
COOKIE = "composer_token"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest websocket message read (a 50 MB didChange fits); larger ones close the connection
with code 1009, the server stays up."""


class _Writer:
    """pygls' writer interface over an aiohttp websocket: messages leave in order, from one task."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.task = asyncio.ensure_future(self._send())

    def write(self, data: bytes) -> None:
        self.queue.put_nowait(data)

    def close(self) -> None:
        self.queue.put_nowait(None)

    async def _send(self) -> None:
        while (data := await self.queue.get()) is not None:
            if self.ws.closed:
                continue
            try:
                await self.ws.send_str(data.decode("utf-8"))
            except (ConnectionError, RuntimeError) as err:
                log.info("websocket send failed: %s", err)


class WebFrontEnd:
    def __init__(self, settings: ServerSettings, *, token: str | None = None,
                 allowed_origins: tuple[str, ...] = ()) -> None:
        self.settings = settings
        self.token = token or secrets.token_urlsafe(24)
        self.allowed_origins = set(allowed_origins)
        self.connections: set[ComposerServer] = set()

    # ---- checks ---------------------------------------------------------------------------------

    def _token_ok(self, request: web.Request) -> bool:
        given = request.query.get("token") or request.cookies.get(COOKIE) or ""
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            given = given or auth[len("Bearer "):]
        return secrets.compare_digest(given.encode(), self.token.encode())

    def _origin_ok(self, request: web.Request) -> bool:
        origin = request.headers.get("Origin")
        if origin is None:
            return True  # not a browser (editors, scripts): the token is the check
        own = {f"{request.scheme}://{request.host}"}
        return origin in own | self.allowed_origins

    # ---- routes ---------------------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self.rpc(request)
        if not self._token_ok(request):
            raise web.HTTPUnauthorized(text="composer-lsp: open the URL with the token it printed at start\n")
        response = web.FileResponse(STATIC / "index.html")
        response.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict")
        return response

    async def static(self, request: web.Request) -> web.StreamResponse:
        if not self._token_ok(request):
            raise web.HTTPUnauthorized(text="missing or wrong token\n")
        name = request.match_info["name"]
        path = (STATIC / name).resolve()
        if STATIC.resolve() not in path.parents or not path.is_file():
            raise web.HTTPNotFound()
        return web.FileResponse(path)

    async def rpc(self, request: web.Request) -> web.StreamResponse:
        if not self._token_ok(request):
            raise web.HTTPUnauthorized(text="missing or wrong token\n")
        if not self._origin_ok(request):
            raise web.HTTPForbidden(text=f"origin {request.headers.get('Origin')} is not allowed\n")
        ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE_BYTES, heartbeat=30)
        await ws.prepare(request)
        server = ComposerServer(replace(self.settings), client="web")
        writer = _Writer(ws)
        server.protocol.set_writer(writer, include_headers=False)
        self.connections.add(server)
        try:
            async for message in ws:
                if message.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    self._handle(server, message.data)
                elif message.type == WSMsgType.ERROR:
                    log.info("websocket error: %s", ws.exception())
        finally:
            self.connections.discard(server)
            await server.hub.close()
            writer.close()
            await writer.task
        return ws

    @staticmethod
    def _handle(server: ComposerServer, data: str | bytes) -> None:
        try:
            message = json.loads(data, object_hook=server.protocol.structure_message)
            if not hasattr(message, "jsonrpc"):
                raise JsonRpcException("invalid request: not a JSON-RPC 2.0 message object", code=-32600)
            server.protocol.handle_message(message)
        except Exception as err:  # a bad message gets an error reply; the connection goes on
            server.report_server_error(err, type(err))

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_MESSAGE_BYTES)
        app.router.add_get("/", self.index)
        app.router.add_get("/rpc", self.rpc)
        app.router.add_get("/static/{name}", self.static)
        return app


async def serve(front: WebFrontEnd, host: str, port: int, *, ready: Any = print) -> None:
    """Serves until cancelled; calls `ready(url)` once listening (port 0 picks a free one)."""
    runner = web.AppRunner(front.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    actual = site._server.sockets[0].getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    ready(f"http://{shown}:{actual}/?token={front.token}")
    try:
        await asyncio.Event().wait()
    finally:
        for server in list(front.connections):
            await server.hub.close()
        await runner.cleanup()
