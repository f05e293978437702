"""The person stops a turn mid-step (the page's Escape, an editor's stop button: `session/cancel`)
while its calls run side by side, through the real server (`python -m server --ws`, driven over
websockets as the web page drives it, against the scripted model endpoint). tests/server/
test_faults.py runs it small, bench/faults.py at full size, beside the faults of
tests/server/fault_scenarios.py.

    report = await stop_mid_step(tmp_path, commands=4)
    report.problems     # the checks that failed ([] when all held)
    report.recover_s    # from session/cancel to the prompt's answer (stopReason cancelled)

The step: `commands` terminal commands that would sleep a minute (run one at a time, as commands
are), a read, and a write queued behind the commands. Checked: the turn answers `cancelled`; the
running command's process is gone; every tool call card the client was shown ends (completed or
failed, none left running); the model is told of each call; the log holds a `cancelled` record for
each call the stop cut short and reads whole; the session answers its next prompt. And, in
passing, how soon the running command's first line reached its card (`first_output_s`).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path

import aiohttp
from fault_scenarios import Peer, Report, Server, _only_log, _plain_turn, _until, check_log
from scripted_model import ScriptedModel

from agent.session_log import read_session


def _processes_running(marker: str) -> int:
    """Processes whose command line holds `marker`."""
    found = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found += marker.encode() in f.read()
        except OSError:
            continue
    return found


def _final_statuses(updates: list[dict]) -> dict[str, str]:
    """The last status each tool call card was shown, by call id."""
    shown: dict[str, str] = {}
    for update in updates:
        if update["sessionUpdate"] in ("tool_call", "tool_call_update") and "status" in update:
            shown[update["toolCallId"]] = update["status"]
    return shown


def _card_text(updates: list[dict]) -> str:
    """The texts tool call cards were shown in `updates`."""
    return "".join(c.get("content", {}).get("text", "") for u in updates
                   if u["sessionUpdate"] == "tool_call_update" for c in u.get("content") or [])


def _first_output_s(peer: Peer) -> float | None:
    """From the running command's start (its in_progress update) to its first output in the card
    (agent/live_output.py), as the client saw them."""
    first = next((u["toolCallId"] for u in peer.updates if u["sessionUpdate"] == "tool_call"
                  and "started 0;" in str(u.get("rawInput"))), None)
    started = shown = None
    for update, at in zip(peer.updates, peer.arrived):
        if update.get("toolCallId") != first or update.get("status") != "in_progress":
            continue
        if started is None:
            started = at  # the call starts: no output yet
        elif "started 0" in _card_text([update]):
            shown = at
            break
    return None if started is None or shown is None else shown - started


async def stop_mid_step(root: Path, commands: int = 4) -> Report:
    report = Report("the person stops a turn mid-step", f"{commands} commands queued beside a read and a write")
    workspace, logs = root / "ws", root / "logs"
    workspace.mkdir(parents=True)
    (workspace / "hello.py").write_text("print('hello')\n")
    marker = f"60.{uuid.uuid4().int % 10**6:06d}"  # `sleep 60.NNNNNN`: this scenario's processes only
    step = [{"name": "run_terminal", "arguments": {"command": f"echo started {i}; sleep {marker}"}} for i in range(commands)]
    step += [{"name": "read_file", "arguments": {"path": "hello.py"}},
             {"name": "write_file", "arguments": {"path": "notes.txt", "content": "note\n"}}]
    with ScriptedModel([[{"text": "", "tool_calls": step}, {"text": "never asked"}], [{"text": "Done."}]]) as model:
        server = await Server.start(workspace, model.url, logs, root / "server.err")
        try:
            async with aiohttp.ClientSession() as http:
                peer = await Peer.connect(http, server.url, workspace)
                session_id = (await peer.call("session/new", {"cwd": str(workspace)}))["sessionId"]
                turn = asyncio.ensure_future(peer.prompt(session_id, "go"))
                # the person sees the command's first line, then stops it while it sleeps
                await _until(lambda: "started 0" in _card_text(peer.updates) and _processes_running(marker) > 0)
                started = time.monotonic()
                await peer.ws.send_json({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}})
                result = await turn
                report.recover_s = time.monotonic() - started
                report.check(result["stopReason"] == "cancelled", "the turn answered cancelled")
                report.facts["first_output_s"] = _first_output_s(peer)
                report.check(report.facts["first_output_s"] is not None, "the running command's output reached its card")
                await _until(lambda: _processes_running(marker) == 0, timeout=10)
                report.check(True, "the running command's processes are gone")
                shown = _final_statuses(peer.updates)
                report.check(len(shown) == len(step) and set(shown.values()) <= {"completed", "failed"},
                             "every tool call card ended (none left running)", str(shown))
                report.facts["cards"] = sorted(shown.values()).count("failed")
                await _plain_turn(peer, session_id, "Done.", report, "the session answers the next prompt")
                told = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"]
                report.check(len(told) == len(step), "the model is told of each call", f"{len(told)} results")
                await peer.close()
        finally:
            await server.kill()
    log = _only_log(workspace, logs)
    check_log(report, log, "after the stop")
    stopped = [r for r in read_session(log) if r["type"] == "tool_call" and r.get("status") == "cancelled"]
    report.check(len(stopped) == commands + 1, "a cancelled record for each call the stop cut short",
                 f"{len(stopped)} records")
    return report
