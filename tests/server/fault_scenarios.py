"""Faults composer-lsp must survive, each a scenario that injects one into the real server
(`python -m server --ws`, driven over websockets as the web page drives it, against the scripted
model endpoint) and checks what is left: nothing already acknowledged is lost, and the turn that
met the fault ends with a clear error. tests/server/test_faults.py runs them small,
bench/faults.py at full size.

    report = await kill_server_mid_sessions(tmp_path, sessions=20)
    report.problems     # the checks that failed ([] when all held); report.checked: all of them
    report.recover_s    # from the fault to the service answering again
    report.facts        # numbers worth a table: baseline_s (the same work without the fault), ...

  kill_server_mid_sessions   kill -9 of the server while N sessions stream their second turn:
                             every log reads whole (at most a torn last line, which the reader
                             skips), the acknowledged first turns are intact byte for byte, and
                             each session loads (session/load) and goes on in a new server
  endpoint_dies_mid_stream   the model endpoint dies during a streamed answer (its process
                             killed, or it hangs up, or drops the connection), N times in one
                             session: each turn fails with a clear error, the log stays whole,
                             the session answers once the endpoint is back
  flood_of_malformed_calls   a model answering every step with K broken tool calls: the turn
                             ends at its step budget, the model is told each step, and what a
                             step adds to the conversation and the log is bounded whatever K is
  disk_full                  ENOSPC while a turn writes the checkpoint store, then the session
                             log: run_disk_full() runs it inside a small tmpfs (bwrap --size);
                             each turn fails with the error, no record or object is left half
                             written, earlier ones read back, the session goes on once there is
                             room again

By hand: `bwrap --dev-bind / / --size 4194304 --tmpfs DIR python tests/server/fault_scenarios.py DIR`
runs disk_full in DIR and prints its report as JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(REPO), str(HERE)]
from scripted_model import ScriptedModel  # noqa: E402

from agent.checkpoints import CheckpointStore  # noqa: E402
from agent.session_log import list_sessions  # noqa: E402

ALLOW = {"outcome": {"outcome": "selected", "optionId": "allow_once"}}
SLOW = {"text": " ".join(["word"] * 400), "delay": 0.05}
"""A reply that streams for 20 s: long enough to be cut off mid-answer."""


@dataclass
class Report:
    fault: str
    scale: str
    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    recover_s: float | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    def check(self, ok: Any, what: str, who: str = "") -> bool:
        """Records that `what` was checked (once, however many sessions or logs `who` it was
        checked for) and, when it failed, for whom."""
        if what not in self.checked:
            self.checked.append(what)
        if not ok:
            self.problems.append(f"{who}: {what}" if who else what)
        return bool(ok)


class RpcError(Exception):
    """An error reply: its message is the server's."""


# ---- the server and a client of it ---------------------------------------------------------------


class Server:
    """`composer-lsp --ws` over `root` on a free port; `url` is its websocket address."""

    def __init__(self, proc: asyncio.subprocess.Process, url: str) -> None:
        self.proc, self.url = proc, url

    @classmethod
    async def start(cls, root: Path, endpoint: str, logs: Path, stderr: Path | None = None) -> Server:
        with open(stderr or os.devnull, "ab") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "server", "--ws", "127.0.0.1:0", "--workspace", str(root), "--endpoint",
                endpoint, "--log-dir", str(logs), "--index", "off", cwd=REPO, stdout=subprocess.PIPE, stderr=err)
        line = (await asyncio.wait_for(proc.stdout.readline(), 300)).decode()
        found = re.search(r"http://([^/\s]+)/\?token=(\S+)", line)
        if found is None:
            proc.kill()
            raise RuntimeError(f"composer-lsp did not start: {line!r}")
        return cls(proc, f"ws://{found[1]}/rpc?token={found[2]}")

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status)[1]) / 1024

    async def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()


