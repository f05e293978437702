"""Undoing one change of a turn against undoing the whole turn, on the session path the product
runs (agent/session.py, the model the scripted OpenAI-compatible endpoint of
tests/server/scripted_model.py): `Session.turn_changes` (composer/turnChanges) and
`Session.review_hunks` undoing one hunk (composer/reviewHunks), beside `Session.restore` of the
turn's checkpoint (composer/rewind, "Undo last turn", what a person had before), in one run:

    python bench/turn_review.py DIR... [--reps 2] [--no-write]

The DIRs are copied into a fresh temporary workspace for every session. Its one turn edits two
far-apart lines of one file and one line of another; the person then keeps the first edit and
undoes the second (or, the other arm, rewinds all three). Writes bench/results/turn_review.json
and its block in docs/benchmarks.md.
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
from agent.turn_review import Pick  # noqa: E402
from bench.machine import load_average, machine_line, run_line  # noqa: E402
from bench.report import publish  # noqa: E402

CONFIG = "".join(f"value_{i} = {i}\n" for i in range(40))


def _edit(path: str, i: int) -> dict:
    return {"name": "edit_file", "arguments": {"path": path, "old_string": f"value_{i} = {i}\n",
                                               "new_string": f"value_{i} = {i * 100}\n"}}


SCRIPT = [[{"text": "", "tool_calls": [_edit("config.py", 3), _edit("config.py", 33), _edit("other.py", 5)]},
           {"text": "Done."}]]


async def one_session(sources: list[str], endpoint: str, arm: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        for src in sources:
            shutil.copytree(src, ws / Path(src).name, symlinks=True)
        (ws / "config.py").write_text(CONFIG)
        (ws / "other.py").write_text(CONFIG)
        config = SessionConfig(workspace=ws, endpoint=endpoint, index="off", repo_map_tokens=0,
                               log_dir=Path(tmp) / "logs", auto_allow=True)
        session = await Session.create(config)
        await session.prompt("scale the values")
        t0 = time.perf_counter()
        if arm == "rewind":
            await session.restore(session.agent.turn_checkpoint)
            times = {"undo": time.perf_counter() - t0}
            assert (ws / "config.py").read_text() == CONFIG == (ws / "other.py").read_text()
        else:
            _, files = await session.turn_changes()
            t1 = time.perf_counter()
            [config_py] = [f for f in files if f.path == "config.py"]
            second = config_py.hunks[1]
            result, _ = await session.review_hunks([Pick("config.py", 1, second.digest)], [])
            times = {"list": t1 - t0, "undo": time.perf_counter() - t1}
            assert not result.refused and (ws / "config.py").read_text() == CONFIG.replace("value_3 = 3\n", "value_3 = 300\n")
        await session.aclose()
        return times


async def measure(sources: list[str], reps: int) -> dict[str, dict[str, list[float]]]:
    runs: dict[str, dict[str, list[float]]] = {"rewind": {"undo": []}, "hunk": {"list": [], "undo": []}}
    with ScriptedModel(SCRIPT * (2 * reps)) as model:
        for _ in range(reps):
            for arm in ("rewind", "hunk"):
                for key, value in (await one_session(sources, model.url, arm)).items():
                    runs[arm][key].append(value)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    results = {"machine": machine_line(), "load_start": load_average(), "sources": args.sources}
    runs = asyncio.run(measure(args.sources, args.reps))
    results.update(runs=runs, load_end=load_average())
    med = {arm: {k: statistics.median(v) for k, v in r.items()} for arm, r in runs.items()}
    hunk = med["hunk"]["list"] + med["hunk"]["undo"]
    text = "\n".join([
        "| after a turn of three edits in two files | list the changes (s) | undo (s) | in all (s) | what is undone |",
        "| --- | --- | --- | --- | --- |",
        f"| Undo last turn (`composer/rewind`) | | {med['rewind']['undo']:.3f} | {med['rewind']['undo']:.3f} | all three edits |",
        f"| Review changes, undo one hunk (`composer/turnChanges`, `composer/reviewHunks`) | {med['hunk']['list']:.3f} "
        f"| {med['hunk']['undo']:.3f} | {hunk:.3f} | that edit alone |", "",
        f"Undoing one hunk takes {hunk / med['rewind']['undo']:.2f}x the time of undoing the whole turn.", ""])
    meta = (f"`python bench/turn_review.py {' '.join(args.sources)} --reps {args.reps}`; medians of {args.reps} "
            f"sessions an arm, alternating; {run_line(results)}")
    publish("turn_review", "Keep or undo one change of a turn", results, text, meta, write=not args.no_write)


if __name__ == "__main__":
    main()
