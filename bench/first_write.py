"""The first write of a session in a workspace that has no checkpoint yet, on the session path the
product runs (agent/session.py; the model is the scripted OpenAI-compatible endpoint of
tests/server/scripted_model.py, thinking THINK seconds before its first call, as a served model
does), with the workspace recorded in the background as the session opens
(SessionConfig.warm_checkpoints) and without, alternating, in the same run:

    python bench/first_write.py DIR... [--think 2] [--reps 2] [--no-write]

The DIRs are copied into a fresh temporary workspace for every session. A session opens, then its
one turn asks for one edit_file call and an answer. Per arm: the session's opening, the turn, and
the turn less the model's think time (the harness's own time, where the first checkpoint waits).
Writes bench/results/first_write.json and its block in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "server")]
from scripted_model import ScriptedModel  # noqa: E402

from agent.session import Session, SessionConfig  # noqa: E402
from bench.machine import load_average, machine_line, run_line  # noqa: E402
from bench.report import publish  # noqa: E402

NOTE = "NOTES.md"


def script(think: float) -> list[list[dict]]:
    words = 4  # the scripted endpoint sleeps before each streamed word
    edit = {"name": "edit_file", "arguments": {"path": NOTE, "old_string": "draft", "new_string": "final"}}
    return [[{"text": "Editing the notes now.", "delay": think / words, "tool_calls": [edit]}, {"text": "Done."}]]


async def one_session(sources: list[str], endpoint: str, warm: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        for src in sources:
            shutil.copytree(src, ws / Path(src).name, symlinks=True)
        (ws / NOTE).write_text("draft\n")
        config = SessionConfig(workspace=ws, endpoint=endpoint, index="off", repo_map_tokens=0,
                               log_dir=Path(tmp) / "logs", auto_allow=True, warm_checkpoints=warm)
        t0 = time.perf_counter()
        session = await Session.create(config)
        t1 = time.perf_counter()
        result = await session.prompt("mark the notes final")
        t2 = time.perf_counter()
        await session.aclose()
        assert result.tool_calls == 1 and (ws / NOTE).read_text() == "final\n"
        return {"open": t1 - t0, "turn": t2 - t1}


async def measure(sources: list[str], think: float, reps: int) -> dict[str, dict[str, list[float]]]:
    runs: dict[str, dict[str, list[float]]] = {"cold": {"open": [], "turn": []}, "warm": {"open": [], "turn": []}}
    with ScriptedModel(script(think)) as model:
        for _ in range(reps):
            for arm in ("cold", "warm"):
                for key, value in (await one_session(sources, model.url, arm == "warm")).items():
                    runs[arm][key].append(value)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+")
    parser.add_argument("--think", type=float, default=2.0, help="seconds the model thinks before its first call")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    results = {"machine": machine_line(), "load_start": load_average(), "think": args.think, "sources": args.sources}
    runs = asyncio.run(measure(args.sources, args.think, args.reps))
    results.update(runs=runs, load_end=load_average())
    med = {arm: {k: statistics.median(v) for k, v in r.items()} for arm, r in runs.items()}
    rows = [f"| {label} | {med[arm]['open']:.2f} | {med[arm]['turn']:.2f} | {med[arm]['turn'] - args.think:.2f} |"
            for arm, label in (("cold", "first checkpoint at the first write (before)"),
                               ("warm", "workspace recorded as the session opens"))]
    text = "\n".join([
        "| first session in a workspace | session opens (s) | turn: think, edit, answer (s) | turn less the model's think time (s) |",
        "| --- | --- | --- | --- |", *rows, "",
        f"The harness's own time in the turn: {(med['cold']['turn'] - args.think) / (med['warm']['turn'] - args.think):.1f}x less.", ""])
    meta = (f"`python bench/first_write.py {' '.join(args.sources)} --think {args.think} --reps {args.reps}`; "
            f"medians of {args.reps} sessions an arm, alternating; {run_line(results)}")
    publish("first_write", "First write in a new workspace", results, text, meta, write=not args.no_write)


if __name__ == "__main__":
    main()
