"""composer-lsp under bad input: malformed JSON-RPC, unknown methods, wrong params, 50 MB
messages, clients that vanish mid-turn, many websocket clients at once. The server answers with
errors, stays up, and loses no session log."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys

import aiohttp
import pytest
from scripted_model import ScriptedModel

from agent.session_log import list_sessions, read_session

pytestmark = pytest.mark.slow

SLOW = [[{"text": " ".join(["word"] * 400), "delay": 0.05}]]


class RawStdio:
    """Speaks LSP framing to a server process by hand, so it can also send garbage."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.next_id = 0

    async def send_bytes(self, body: bytes) -> None:
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        await self.proc.stdin.drain()

    async def send(self, method: str, params=None, *, request: bool = True) -> int | None:
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        if request:
            self.next_id += 1
            message["id"] = self.next_id
        await self.send_bytes(json.dumps(message).encode())
        return message.get("id")

    async def read(self) -> dict:
        length = 0
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                raise EOFError("server closed stdout")
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
            elif line in (b"\r\n", b"\n") and length:
                return json.loads(await self.proc.stdout.readexactly(length))

    async def reply_to(self, msg_id) -> dict:
        while True:
            message = await asyncio.wait_for(self.read(), 30)
            if message.get("id") == msg_id and "method" not in message:
                return message


async def _spawn(workspace, model, logs) -> RawStdio:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "server", "--stdio", "--workspace", str(workspace), "--endpoint", model.url,
        "--log-dir", str(logs), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        limit=2**27)
    raw = RawStdio(proc)
    init = await raw.send("initialize", {"processId": None, "rootUri": workspace.as_uri(), "capabilities": {}})
    assert "capabilities" in (await raw.reply_to(init))["result"]
    await raw.send("initialized", {}, request=False)
    return raw


async def test_garbage_unknown_methods_and_wrong_params_get_errors_and_the_server_stays_up(workspace, tmp_path):
    with ScriptedModel([]) as model:
        raw = await _spawn(workspace, model, tmp_path / "logs")
        await raw.send_bytes(b"{this is not json")
        error = await asyncio.wait_for(raw.read(), 10)
        assert error["id"] is None and error["error"]["code"] == -32700
        unknown = await raw.send("composer/nothingHere", {})
        assert (await raw.reply_to(unknown))["error"]["code"] == -32601
        for params in ({"cwd": 5}, [1, 2], "text", {"cwd": "relative/dir"}):
            bad = await raw.send("session/new", params)
            reply = await raw.reply_to(bad)
            assert reply["error"]["code"] == -32602 and "params" in reply["error"]["message"]
        good = await raw.send("session/new", {"cwd": str(workspace)})
        assert (await raw.reply_to(good))["result"]["sessionId"]
        raw.proc.kill()
        await raw.proc.wait()


async def test_fifty_megabyte_messages_are_handled_or_refused_cleanly(workspace, tmp_path):
    with ScriptedModel([]) as model:
        raw = await _spawn(workspace, model, tmp_path / "logs")
        big = "x = 1\n" * (50 * 1024 * 1024 // 6)
        await raw.send("textDocument/didOpen", {"textDocument": {
            "uri": (workspace / "big.py").as_uri(), "languageId": "python", "version": 1, "text": big}}, request=False)
        session = await raw.send("session/new", {"cwd": str(workspace)})
        session_id = (await raw.reply_to(session))["result"]["sessionId"]
        prompt = await raw.send("session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": big}]})
        reply = await raw.reply_to(prompt)
        assert reply["error"]["code"] == -32602 and "too long" in reply["error"]["message"]
        listed = await raw.send("session/list", {})
        assert "sessions" in (await raw.reply_to(listed))["result"]
        raw.proc.kill()
        await raw.proc.wait()


async def test_a_client_that_disconnects_mid_turn_loses_no_session_log(workspace, tmp_path):
    logs = tmp_path / "logs"
    with ScriptedModel(SLOW) as model:
        raw = await _spawn(workspace, model, logs)
        new = await raw.send("session/new", {"cwd": str(workspace)})
        session_id = (await raw.reply_to(new))["result"]["sessionId"]
        await raw.send("session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": "talk"}]})
        while (await asyncio.wait_for(raw.read(), 30)).get("method") != "session/update":
            pass
        raw.proc.stdin.close()  # the editor went away
        assert await asyncio.wait_for(raw.proc.wait(), 20) is not None
    (info,) = list_sessions(workspace, logs)
    records = read_session(info.path)  # every line is whole JSON
    assert info.session_id == session_id
    types_seen = [r["type"] for r in records]
    assert types_seen[0] == "session" and "user_message" in types_seen and types_seen[-1] in ("cancelled", "final_diff")


