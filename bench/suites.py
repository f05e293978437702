"""Suite verification: what a perfect and a trivial policy score on every shipped suite, graded in
the sandbox as a run grades (training/eval/verify.py): the reference patch must resolve each task,
the untouched workspace must fail every FAIL_TO_PASS and pass every PASS_TO_PASS, and the
FAIL_TO_PASS tests must be absent from the workspace until test_patch puts them back.

    python bench/suites.py [--suite NAME ...] [--concurrency 2] [--limit N] [--no-write]

Prints a table per suite (tasks, perfect, trivial, hidden, seconds per task), compares each with
the manifest's `[scores]`, writes bench/results/suites.json (every failing task with its
problems; suites not run this time keep their recorded results) and the table in
docs/benchmarks.md. Exit 1 when a suite misses its stated scores.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.report import RESULTS, publish  # noqa: E402
from training.eval.suite import Suite, load_suite, suite_names  # noqa: E402
from training.eval.verify import Verdict, verify_task  # noqa: E402


async def verify_suite(suite: Suite, concurrency: int, limit: int | None) -> dict:
    tasks = suite.tasks()[:limit] if limit else suite.tasks()
    gate = asyncio.Semaphore(concurrency)
    done = 0
    started = time.perf_counter()

    async def one(task) -> Verdict:
        nonlocal done
        async with gate:
            with tempfile.TemporaryDirectory(prefix="composer-verify-") as tmp:
                verdict = await verify_task(task, Path(tmp))
        done += 1
        if not verdict.ok or done % 25 == 0:
            print(f"  {suite.name}: {done}/{len(tasks)} {verdict.instance_id} "
                  f"{'ok' if verdict.ok else verdict.problems}", flush=True)
        return verdict

    verdicts = await asyncio.gather(*(one(t) for t in tasks))
    n = len(verdicts)
    levels = Counter(t.metadata.get("level") for t in tasks if "level" in t.metadata)
    return {
        "suite": suite.name, "tasks": n,
        "perfect": round(sum(v.perfect_ok for v in verdicts) / n, 4),
        "trivial": round(sum(v.trivial_resolved for v in verdicts) / n, 4),
        "starting_state_ok": sum(v.trivial_ok for v in verdicts),
        "hidden_ok": sum(v.hidden_ok for v in verdicts),
        "stated": {"perfect": suite.perfect, "trivial": suite.trivial},
        "levels": {str(k): v for k, v in sorted(levels.items())},
        "seconds_per_task": round(sum(v.seconds for v in verdicts) / n, 2),
        "concurrency": concurrency,
        "wall_s": round(time.perf_counter() - started, 1),
        "failures": [{"instance_id": v.instance_id, "problems": v.problems} for v in verdicts if not v.ok],
    }


def merged(results: list[dict]) -> list[dict]:
    """These results with the recorded ones of suites not run this time (in suite order)."""
    path = RESULTS / "suites.json"
    recorded = json.loads(path.read_text())["suites"] if path.is_file() else []
    by_name = {r["suite"]: r for r in recorded} | {r["suite"]: r for r in results}
    return [by_name[name] for name in suite_names() if name in by_name]


def table(results: list[dict]) -> str:
    rows = ["| suite | tasks | perfect (reference patch) | trivial (untouched) | starting state fails F2P, passes P2P | F2P hidden | s per task (tasks at once) |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        rows.append(f"| {r['suite']} | {r['tasks']} | {r['perfect']:.3f} (stated {r['stated']['perfect']}) | "
                    f"{r['trivial']:.3f} (stated {r['stated']['trivial']}) | {r['starting_state_ok']}/{r['tasks']} | "
                    f"{r['hidden_ok']}/{r['tasks']} | {r['seconds_per_task']} ({r.get('concurrency', '?')}) |")
    return "\n".join(rows) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", action="append", help="a suite name or manifest (default: every shipped suite)")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--limit", type=int, help="the first N tasks of each suite (a quick look; not written)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    names = args.suite or suite_names()
    results = []
    for name in names:
        suite = load_suite(name)
        print(f"{suite.name}: verifying {len(suite.tasks())} tasks", flush=True)
        results.append(asyncio.run(verify_suite(suite, args.concurrency, args.limit)))
    meta = (f"Every task of each suite built, graded untouched and with its reference patch, in the sandbox "
            f"(bubblewrap) on {platform.machine()} ({os.cpu_count()} CPUs, shared), "
            f"{datetime.date.today().isoformat()}. Resolved rates; F2P = FAIL_TO_PASS, P2P = PASS_TO_PASS.")
    results = merged(results) if not args.no_write and args.limit is None else results
    publish("suites", "Benchmark suites: perfect and trivial scores", {"suites": results, "meta": meta},
            table(results), meta, write=not args.no_write and args.limit is None)
    missed = [r["suite"] for r in results if r["perfect"] != r["stated"]["perfect"] or r["trivial"] != r["stated"]["trivial"]]
    if missed:
        print(f"missed their stated scores: {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