class Peer:
    """One websocket connection, answering as an editor: permission requests allowed once, other
    requests null; `session/update`s collected in `updates`."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws, self.next_id, self.updates = ws, 0, []
        self.arrived: list[float] = []
        """time.monotonic() at which each of `updates` arrived."""
        self.waiting: dict[int, asyncio.Future] = {}
        self.reader = asyncio.ensure_future(self._read())

    @classmethod
    async def connect(cls, http: aiohttp.ClientSession, url: str, root: Path) -> Peer:
        peer = cls(await http.ws_connect(url, max_msg_size=0))
        await peer.call("initialize", {"processId": None, "rootUri": root.as_uri(), "capabilities": {}})
        return peer

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    continue
                data = json.loads(message.data)
                method = data.get("method")
                if method == "session/update":
                    self.updates.append(data["params"]["update"])
                    self.arrived.append(time.monotonic())
                elif method is not None and "id" in data:
                    result = ALLOW if method == "session/request_permission" else None
                    await self.ws.send_json({"jsonrpc": "2.0", "id": data["id"], "result": result})
                elif data.get("id") in self.waiting:
                    self.waiting.pop(data["id"]).set_result(data)
        finally:
            for future in self.waiting.values():
                if not future.done():
                    future.set_exception(ConnectionError("the server closed the connection"))

    async def call(self, method: str, params: Any, timeout: float = 300) -> Any:
        self.next_id += 1
        future = self.waiting[self.next_id] = asyncio.get_running_loop().create_future()
        await self.ws.send_json({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        try:
            reply = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise TimeoutError(f"no answer to {method} in {timeout:g} s") from None
        if "error" in reply:
            raise RpcError(reply["error"]["message"])
        return reply["result"]

    async def prompt(self, session_id: str, text: str) -> dict[str, Any]:
        return await self.call("session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]})

    def text(self, kind: str = "agent_message_chunk", since: int = 0) -> str:
        return "".join(u["content"].get("text", "") for u in self.updates[since:] if u["sessionUpdate"] == kind)

    async def close(self) -> None:
        await self.ws.close()
        await self.reader


async def _plain_turn(peer: Peer, session_id: str, answer: str, report: Report, what: str) -> None:
    """A turn after the fault, which must end as usual with `answer`; its time is the baseline
    (the same session's work without a fault)."""
    mark, started = len(peer.updates), time.monotonic()
    result = await peer.prompt(session_id, "and now?")
    report.facts["baseline_s"] = time.monotonic() - started
    report.check(result["stopReason"] == "end_turn" and peer.text(since=mark) == answer, what)


async def _until(condition, timeout: float = 300) -> None:
    """Polls `condition`; the timeout bounds only a failure."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the condition did not hold in time")
        await asyncio.sleep(0.05)


# ---- what a log looks like after a fault ---------------------------------------------------------


def read_log(path: Path) -> tuple[list[dict[str, Any]], list[int], int]:
    """(the records, the numbers of lines that are not whole JSON objects, the number of lines)."""
    lines = path.read_bytes().split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the file ends with a newline: no torn tail
    records, bad = [], []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        (records.append(record) if isinstance(record, dict) else bad.append(number))
    return records, bad, len(lines)


def _only_log(workspace: Path, logs: Path) -> Path:
    """The log of the one session a scenario ran in `workspace`."""
    (info,) = list_sessions(workspace, logs)
    return info.path


def check_log(report: Report, path: Path, when: str, torn_allowed: set[int] = frozenset()) -> list[dict[str, Any]]:
    """Every line whole JSON but those in `torn_allowed`, seqs 0, 1, 2, ... with no gap."""
    records, bad, _ = read_log(path)
    report.check(set(bad) <= set(torn_allowed), f"{when}: every log line is a whole record", f"{path.name} lines {bad}")
    report.check([r.get("seq") for r in records] == list(range(len(records))),
                 f"{when}: log records numbered without a gap", path.name)
    return records


# ---- kill -9 of the server -----------------------------------------------------------------------


WRITE = {"name": "write_file", "arguments": {"path": "notes.txt", "content": "note\n"}}


async def _first_turn(peer: Peer, cwd: Path) -> str:
    session_id = (await peer.call("session/new", {"cwd": str(cwd)}))["sessionId"]
    result = await peer.prompt(session_id, "first")
    if result["stopReason"] != "end_turn":
        raise RuntimeError(f"the first turn ended with {result['stopReason']}")
    return session_id


async def _loaded_and_continued(peer: Peer, session_id: str, cwd: Path, report: Report) -> None:
    await peer.call("session/load", {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []})
    report.check(peer.text("user_message_chunk") == "firstsecond", "session/load replays both requests", session_id)
    report.check("Wrote it." in peer.text() and any(u["sessionUpdate"] == "tool_call" for u in peer.updates),
                 "and the acknowledged turn's answer and tool call", session_id)
    since = len(peer.updates)
    result = await peer.prompt(session_id, "third")
    report.check(result["stopReason"] == "end_turn" and peer.text(since=since) == "Back again.",
                 "each session goes on in the new server", session_id)


async def kill_server_mid_sessions(root: Path, sessions: int = 20) -> Report:
    report = Report("kill -9 of composer-lsp mid-turn", f"{sessions} websocket sessions")
    logs, cwds = root / "logs", [root / f"ws{i}" for i in range(sessions)]
    for cwd in cwds:
        cwd.mkdir(parents=True)
        (cwd / "hello.py").write_text("print('hello')\n")
    script = [[{"text": "Writing.", "tool_calls": [WRITE]}, {"text": "Wrote it."}], [SLOW], [{"text": "Back again."}]]
    with ScriptedModel(script) as model:
        started = time.monotonic()
        server = await Server.start(root, model.url, logs, root / "server-1.err")
        async with aiohttp.ClientSession() as http:
            peers = await asyncio.gather(*(Peer.connect(http, server.url, cwd) for cwd in cwds))
            ids = await asyncio.gather(*(_first_turn(p, cwd) for p, cwd in zip(peers, cwds)))
            report.facts["baseline_s"] = time.monotonic() - started  # a fresh server, every session answering
            paths = {sid: next(s.path for s in list_sessions(cwd, logs) if s.session_id == sid)
                     for sid, cwd in zip(ids, cwds)}
            acknowledged = {sid: path.read_bytes() for sid, path in paths.items()}
            marks = [len(p.updates) for p in peers]
            turns = [asyncio.ensure_future(p.prompt(sid, "second")) for p, sid in zip(peers, ids)]
            await _until(lambda: all("word" in p.text(since=m) for p, m in zip(peers, marks)))
            await server.kill()
            killed = time.monotonic()
            ended = await asyncio.gather(*turns, return_exceptions=True)
            report.check(all(isinstance(e, ConnectionError) for e in ended), "every running turn lost its connection")
            torn = {}
            for sid, path in paths.items():
                records, bad, lines = read_log(path)
                torn[sid] = set(bad)
                report.check(bad in ([], [lines]), "every log whole after the kill (at most a torn last line)", sid)
                report.check(path.read_bytes().startswith(acknowledged[sid]),
                             "the acknowledged first turns intact byte for byte", sid)
                report.check([r["type"] for r in records].count("user_message") == 2,
                             "the second requests, written before the kill, are there", sid)
            report.facts["torn_lines"] = sum(len(t) for t in torn.values())
            server = await Server.start(root, model.url, logs, root / "server-2.err")
            try:
                again = await asyncio.gather(*(Peer.connect(http, server.url, cwd) for cwd in cwds))
                await asyncio.gather(*(_loaded_and_continued(p, sid, cwd, report)
                                       for p, sid, cwd in zip(again, ids, cwds)))
                report.recover_s = time.monotonic() - killed
                await asyncio.gather(*(p.close() for p in again))
            finally:
                await server.kill()
    for sid, path in paths.items():
        check_log(report, path, "after the new server", torn[sid])
    return report


# ---- the model endpoint dies ---------------------------------------------------------------------


class EndpointProcess:
    """tests/server/scripted_model.py as a process of its own on a fixed port, so it can be
    killed and started again where the server expects it."""

    def __init__(self, script: list, folder: Path) -> None:
        self.script_file = folder / "endpoint-script.json"
        self.script_file.write_text(json.dumps(script))
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(HERE / "scripted_model.py"), "--script",
                                      str(self.script_file), "--port", str(self.port)], stdout=subprocess.PIPE)
        self.proc.stdout.readline()  # it prints its URL once it listens

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


async def endpoint_dies_mid_stream(root: Path, how: str = "kill", deaths: int = 1) -> Report:
    """`how`: "kill" (the endpoint's process, kill -9), "hangup" (it ends the response cleanly but
    unfinished) or "abort" (it drops the connection)."""
    report = Report(f"model endpoint dies mid-stream ({how})", f"{deaths} deaths in one session")
    workspace, logs = root / "ws", root / "logs"
    workspace.mkdir(parents=True)
    dying = SLOW if how == "kill" else {"text": "I will start", "fail": how}
    script = [[dying]] * deaths + [[{"text": "Back."}]]
    endpoint = EndpointProcess(script, root) if how == "kill" else None
    with contextlib.ExitStack() as stack:
        if endpoint is None:
            url = stack.enter_context(ScriptedModel(script)).url
        else:
            endpoint.start()
            stack.callback(endpoint.kill)
            url = endpoint.url
        server = await Server.start(workspace, url, logs, root / "server.err")
        try:
            async with aiohttp.ClientSession() as http:
                peer = await Peer.connect(http, server.url, workspace)
                session_id = (await peer.call("session/new", {"cwd": str(workspace)}))["sessionId"]
                errors, seconds = [], []
                for _ in range(deaths):
                    mark = len(peer.updates)
                    turn = asyncio.ensure_future(peer.prompt(session_id, "talk"))
                    await _until(lambda: peer.text(since=mark) or turn.done())  # noqa: B023 (awaited here)
                    if endpoint is not None:
                        endpoint.kill()
                    fault = time.monotonic()
                    with contextlib.suppress(RpcError):
                        await turn
                    seconds.append(time.monotonic() - fault)
                    errors.append(str(turn.exception() or f"no error: {turn.result()}"))
                    if endpoint is not None:
                        endpoint.start()
                report.check(all("the turn failed" in e and ("broke" in e or "mid-answer" in e) for e in errors),
                             "each cut-off turn ended with an error naming the broken stream")
                report.recover_s = max(seconds)
                report.facts["error"] = errors[0]
                await _plain_turn(peer, session_id, "Back.", report, "the session answers once the endpoint is back")
                await peer.close()
        finally:
            await server.kill()
    records = check_log(report, _only_log(workspace, logs), "after the faults")
    failures = [r for r in records if r["type"] == "error"]
    report.check(len(failures) == deaths and all("stream" in r["message"] for r in failures),
                 "the log records each failure")
    return report


# ---- a flood of malformed tool calls -------------------------------------------------------------


BROKEN = [{"name": "read_file", "raw_arguments": '{"path": '},   # not JSON
          {"name": "read_file", "raw_arguments": "[1, 2]"},      # not an object
          {"name": None, "raw_arguments": "{}"},                 # no name
          {"name": "no_such_tool", "arguments": {}},             # unknown tool
          {"name": "read_file", "arguments": {"nope": 1}}]       # off the schema
"""One of each kind of broken call; a flood cycles through them."""
MAX_STEPS, MAX_CALLS = 25, 64
"""The loop's step budget and the calls it runs from one reply (agent/loop.py LoopConfig)."""


def _letters(n: int) -> str:
    """`n` in base 26 with letters: step names that differ without digits (which the loop's
    repeat check masks)."""
    word = chr(ord("a") + n % 26)
    return word if n < 26 else _letters(n // 26 - 1) + word


async def flood_of_malformed_calls(root: Path, calls: int = 50) -> Report:
    report = Report("model floods malformed tool calls", f"{calls} broken calls a step")
    workspace, logs = root / "ws", root / "logs"
    workspace.mkdir(parents=True)
    # Each step's flood names another unknown tool first (among the calls that run), as a broken
    # model's garbage changes: the same flood again would be a loop the agent stops after three
    # steps (agent/repetition.py).
    floods = [{"text": "", "tool_calls": [{"name": f"no_such_tool_{_letters(step)}", "arguments": {}, "id": "odd"}]
               + [dict(BROKEN[i % len(BROKEN)], id=f"c{i}") for i in range(calls)]}
              for step in range(MAX_STEPS + 10)]
    flood = floods[0]
    with ScriptedModel([floods]) as model:
        server = await Server.start(workspace, model.url, logs, root / "server.err")
        try:
            async with aiohttp.ClientSession() as http:
                peer = await Peer.connect(http, server.url, workspace)
                session_id = (await peer.call("session/new", {"cwd": str(workspace)}))["sessionId"]
                rss = server.rss_mb()
                started = time.monotonic()
                result = await peer.prompt(session_id, "go")
                report.recover_s = time.monotonic() - started
                report.facts["rss_growth_mb"] = round(server.rss_mb() - rss, 1)
                report.check(result["stopReason"] == "max_turn_requests" and len(model.requests) == MAX_STEPS,
                             f"the turn ended at its step budget ({MAX_STEPS} model calls)")
                last = model.requests[-1]["messages"]
                notes = [m["content"] for m in last if m["role"] == "user" and m["content"].startswith("[harness]")]
                report.check(len(notes) == MAX_STEPS - 1 and all("could not be read" in n for n in notes),
                             "the model was told after every step")
                report.check(max(map(len, notes)) < 2500, "one bounded note a step, however many calls broke")
                results = sum(m["role"] == "tool" for m in last)
                report.check(results <= (MAX_STEPS - 1) * MAX_CALLS, f"at most {MAX_CALLS} calls ran a step")
                runnable = sum(1 for call in flood["tool_calls"] if "arguments" in call)
                report.check(runnable <= MAX_CALLS or all("were not run" in n for n in notes),
                             "the calls past that were counted to the model")
                report.facts["last_request_kb"] = round(len(json.dumps(model.requests[-1])) / 1024, 1)
                await _plain_turn(peer, session_id, "Done.", report, "the session answers the next prompt")
                await peer.close()
        finally:
            await server.kill()
    log = _only_log(workspace, logs)
    records = check_log(report, log, "after the flood")
    report.facts["log_kb"] = round(log.stat().st_size / 1024, 1)
    report.check(sum(r["type"] == "tool_call" for r in records) <= MAX_STEPS * MAX_CALLS,
                 "the log holds at most the calls that ran")
    return report


# ---- a full disk ---------------------------------------------------------------------------------


MAX_FILL_BYTES = 256 * 2**20
"""disk_full refuses to fill a filesystem larger than this."""


def fill(filler: Path, leave: int = 0) -> Path:
    """Appends to `filler` until its filesystem is full, then gives back `leave` bytes; returns it
    (unlink it for room)."""
    with open(filler, "ab", buffering=0) as f, contextlib.suppress(OSError):
        while f.write(b"\0" * 65536):
            pass
    os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


async def disk_full(root: Path) -> Report:
    """Must run where `root` is a small filesystem of its own (run_disk_full sees to it): it
    fills the filesystem."""
    if shutil.disk_usage(root).total > MAX_FILL_BYTES:
        raise ValueError(f"{root} is on a {shutil.disk_usage(root).total >> 20} MiB filesystem; disk_full fills "
                         f"its filesystem, so it runs only on a small filesystem of its own (run_disk_full)")
    report = Report("disk full (ENOSPC)", f"a {shutil.disk_usage(root).total / 2**20:g} MiB tmpfs")
    workspace, logs = root / "ws", root / "logs"
    workspace.mkdir()
    (workspace / "hello.py").write_text("print('hello')\n")
    script = [_write_turn("a", "a\n"), _write_turn("c", "c\n"), _write_turn("d", "d" * 300_000), _write_turn("e", "e\n")]
    with ScriptedModel(script) as model:
        server = await Server.start(workspace, model.url, logs)
        try:
            async with aiohttp.ClientSession() as http:
                peer = await Peer.connect(http, server.url, workspace)
                session_id = (await peer.call("session/new", {"cwd": str(workspace)}))["sessionId"]
                started = time.monotonic()
                await peer.prompt(session_id, "write a")
                report.facts["baseline_s"] = time.monotonic() - started  # a turn like the last, with room
                log = _only_log(workspace, logs)
                store = CheckpointStore(workspace)
                kept = [cp.id for cp in store.list()]
                # Room for the log's records but not for the checkpoint of a new 300 kB file.
                (workspace / "big.txt").write_bytes(os.urandom(150_000).hex().encode())
                filler = fill(root / "filler", leave=65536)
                error = await _failed_turn(peer, session_id, "write c")
                report.facts["checkpoint_error"] = error
                report.check("could not record a checkpoint" in error and "No space left" in error,
                             "a checkpoint that did not fit: the turn failed, saying so")
                report.check(not (workspace / "c.txt").exists(), "nothing ran without its checkpoint")
                report.check([cp.id for cp in store.list()] == kept
                             and set(store.diff(kept[-1]).added) == {"a.txt", "big.txt"},
                             "the checkpoints before it are intact and readable")
                leftovers = [p for p in (workspace / ".composer").rglob("*.tmp")]
                report.check(not leftovers, "no half-written object is left in the store")
                fill(filler, leave=8192)  # full again, but for a small record: not for a 300 kB one
                error = await _failed_turn(peer, session_id, "write d")
                report.facts["log_error"] = error
                report.check("session log" in error and "No space left" in error,
                             "a log record that did not fit: the turn failed, saying so")
                check_log(report, log, "on the full disk")
                filler.unlink()
                freed = time.monotonic()
                result = await peer.prompt(session_id, "write e")
                report.recover_s = time.monotonic() - freed
                report.check(result["stopReason"] == "end_turn" and (workspace / "e.txt").is_file(),
                             "with room again the session goes on")
                await peer.call("session/close", {"sessionId": session_id})
                mark = len(peer.updates)
                await peer.call("session/load", {"sessionId": session_id, "cwd": str(workspace), "mcpServers": []})
                report.check(peer.text("user_message_chunk", since=mark) == "write awrite cwrite dwrite e"
                             and peer.text(since=mark).endswith("Wrote e."), "the log loads again, every turn in it")
                await peer.close()
        finally:
            await server.kill()
    check_log(report, log, "at the end")
    return report


def _write_turn(name: str, text: str) -> list[dict[str, Any]]:
    call = {"name": "write_file", "arguments": {"path": f"{name}.txt", "content": text}}
    return [{"text": "", "tool_calls": [call]}, {"text": f"Wrote {name}."}]


async def _failed_turn(peer: Peer, session_id: str, text: str) -> str:
    try:
        result = await peer.prompt(session_id, text)
    except RpcError as err:
        return str(err)
    return f"no error: the turn ended with {result['stopReason']}"


def run_disk_full(size_bytes: int, folder: Path | None = None) -> Report:
    """disk_full inside a tmpfs of `size_bytes` made by bubblewrap (`--size`); a Report whose
    problem says so when no such filesystem can be made here."""
    bwrap = shutil.which("bwrap")
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        small = Path(tmp) / "small"
        small.mkdir()
        if bwrap is None:
            return Report("disk full (ENOSPC)", "-", problems=["no bwrap to make a small filesystem with"])
        done = subprocess.run([bwrap, "--dev-bind", "/", "/", "--size", str(size_bytes), "--tmpfs", str(small),
                               sys.executable, __file__, str(small)], capture_output=True, text=True, timeout=1800)
    last = done.stdout.strip().splitlines()[-1:] or [""]
    try:
        return Report(**json.loads(last[0]))
    except ValueError:
        return Report("disk full (ENOSPC)", "-", problems=[f"no report (exit {done.returncode}): {done.stderr[-2000:]}"])


if __name__ == "__main__":
    print(json.dumps(asdict(asyncio.run(disk_full(Path(sys.argv[1]))))))