# ---- websockets ----------------------------------------------------------------------------------


@pytest.fixture
async def ws_server(workspace, tmp_path):
    model = ScriptedModel([[{"text": "Hello from the scripted model."}]]).__enter__()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "server", "--ws", "127.0.0.1:0", "--workspace", str(workspace),
        "--endpoint", model.url, "--log-dir", str(tmp_path / "logs"), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
    url = re.search(r"(http://\S+)", line).group(1)
    yield url
    proc.kill()
    await proc.wait()
    model.__exit__(None, None, None)


def _ws_url(url: str) -> str:
    return url.replace("http://", "ws://").replace("/?token=", "/rpc?token=")


class WsClient:
    def __init__(self, ws) -> None:
        self.ws, self.next_id, self.updates = ws, 0, []

    async def call(self, method: str, params) -> dict:
        self.next_id += 1
        await self.ws.send_str(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads((await asyncio.wait_for(self.ws.receive(), 60)).data)
            if message.get("method") == "session/update":
                self.updates.append(message["params"])
            elif "method" in message and "id" in message:  # a request from the server
                await self.ws.send_str(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": None}))
            elif message.get("id") == self.next_id:
                return message


async def test_websocket_needs_the_token_and_a_same_origin_browser(ws_server):
    base = ws_server.split("/?")[0]
    async with aiohttp.ClientSession() as http:
        assert (await http.get(base + "/")).status == 401
        assert (await http.get(ws_server)).status == 200
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await http.ws_connect(base.replace("http", "ws") + "/rpc?token=wrong")
        assert err.value.status == 401
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await http.ws_connect(_ws_url(ws_server), headers={"Origin": "http://evil.example"})
        assert err.value.status == 403
        async with http.ws_connect(_ws_url(ws_server), headers={"Origin": base}) as ws:
            client = WsClient(ws)
            await ws.send_str("{not json")
            error = json.loads((await ws.receive()).data)
            assert error["error"]["code"] == -32700
            reply = await client.call("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
            assert reply["result"]["serverInfo"]["name"] == "composer-lsp"


async def test_twenty_concurrent_websocket_clients_each_get_their_own_session(ws_server):
    async def one(http) -> tuple[str, str]:
        async with http.ws_connect(_ws_url(ws_server)) as ws:
            client = WsClient(ws)
            await client.call("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
            session_id = (await client.call("session/new", {}))["result"]["sessionId"]
            result = (await client.call("session/prompt", {"sessionId": session_id,
                                                           "prompt": [{"type": "text", "text": "hi"}]}))["result"]
            assert {u["sessionId"] for u in client.updates} == {session_id}
            text = "".join(u["update"]["content"]["text"] for u in client.updates
                           if u["update"]["sessionUpdate"] == "agent_message_chunk")
            return result["stopReason"], text

    async with aiohttp.ClientSession() as http:
        results = await asyncio.gather(*(one(http) for _ in range(20)))
    assert results == [("end_turn", "Hello from the scripted model.")] * 20


async def test_tcp_transport_serves_one_editor(workspace, tmp_path):
    import socket

    from lsp_client import ComposerTestClient, _register
    from lsprotocol import types

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with ScriptedModel([[{"text": "Over TCP."}]]) as model:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "server", "--tcp", f"127.0.0.1:{port}", "--workspace", str(workspace),
            "--endpoint", model.url, "--log-dir", str(tmp_path / "logs"), stderr=subprocess.DEVNULL)
        client = ComposerTestClient()
        _register(client)
        for _ in range(600):  # up to a minute for the server to listen (a busy machine)
            try:
                await client.start_tcp("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.1)
        await client.initialize_session(types.InitializeParams(capabilities=types.ClientCapabilities(),
                                                               root_uri=workspace.as_uri()))
        session_id = (await client.protocol.send_request_async("session/new", {}))["sessionId"]
        result = await client.protocol.send_request_async(
            "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": "hi"}]})
        assert result["stopReason"] == "end_turn" and client.text_of() == "Over TCP."
        await client.shutdown_session()
        await client.stop()
        proc.kill()
        await proc.wait()
