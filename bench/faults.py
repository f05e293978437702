"""Fault benchmark: the faults composer-lsp must survive, at full size, against the real server
(`python -m server --ws`) and the scripted model endpoint. The scenarios and their checks are
tests/server/fault_scenarios.py (tests/server/test_faults.py runs them small):

    python bench/faults.py [--quick] [--no-write]

  kill -9         of the server while 20 websocket sessions stream their second turn
  endpoint        the model endpoint dies mid-stream 10 times in one session, three ways: its
                  process killed, a clean hang-up (no finish_reason, no [DONE]), a dropped connection
  flood           the model answers each of the turn's 25 steps with 1,000 broken tool calls
  disk full       ENOSPC on a 64 MiB tmpfs (bubblewrap --size) while a turn writes the checkpoint
                  store, then the session log
  stop            the person stops a turn whose step queued 8 minute-long commands beside a read
                  and a write (tests/server/stop_scenario.py): the command killed, every card ended
Each row: what was checked, the result (pass, or the checks that failed), the time to recover
and, from the same run, the same work without the fault. Prints the table, writes
bench/results/faults.json and its block in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import re
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "server")]
import fault_scenarios as faults  # noqa: E402
from stop_scenario import stop_mid_step  # noqa: E402

from bench.report import publish  # noqa: E402

RECOVERY = {
    "kill": "kill to every session loaded (session/load) and answering in a new server",
    "endpoint": "fault to the turn's error reply, worst of the deaths",
    "flood": "the flooded turn, start to its end at the step budget",
    "disk": "room again to the next turn done",
    "stop": "session/cancel to the prompt's answer, cancelled",
}
BASELINE = {
    "kill": "a fresh server to every session open and answering its first turn",
    "endpoint": "an ordinary turn",
    "flood": "an ordinary one-step turn",
    "disk": "the same kind of turn with room",
    "stop": "an ordinary turn in the same session",
}


async def scenarios(args: argparse.Namespace, tmp: Path) -> list[tuple[str, faults.Report]]:
    """(kind, report) for each fault, run one after another, each in a folder of its own; one
    that raises is a failed row, with the end of its servers' stderr."""
    sessions, deaths, calls, disk, stops = (5, 2, 200, 16, 2) if args.quick else (20, 10, 1000, 64, 8)
    plan = [("kill", f"{sessions} websocket sessions", lambda d: faults.kill_server_mid_sessions(d, sessions))]
    plan += [("endpoint", f"{how}, {deaths} deaths", lambda d, how=how: faults.endpoint_dies_mid_stream(d, how, deaths))
             for how in ("kill", "hangup", "abort")]
    plan += [("flood", f"{calls} broken calls a step", lambda d: faults.flood_of_malformed_calls(d, calls)),
             ("disk", f"a {disk} MiB tmpfs", lambda d: asyncio.to_thread(faults.run_disk_full, disk * 2**20, d)),
             ("stop", f"{stops} commands", lambda d: stop_mid_step(d, stops))]
    runs: list[tuple[str, faults.Report]] = []
    for i, (kind, scale, run) in enumerate(plan):
        folder = tmp / str(i)
        folder.mkdir()
        try:
            runs.append((kind, await run(folder)))
        except Exception as err:
            stderr = "".join(p.read_text()[-1500:] for p in folder.glob("*.err"))
            runs.append((kind, faults.Report(kind, scale, problems=[f"raised {type(err).__name__}: {err}; {stderr}"])))
    return runs


def _time(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _said(message: str) -> str:
    """An error as the client saw it, temporary paths shortened."""
    return re.sub(r"/tmp/\S*?/(ws|logs)/", r".../\1/", message)


def table(runs: list[tuple[str, faults.Report]]) -> str:
    out = ["| fault | scale | what was checked | result | time to recover | same work without the fault |",
           "| --- | --- | --- | --- | --- | --- |"]
    for kind, r in runs:
        result = "pass" if not r.problems else "FAIL: " + "; ".join(r.problems[:5])
        recover = f"{_time(r.recover_s)} ({RECOVERY[kind]})" if r.recover_s is not None else "-"
        base = r.facts.get("baseline_s")
        baseline = f"{_time(base)} ({BASELINE[kind]})" if base is not None else "-"
        out.append(f"| {r.fault} | {r.scale} | {'; '.join(r.checked)} | {result} | {recover} | {baseline} |")
    notes = []
    for kind, r in runs:
        if kind == "flood" and "log_kb" in r.facts:
            notes.append(f"The flood: {_time(r.recover_s / faults.MAX_STEPS)} a step (64 calls run, the rest "
                         f"refused, each step's reply parsed whole); the turn's last request "
                         f"{r.facts['last_request_kb']:,.0f} KB, its log {r.facts['log_kb']:,.0f} KB, the "
                         f"server's resident memory +{r.facts['rss_growth_mb']} MB.")
        if kind == "stop" and r.facts.get("first_output_s") is not None:
            notes.append(f"The stop: the running command's first line reached its card "
                         f"{_time(r.facts['first_output_s'])} after the command started (agent/live_output.py).")
        if kind == "kill" and "torn_lines" in r.facts:
            notes.append(f"kill -9: {r.facts['torn_lines']} torn last line(s) across the logs (read back by skipping them).")
        for key in ("error", "checkpoint_error", "log_error"):
            if key in r.facts:
                notes.append(f"{r.fault}: the client is told `{_said(r.facts[key])}`.")
    return "\n".join(out) + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="5 sessions, 2 deaths, 200 calls, a 16 MiB disk, 2 commands")
    ap.add_argument("--no-write", action="store_true", help="print only; leave results and docs alone")
    args = ap.parse_args(argv)
    load, started = os.getloadavg()[0], time.monotonic()
    with tempfile.TemporaryDirectory(prefix="composer-bench-faults-") as tmp:
        runs = asyncio.run(scenarios(args, Path(tmp)))
    meta = (f"composer-lsp --ws with the scripted model endpoint, {platform.machine()}, {os.cpu_count()} CPUs, "
            f"Python {platform.python_version()}, load average {load:.1f} at the start (a shared machine: the "
            f"times swing with it; the checks do not); {time.monotonic() - started:.0f} s in all; "
            f"{datetime.date.today()}.")
    results = {"meta": meta, "runs": [dict(kind=kind, **asdict(r)) for kind, r in runs]}
    publish("faults", "Faults", results, table(runs), meta, write=not args.no_write)
    return 1 if any(r.problems for _, r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
