"""Language-server benchmark: composer-lsp's own overhead, measured against the real server process
(`python -m server --stdio`, and `--ws`) with a scripted model endpoint that answers at once, each
number beside a baseline from the same run.

    python bench/server.py [--quick] [--prompts 30] [--changes 300] [--no-ws] [--no-write]

Workloads (a small client of its own speaks JSON-RPC to the server as an editor does: work-done
progress and applyEdit capabilities, permission requests allowed once):
  first update  `session/prompt` to the first `session/update` (the model's text), p50/p90; the
                baseline is the same HTTP request (the body the agent sent) straight to the
                scripted endpoint with model/client.py, to its first delta
  tool turn     a whole turn with one read_file call (two model calls) against those two
                requests sent straight to the endpoint
  didChange     N incremental one-character edits to an open 10,000-line file (and to a
                1,000-line one), and N/10 whole-document replacements, sent back to back, then one
                request that round-trips; on two servers, one with no session and one with a
                session (which mirrors each open document into its Workspace), bursts alternating;
                the baseline is N trivial requests sent the same way
  process       spawn to the initialize answer and VmRSS after it, beside a bare pygls server;
                session/new, and VmRSS and open files after 1 and after 20 idle sessions
  websocket     (--ws) the first update over a websocket, and 20 clients at once each doing
                initialize + session/new + one prompt
Prints the tables, writes bench/results/server.json and the tables in docs/benchmarks.md (between
the server markers; other sections are kept).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "server"))
from scripted_model import ScriptedModel  # noqa: E402

from bench.report import publish  # noqa: E402
from model.client import OpenAICompatibleClient  # noqa: E402

INDEX_OFF = ("--index", "off")
"""The servers measured build no semantic index: its background build (bench/retrieval.py
measures it) would share the two cores with what is timed here."""

CAPABILITIES = {"workspace": {"applyEdit": True, "workspaceEdit": {"documentChanges": True}},
                "window": {"workDoneProgress": True},
                "textDocument": {"synchronization": {"dynamicRegistration": False, "didSave": True}}}
# What the client answers to the server's requests (anything else: null).
ANSWERS = {"session/request_permission": {"outcome": {"outcome": "selected", "optionId": "allow_once"}},
           "workspace/applyEdit": {"applied": True}}
READ = {"text": "Reading it.", "tool_calls": [{"name": "read_file", "arguments": {"path": "hello.py"}}]}
SIZES = (1_000, 10_000, 50_000, 100_000)  # lines, for pygls' apply in process
TRIVIAL = "textDocument/codeAction"  # no diagnostics: the server answers [] without work


def ms(seconds: float) -> float:
    return seconds * 1000


def pct(samples: list[float], q: float) -> float:
    """The q-quantile (0..1) of samples, in ms."""
    ordered = sorted(samples)
    return ms(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Rpc:
    """A minimal JSON-RPC 2.0 client of composer-lsp, over the server's stdio pipes (LSP framing)
    or a websocket (one message per text frame). It answers the server's requests as an editor
    would, and notes when the first `session/update` of each prompt arrives."""

    def __init__(self) -> None:
        self._next, self.updates, self.pending = 0, 0, {}
        self.first_update: float | None = None
        self.first_kind: str | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self.ws, self.reader = None, None

    @classmethod
    async def stdio(cls, root: Path, url: str, logs: Path, argv: list[str] | None = None) -> Rpc:
        """composer-lsp --stdio (or `argv`), initialized; `started_s` is spawn to initialize's answer."""
        rpc = cls()
        argv = argv or ["-m", "server", "--stdio", "--workspace", str(root), "--endpoint", url, "--log-dir", str(logs),
                        *INDEX_OFF]
        started = time.perf_counter()
        with open(logs / "server-stderr.log", "ab") as err:
            rpc.proc = await asyncio.create_subprocess_exec(
                sys.executable, *argv, cwd=ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err)
        rpc.reader = asyncio.ensure_future(rpc._guarded(rpc._read_stdio()))
        await rpc.initialize(root)
        rpc.started_s = time.perf_counter() - started
        return rpc

    @classmethod
    async def websocket(cls, http: Any, url: str, root: Path) -> Rpc:
        rpc = cls()
        rpc.ws = await http.ws_connect(url, max_msg_size=0)
        rpc.reader = asyncio.ensure_future(rpc._guarded(rpc._read_ws()))
        await rpc.initialize(root)
        return rpc

    async def _guarded(self, reading: Any) -> None:
        try:
            await reading
        except (asyncio.IncompleteReadError, ConnectionError) as err:
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(RuntimeError(f"the server closed the connection: {err}"))

    async def _read_stdio(self) -> None:
        out = self.proc.stdout
        while True:
            header = await out.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in header.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            await self._handle(json.loads(await out.readexactly(length)))

    async def _read_ws(self) -> None:
        async for message in self.ws:
            await self._handle(json.loads(message.data))
        raise ConnectionError("websocket closed")

    async def _handle(self, msg: dict[str, Any]) -> None:
        method = msg.get("method")
        if method is None:
            fut = self.pending.pop(msg.get("id"), None)
            if fut is not None and not fut.done():
                if "error" in msg:
                    fut.set_exception(RuntimeError(f"error reply: {msg['error']}"))
                else:
                    fut.set_result(msg.get("result"))
        elif "id" in msg:
            await self._send({"jsonrpc": "2.0", "id": msg["id"], "result": ANSWERS.get(method)})
        elif method == "session/update":
            if self.first_update is None:
                self.first_update = time.perf_counter()
                self.first_kind = msg["params"]["update"].get("sessionUpdate")
            self.updates += 1

    async def _send(self, msg: dict[str, Any]) -> None:
        data = json.dumps(msg)
        if self.ws is not None:
            await self.ws.send_str(data)
            return
        body = data.encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        await self.proc.stdin.drain()

    async def send_request(self, method: str, params: Any = None) -> asyncio.Future:
        self._next += 1
        fut = asyncio.get_running_loop().create_future()
        self.pending[self._next] = fut
        await self._send({"jsonrpc": "2.0", "id": self._next, "method": method, "params": params})
        return fut

    async def request(self, method: str, params: Any = None, timeout: float = 60) -> Any:
        return await asyncio.wait_for(await self.send_request(method, params), timeout)

    async def notify(self, method: str, params: Any = None) -> None:
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def initialize(self, root: Path) -> None:
        await self.request("initialize", {"processId": None, "rootUri": root.as_uri(), "capabilities": CAPABILITIES})
        await self.notify("initialized", {})

    async def new_session(self, root: Path) -> str:
        return (await self.request("session/new", {"cwd": str(root), "mcpServers": []}))["sessionId"]

    async def prompt(self, session_id: str, text: str) -> tuple[float, float, dict]:
        """(seconds to the first session/update, seconds to the answer, the answer)."""
        self.first_update = None
        started = time.perf_counter()
        result = await self.request("session/prompt", {"sessionId": session_id,
                                                       "prompt": [{"type": "text", "text": text}]})
        done = time.perf_counter()
        if self.first_update is None:
            raise RuntimeError(f"a turn sent no session/update (answer: {result})")
        return self.first_update - started, done - started, result

    async def close(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(Exception):
                await self.request("shutdown", None, timeout=15)
                await self.notify("exit", None)
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self.ws is not None:
            await self.ws.close()
        if self.reader is not None:
            self.reader.cancel()


# ---- the arms ------------------------------------------------------------------------------------


async def direct(client: OpenAICompatibleClient, body: dict[str, Any]) -> tuple[float, float]:
    """The agent's request `body` sent straight to the endpoint: (seconds to the first text delta,
    seconds to the end of the stream)."""
    started, first = time.perf_counter(), None
    async for delta in client.stream_chat(body["messages"], tools=body.get("tools"), max_tokens=body.get("max_tokens"),
                                          temperature=body.get("temperature"), logprobs=True,
                                          extra={"return_token_ids": True}):
        if first is None and delta.content:
            first = time.perf_counter()
    end = time.perf_counter()
    return (first or end) - started, end - started


async def bench_prompts(rpc: Rpc, model: ScriptedModel, root: Path, n: int) -> dict:
    """First update and tool turns on one stdio server, each run beside its direct baseline."""
    client = OpenAICompatibleClient(model.url)
    model.script = []  # every turn: "Done."
    session = await rpc.new_session(root)
    first, direct_first, kinds = [], [], set()
    for run in range(n + 1):
        t_first, _, _ = await rpc.prompt(session, f"say done ({run})")
        t_direct, _ = await direct(client, model.requests[-1])
        kinds.add(rpc.first_kind)
        if run:  # run 0 warms imports, the HTTP connection, the model name look-up
            first.append(t_first)
            direct_first.append(t_direct)
    model.script = [[READ, {"text": "Done."}]] * (n + 2)
    session = await rpc.new_session(root)
    turns, direct_turns, updates = [], [], 0
    for run in range(n // 2 + 1):
        rpc.updates = 0
        _, t_turn, answer = await rpc.prompt(session, f"read hello.py ({run})")
        assert answer["_meta"]["composer"]["toolCalls"] == 1, answer
        bodies = model.requests[-2:]
        t_direct = sum([(await direct(client, body))[1] for body in bodies])
        if run:
            turns.append(t_turn)
            direct_turns.append(t_direct)
            updates = rpc.updates
    await client.close()
    res = {"prompts": n, "first_update_kinds": sorted(kinds),
           "first_update_p50_ms": pct(first, 0.5), "first_update_p90_ms": pct(first, 0.9),
           "direct_first_delta_p50_ms": pct(direct_first, 0.5), "direct_first_delta_p90_ms": pct(direct_first, 0.9),
           "tool_turns": len(turns), "tool_turn_updates": updates,
           "tool_turn_p50_ms": pct(turns, 0.5), "tool_turn_p90_ms": pct(turns, 0.9),
           "direct_two_calls_p50_ms": pct(direct_turns, 0.5)}
    res["first_update_ratio"] = res["first_update_p50_ms"] / res["direct_first_delta_p50_ms"]
    res["tool_turn_ratio"] = res["tool_turn_p50_ms"] / res["direct_two_calls_p50_ms"]
    print(f"first update p50 {res['first_update_p50_ms']:.1f} ms p90 {res['first_update_p90_ms']:.1f} ms "
          f"({'/'.join(res['first_update_kinds'])}); straight to the endpoint p50 {res['direct_first_delta_p50_ms']:.1f} ms"
          f"\nread_file turn p50 {res['tool_turn_p50_ms']:.1f} ms ({updates} updates); its two model calls straight "
          f"{res['direct_two_calls_p50_ms']:.1f} ms", flush=True)
    return res


def python_file(lines: int) -> str:
    return "".join(f"def f{i}(x):\n" if i % 5 == 0 else f"    x = x + {i}  # line {i}\n" if i % 5 < 4
                   else "    return x\n" for i in range(lines))


async def _burst(rpc: Rpc, messages: list[tuple[str, Any]]) -> float:
    """Sends the notifications (method, params) back to back, then one request, and returns
    seconds until its answer: every message before it has been handled by then."""
    started = time.perf_counter()
    for method, params in messages:
        await rpc.notify(method, params)
    await rpc.request(TRIVIAL, _code_action_params(messages[0][1]["textDocument"]["uri"]))
    return time.perf_counter() - started


def _code_action_params(uri: str) -> dict:
    zero = {"line": 0, "character": 0}
    return {"textDocument": {"uri": uri}, "range": {"start": zero, "end": zero}, "context": {"diagnostics": []}}


async def _trivial(rpc: Rpc, uri: str, n: int) -> float:
    """n trivial requests sent back to back, then all their answers awaited."""
    started = time.perf_counter()
    futures = [await rpc.send_request(TRIVIAL, _code_action_params(uri)) for _ in range(n)]
    await asyncio.wait_for(asyncio.gather(*futures), 120)
    return time.perf_counter() - started


class _Doc:
    def __init__(self, rpc: Rpc, path: Path, text: str) -> None:
        self.rpc, self.uri, self.text, self.version = rpc, path.as_uri(), text, 1

    async def open(self) -> None:
        await self.rpc.notify("textDocument/didOpen", {"textDocument": {
            "uri": self.uri, "languageId": "python", "version": 1, "text": self.text}})

    def change(self, change: dict) -> tuple[str, dict]:
        self.version += 1
        return "textDocument/didChange", {"textDocument": {"uri": self.uri, "version": self.version},
                                          "contentChanges": [change]}

    def keystrokes(self, n: int, line: int) -> list[tuple[str, dict]]:
        """n one-character insertions typed at `line`, as an editor sends them."""
        spots = ({"line": line, "character": 4 + k} for k in range(n))
        return [self.change({"range": {"start": at, "end": at}, "text": "x"}) for at in spots]

    def replacements(self, n: int) -> list[tuple[str, dict]]:
        return [self.change({"text": self.text + f"# edit {k}\n"}) for k in range(n)]


SYNC_ARMS = ("no_session", "one_session")


async def _sync_round(rpc: Rpc, docs: dict[str, _Doc], n: int, replacements: int) -> dict[str, float]:
    return {"trivial": await _trivial(rpc, docs["10k"].uri, n) / n,
            "keys_10k": await _burst(rpc, docs["10k"].keystrokes(n, 5_001)) / n,
            "keys_1k": await _burst(rpc, docs["1k"].keystrokes(n, 501)) / n,
            "replace_10k": await _burst(rpc, docs["10k"].replacements(replacements)) / replacements}


async def bench_sync(root: Path, url: str, logs: Path, n: int, rounds: int) -> dict:
    """didChange on two fresh servers with the same documents open, one without a session and one
    with a session (which mirrors every open document into its Workspace), bursts alternating."""
    big, small = root / "big.py", root / "small.py"
    big.write_text(python_file(10_000))
    small.write_text(python_file(1_000))
    servers = dict(zip(SYNC_ARMS, await asyncio.gather(*(Rpc.stdio(root, url, logs) for _ in SYNC_ARMS))))
    res: dict[str, Any] = {"changes": n, "rounds": rounds, "replacements": max(5, n // 10), "file_lines": 10_000,
                           "file_bytes": big.stat().st_size}
    samples: dict[str, list[dict[str, float]]] = {arm: [] for arm in SYNC_ARMS}
    try:
        docs = {arm: {"10k": _Doc(rpc, big, big.read_text()), "1k": _Doc(rpc, small, small.read_text())}
                for arm, rpc in servers.items()}
        for arm, rpc in servers.items():
            for doc in docs[arm].values():
                await doc.open()
            if arm == "one_session":
                await rpc.new_session(root)
            await _trivial(rpc, docs[arm]["10k"].uri, 50)  # warm-up
        for _ in range(rounds):
            for arm, rpc in servers.items():
                samples[arm].append(await _sync_round(rpc, docs[arm], n, res["replacements"]))
        res["rss_with_documents_mb"] = rss_mb(servers["one_session"].proc.pid)
    finally:
        await asyncio.gather(*(rpc.close() for rpc in servers.values()))
    for arm in SYNC_ARMS:
        row = {f"{key}_ms": statistics.median(ms(r[key]) for r in samples[arm]) for key in samples[arm][0]}
        row["keys_10k_per_s"], row["replace_10k_per_s"] = 1000 / row["keys_10k_ms"], 1000 / row["replace_10k_ms"]
        res[arm] = row
        print(f"didChange ({arm.replace('_', ' ')}): keystroke on 10k lines {row['keys_10k_ms']:.2f} ms "
              f"({row['keys_10k_per_s']:.0f}/s), on 1k lines {row['keys_1k_ms']:.2f} ms, whole 10k document "
              f"{row['replace_10k_ms']:.2f} ms; trivial request {row['trivial_ms']:.2f} ms", flush=True)
    res["in_process"] = in_process_sync(root, big)
    return res


def in_process_sync(root: Path, path: Path, n: int = 40) -> dict:
    """Where a keystroke's time goes, in this process: pygls applying the incremental change to its
    document (by file size), and the server's mirror of the result into a Workspace."""
    from lsprotocol import types
    from pygls.workspace import TextDocument

    from agent.workspace import Workspace

    res = {}
    for lines in SIZES:
        doc = TextDocument(path.as_uri(), python_file(lines), version=1)
        started = time.perf_counter()
        for k in range(n):
            at = types.Position(line=lines // 2 + 1, character=4 + k)
            doc.apply_change(types.TextDocumentContentChangePartial(range=types.Range(at, at), text="x"))
        res[f"pygls_apply_{lines}_ms"] = ms(time.perf_counter() - started) / n
    workspace = Workspace(root)
    started = time.perf_counter()
    for k in range(n):  # what server/lsp.py's _mirror does for each change, on the largest document
        workspace.relative(str(path))
        workspace.set_buffer(str(path), doc.source, k)
    res["mirror_ms"] = ms(time.perf_counter() - started) / n
    return res


BARE = ["-c", "from pygls.lsp.server import LanguageServer; LanguageServer('bare', '0').start_io()"]


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def bench_memory(root: Path, url: str, logs: Path, sessions: int, starts: int) -> dict:
    """Start-up and VmRSS of composer-lsp, beside a bare pygls server; then idle sessions."""
    times: dict[str, list[float]] = {"bare": [], "composer": []}
    rss: dict[str, float] = {}
    for run in range(starts):
        for arm in times:  # composer last: the final one stays up for the sessions
            rpc = await Rpc.stdio(root, url, logs, BARE if arm == "bare" else None)
            times[arm].append(rpc.started_s)
            await asyncio.sleep(0.3)
            rss[arm] = rss_mb(rpc.proc.pid)
            if arm == "bare" or run < starts - 1:
                await rpc.close()
    res = {"start_p50_ms": pct(times["composer"], 0.5), "bare_start_p50_ms": pct(times["bare"], 0.5),
           "after_initialize_mb": rss["composer"], "bare_after_initialize_mb": rss["bare"]}
    try:
        pid = rpc.proc.pid
        fds_before = fds(pid)
        await rpc.new_session(root)
        res["after_1_session_mb"], fds_one = rss_mb(pid), fds(pid)
        news = []
        for _ in range(sessions - 1):
            started = time.perf_counter()
            await rpc.new_session(root)
            news.append(time.perf_counter() - started)
        res["after_n_sessions_mb"], fds_n = rss_mb(pid), fds(pid)
    finally:
        await rpc.close()
    res["sessions"], res["session_new_p50_ms"] = sessions, pct(news, 0.5)
    res["per_session_mb"] = (res["after_n_sessions_mb"] - res["after_1_session_mb"]) / (sessions - 1)
    res["fds_after_initialize"], res["fds_after_1_session"], res["fds_after_n_sessions"] = fds_before, fds_one, fds_n
    res["fds_per_session"] = (fds_n - fds_one) / (sessions - 1)
    print(f"start-up p50 {res['start_p50_ms']:.0f} ms (bare pygls {res['bare_start_p50_ms']:.0f} ms); RSS "
          f"{res['after_initialize_mb']:.1f} MB after initialize (bare pygls {res['bare_after_initialize_mb']:.1f}), "
          f"{res['after_1_session_mb']:.1f} MB with 1 session, {res['after_n_sessions_mb']:.1f} MB with {sessions} -> "
          f"{res['per_session_mb']:.2f} MB and {res['fds_per_session']:.1f} open files a session; session/new p50 "
          f"{res['session_new_p50_ms']:.1f} ms", flush=True)
    return res


async def _ws_server(root: Path, url: str, logs: Path) -> tuple[asyncio.subprocess.Process, str]:
    with open(logs / "ws-stderr.log", "ab") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "server", "--ws", "127.0.0.1:0", "--workspace", str(root), "--endpoint", url,
            "--log-dir", str(logs), *INDEX_OFF, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=err)
    line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    if "Composer is ready: " not in line:
        proc.kill()
        raise RuntimeError(f"composer-lsp --ws did not start: {line!r}")
    page = line.split("Composer is ready: ", 1)[1].strip()  # http://127.0.0.1:PORT/?token=T
    host, token = page.split("//", 1)[1].split("/?token=")
    return proc, f"ws://{host}/rpc?token={token}"


async def _ws_client(http: Any, ws_url: str, root: Path) -> float:
    """One websocket client's life: connect, initialize, session/new, one prompt; seconds."""
    started = time.perf_counter()
    rpc = await Rpc.websocket(http, ws_url, root)
    try:
        await rpc.prompt(await rpc.new_session(root), "say done")
    finally:
        await rpc.close()
    return time.perf_counter() - started


async def bench_ws(root: Path, model: ScriptedModel, logs: Path, n: int, clients: int) -> dict:
    import aiohttp

    model.script = []
    proc, ws_url = await _ws_server(root, model.url, logs)
    try:
        async with aiohttp.ClientSession() as http:
            rpc = await Rpc.websocket(http, ws_url, root)
            session = await rpc.new_session(root)
            first = [(await rpc.prompt(session, f"say done ({run})"))[0] for run in range(n + 1)][1:]
            await rpc.close()
            alone = [await _ws_client(http, ws_url, root) for _ in range(5)]
            started = time.perf_counter()
            lives = await asyncio.gather(*(_ws_client(http, ws_url, root) for _ in range(clients)),
                                         return_exceptions=True)
            wall = time.perf_counter() - started
    finally:
        proc.terminate()  # SIGTERM's default action: the server has no handler for it
        await proc.wait()
    ok = [t for t in lives if isinstance(t, float)]
    errors = sorted({f"{type(e).__name__}: {e}" for e in lives if not isinstance(e, float)})
    res = {"prompts": n, "first_update_p50_ms": pct(first, 0.5), "first_update_p90_ms": pct(first, 0.9),
           "clients": clients, "succeeded": len(ok), "errors": errors, "wall_ms": ms(wall),
           "client_p50_ms": pct(ok, 0.5) if ok else None, "client_max_ms": ms(max(ok)) if ok else None,
           "one_client_alone_ms": pct(alone, 0.5)}
    print(f"websocket: first update p50 {res['first_update_p50_ms']:.1f} ms p90 {res['first_update_p90_ms']:.1f} ms; "
          f"{clients} clients at once (connect, initialize, session/new, prompt): {len(ok)} succeeded in "
          f"{res['wall_ms']:.0f} ms (one client alone {res['one_client_alone_ms']:.0f} ms)"
          f"{'; ' + errors[0] if errors else ''}", flush=True)
    return res


# ---- output -------------------------------------------------------------------------------------


def tables(res: dict) -> str:
    p, s, m = res["prompt"], res["sync"], res["memory"]
    out = ["| session methods (stdio) | composer-lsp | baseline | ratio |", "| --- | --- | --- | --- |",
           f"| `session/prompt` to the first `session/update`, p50 ({p['prompts']} prompts) vs the same request "
           f"straight to the endpoint, to its first delta | {p['first_update_p50_ms']:.1f} ms | "
           f"{p['direct_first_delta_p50_ms']:.1f} ms | {p['first_update_ratio']:.1f}x |",
           f"| the same, p90 | {p['first_update_p90_ms']:.1f} ms | {p['direct_first_delta_p90_ms']:.1f} ms | "
           f"{p['first_update_p90_ms'] / p['direct_first_delta_p90_ms']:.1f}x |",
           f"| a turn with one `read_file` call (2 model calls, {p['tool_turn_updates']} updates), p50 vs its two "
           f"requests straight to the endpoint | {p['tool_turn_p50_ms']:.1f} ms | {p['direct_two_calls_p50_ms']:.1f} ms | "
           f"{p['tool_turn_ratio']:.1f}x |"]
    if w := res.get("ws"):
        out.append(f"| websocket: first `session/update`, p50 / p90 vs stdio p50 | {w['first_update_p50_ms']:.1f} / "
                   f"{w['first_update_p90_ms']:.1f} ms | {p['first_update_p50_ms']:.1f} ms | "
                   f"{w['first_update_p50_ms'] / p['first_update_p50_ms']:.1f}x |")
        out.append(f"| websocket: {w['clients']} clients at once, each connect + initialize + session/new + a prompt "
                   f"({w['succeeded']}/{w['clients']} succeeded), all done vs one such client alone | {w['wall_ms']:.0f} ms | "
                   f"{w['one_client_alone_ms']:.0f} ms | {w['wall_ms'] / w['one_client_alone_ms']:.1f}x |")
    out += ["", f"| `didChange`, {s['changes']} sent back to back, then one request (median of {s['rounds']}) | "
            "no session: ms each | "
            "per second | with a session: ms each | per second | vs a trivial request |", "| --- | --- | --- | --- | --- | --- |"]
    a, b = s["no_session"], s["one_session"]
    for key, label in (("keys_10k", f"one-character edit, {s['file_lines']:,}-line file ({s['file_bytes'] // 1000} kB)"),
                       ("keys_1k", "one-character edit, 1,000-line file"),
                       ("replace_10k", f"whole-document replacement, {s['file_lines']:,} lines ({s['replacements']} sent)"),
                       ("trivial", f"baseline: `{TRIVIAL}` request, no diagnostics")):
        out.append(f"| {label} | {a[key + '_ms']:.2f} | {1000 / a[key + '_ms']:,.0f} | {b[key + '_ms']:.2f} | "
                   f"{1000 / b[key + '_ms']:,.0f} | {b[key + '_ms'] / b['trivial_ms']:.1f}x |")
    ip = s["in_process"]
    applies = " / ".join(f"{ip['pygls_apply_' + str(n) + '_ms']:.2f}" for n in SIZES)
    out += ["", f"In process, pygls' incremental apply of one keystroke costs {applies} ms on a "
            f"{' / '.join(f'{n:,}' for n in SIZES)}-line file; the server's mirror of the document into a session's "
            f"Workspace (server/lsp.py `_mirror`) {ip['mirror_ms']:.3f} ms, at {SIZES[-1]:,} lines.",
            "", "| process | composer-lsp | bare pygls server | ratio |", "| --- | --- | --- | --- |",
            f"| start-up: spawn to the `initialize` answer, p50 | {m['start_p50_ms']:.0f} ms | {m['bare_start_p50_ms']:.0f} ms | "
            f"{m['start_p50_ms'] / m['bare_start_p50_ms']:.1f}x |",
            f"| VmRSS after initialize | {m['after_initialize_mb']:.1f} MB | {m['bare_after_initialize_mb']:.1f} MB | "
            f"{m['after_initialize_mb'] / m['bare_after_initialize_mb']:.1f}x |",
            f"| `session/new` on a warm server, p50 | {m['session_new_p50_ms']:.1f} ms | - | - |",
            f"| VmRSS after 1 `session/new` / after {m['sessions']} | {m['after_1_session_mb']:.1f} / "
            f"{m['after_n_sessions_mb']:.1f} MB | - | - |",
            f"| each further idle session: memory, open files | {m['per_session_mb']:.2f} MB, {m['fds_per_session']:.1f} "
            "| - | - |"]
    return "\n".join(out) + "\n"


async def run(args: argparse.Namespace) -> dict:
    n = 8 if args.quick else args.prompts
    changes = 100 if args.quick else args.changes
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="composer-bench-") as tmp, ScriptedModel([]) as model:
        root, logs = Path(tmp) / "ws", Path(tmp) / "logs"
        root.mkdir()
        logs.mkdir()
        (root / "hello.py").write_text("def hello():\n    print('hello')\n")
        res: dict[str, Any] = {}
        rpc = await Rpc.stdio(root, model.url, logs)
        try:
            res["prompt"] = await bench_prompts(rpc, model, root, n)
        finally:
            await rpc.close()
        res["sync"] = await bench_sync(root, model.url, logs, changes, 1 if args.quick else 3)
        res["memory"] = await bench_memory(root, model.url, logs, 20, 1 if args.quick else 3)
        if not args.no_ws:
            res["ws"] = await bench_ws(root, model, logs, min(n, 10), args.clients)
    res["meta"] = (f"composer-lsp (pygls {importlib.metadata.version('pygls')}) with a "
                   f"scripted model endpoint that answers at once, Python {platform.python_version()}, "
                   f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load:.1f} at the start (a shared "
                   f"machine: compare ratios, not times); {datetime.date.today()}.")
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=30, help="timed prompts (after one warm-up)")
    ap.add_argument("--changes", type=int, default=300, help="didChange notifications a burst (3 bursts an arm)")
    ap.add_argument("--clients", type=int, default=20, help="concurrent websocket clients")
    ap.add_argument("--no-ws", action="store_true", help="skip the websocket front end")
    ap.add_argument("--quick", action="store_true", help="8 prompts, 100 changes: a smoke run")
    ap.add_argument("--no-write", action="store_true", help="print only; leave results and docs alone")
    args = ap.parse_args(argv)
    res = asyncio.run(run(args))
    text = tables(res)
    publish("server", "Language server", res, text, res["meta"], write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
