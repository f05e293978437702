"""A scripted OpenAI-compatible chat endpoint: the test double for the model in end-to-end tests of
the server (the agent reaches it through its real EndpointPolicy and HTTP client).

    with ScriptedModel([[{"text": "Editing.", "tool_calls": [{"name": "edit_file", "arguments": {...}}]},
                         {"text": "Done."}]]) as model:
        ... composer-lsp --endpoint model.url ...

The script is a list of turns (one per user prompt of a session), each a list of replies (one per
model step of that turn): `text` streams word by word (`delay` seconds apart), then `tool_calls`
(a call's `raw_arguments` is sent as it is, valid JSON or not). A reply with `fail` breaks off
after its text, as a dying server does: "hangup" ends the response cleanly but unfinished (no
finish_reason, no [DONE]), "abort" drops the connection. Past the script's end the model says
"Done.". Choosing by the conversation keeps the endpoint stateless, so many sessions can share
it. Run standalone (for the web page by hand, the bench):

    python tests/server/scripted_model.py --script script.json --port 8001
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import threading
from typing import Any

from aiohttp import web

DONE = {"text": "Done."}


def _reply(script: list[list[dict]], messages: list[dict[str, Any]]) -> dict[str, Any]:
    users = [i for i, m in enumerate(messages)
             if m.get("role") == "user" and not str(m.get("content", "")).startswith("[harness]")]
    turn = len(users) - 1
    step = sum(1 for m in messages[users[-1]:] if m.get("role") == "assistant") if users else 0
    if 0 <= turn < len(script) and step < len(script[turn]):
        return script[turn][step]
    return DONE


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "scripted", "object": "chat.completion.chunk", "model": "scripted",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


class ScriptedModel:
    def __init__(self, script: list[list[dict[str, Any]]], port: int = 0) -> None:
        self.script, self.port = script, port
        self.requests: list[dict[str, Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        reply = _reply(self.script, body.get("messages", []))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        with contextlib.suppress(ConnectionResetError):  # the client went away mid-answer
            await self._stream(request, response, reply)
        return response

    async def _stream(self, request: web.Request, response: web.StreamResponse, reply: dict[str, Any]) -> None:
        words = reply.get("text", "").split(" ")
        for i, word in enumerate(words):
            if reply.get("delay"):
                await asyncio.sleep(reply["delay"])
            await response.write(_chunk({"content": word + (" " if i < len(words) - 1 else "")}))
        if reply.get("fail") == "abort":
            request.transport.abort()
            return
        if reply.get("fail") == "hangup":
            return
        calls = reply.get("tool_calls", [])
        for index, call in enumerate(calls):
            arguments = call["raw_arguments"] if "raw_arguments" in call else json.dumps(call.get("arguments", {}))
            await response.write(_chunk({"tool_calls": [{
                "index": index, "id": call.get("id", f"call_{index}"), "type": "function",
                "function": {"name": call.get("name"), "arguments": arguments}}]}))
        await response.write(_chunk({}, "tool_calls" if calls else "stop"))
        await response.write(b"data: [DONE]\n\n")

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    async def _embeddings(self, request: web.Request) -> web.Response:
        """Deterministic bag-of-words vectors (agent.retrieval's HashingEmbedder), so search
        through the endpoint backend can be tested without a neural model."""
        from agent.retrieval.embedder import HashingEmbedder

        texts = (await request.json())["input"]
        vectors = HashingEmbedder().embed(list(texts))
        return web.json_response({"object": "list", "model": "scripted", "data": [
            {"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]})

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/embeddings", self._embeddings)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self._stop = asyncio.Event()
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def __enter__(self) -> ScriptedModel:
        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._serve())

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", required=True, help="JSON file: a list of turns of replies")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    with open(args.script) as f, ScriptedModel(json.load(f), args.port) as model:
        print(model.url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
