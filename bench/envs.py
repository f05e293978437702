"""Environment benchmark: how fast training.envs makes, uses and tears down task environments,
each number beside a baseline from the same run.

    python bench/envs.py [--runs 15] [--copy-runs 5] [--envs 200] [--concurrency 16] [--repo DIR] [--quick] [--no-write]

Workloads (the base is a copy of --repo, by default the transformers package from this venv's
site-packages, ~5.8k files, ~130 MB: a real Python tree):
  start       Environment.create on the base, p50/p95 over --runs, against the copy level (its
              first --copy-runs runs interleaved); and create + run("true") + close against
              run_sandboxed("true") on a plain directory (the sandbox alone, no environment)
  throughput  --envs environments created, `echo` run in each, torn down, --concurrency at once:
              environments per second; baseline: the same number of run_sandboxed("echo") on
              one plain directory at the same concurrency
  scheduler   --envs/4 jobs (setup -> run a command -> grade one test command) through a local
              Scheduler with cpus = this machine's CPUs and 0.25 CPU per job: jobs per second
  overlay vs copy  the same base as an overlay and as `cp -a --reflink=auto` (filesystem="copy"):
              create, diff after a one-file edit, close, and the disk each environment takes
Prints the tables, writes bench/results/envs.json and the tables in docs/benchmarks.md (between
the envs markers; other sections are kept).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.sandbox import run_sandboxed, sandbox_support  # noqa: E402
from bench.report import publish  # noqa: E402
from training.envs import Base, BaseSpec, Environment, Job, Limits, Scheduler  # noqa: E402
from training.envs.registry import leftovers  # noqa: E402

EDIT = "src/edited.py"


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def du_bytes(path: Path) -> int:
    done = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True)
    return int(done.stdout.split()[0]) if done.returncode == 0 else 0


async def timed(coro) -> tuple[float, object]:
    started = time.perf_counter()
    value = await coro
    return time.perf_counter() - started, value


async def bench_start(base: Base, state: Path, runs: int, copy_runs: int) -> dict:
    """Create (overlay and copy arms interleaved), and create+run+close, against a bare sandbox."""
    plain = state / "plain"
    plain.mkdir(parents=True, exist_ok=True)
    arms: dict[str, list[float]] = {"overlay": [], "copy": [], "cycle": [], "sandbox": []}
    diffs: dict[str, list[float]] = {"overlay": [], "copy": []}
    closes: dict[str, list[float]] = {"overlay": [], "copy": []}
    disk: dict[str, int] = {}
    isolation = {}
    for level in ("overlay", "copy"):  # warm-up: the first create probes the machine
        await (await Environment.create(base, state_dir=state, filesystem=level)).close()
    for i in range(runs):
        for level in ("overlay", "copy") if i < copy_runs else ("overlay",):
            seconds, env = await timed(Environment.create(base, state_dir=state, filesystem=level))
            arms[level].append(seconds)
            isolation[level] = env.isolation
            (env.root / EDIT).write_text("print('edited')\n")
            seconds, diff = await timed(asyncio.to_thread(env.diff))
            assert EDIT in diff, diff[:200]
            diffs[level].append(seconds)
            disk[level] = du_bytes(env.layer.upper or env.root)
            seconds, _ = await timed(env.close())
            closes[level].append(seconds)
        started = time.perf_counter()
        async with await Environment.create(base, state_dir=state) as env:
            await env.run("true")
        arms["cycle"].append(time.perf_counter() - started)
        seconds, _ = await timed(run_sandboxed("true", workspace_root=plain))
        arms["sandbox"].append(seconds)
    out = {f"{arm}_p50_ms": ms(statistics.median(v)) for arm, v in arms.items()}
    out |= {f"{arm}_p95_ms": ms(pct(v, 0.95)) for arm, v in arms.items()}
    out |= {f"diff_{arm}_p50_ms": ms(statistics.median(v)) for arm, v in diffs.items()}
    out |= {f"close_{arm}_p50_ms": ms(statistics.median(v)) for arm, v in closes.items()}
    out |= {f"disk_{arm}_bytes": v for arm, v in disk.items()}
    out["isolation"] = isolation
    print(f"start: overlay p50 {out['overlay_p50_ms']} ms p95 {out['overlay_p95_ms']} ms, copy p50 "
          f"{out['copy_p50_ms']} ms; create+run+close p50 {out['cycle_p50_ms']} ms; bare sandbox "
          f"{out['sandbox_p50_ms']} ms", flush=True)
    return out


async def bench_throughput(base: Base, state: Path, n: int, concurrency: int) -> dict:
    gate = asyncio.Semaphore(concurrency)
    plain = state / "plain"
    plain.mkdir(parents=True, exist_ok=True)

    async def one_env(i: int) -> bool:
        async with gate, await Environment.create(base, state_dir=state) as env:
            return (await env.run(f"echo {i}")).output.strip() == str(i)

    async def one_sandbox(i: int) -> bool:
        async with gate:
            return (await run_sandboxed(f"echo {i}", workspace_root=plain)).output.strip() == str(i)

    env_s, env_ok = await timed(asyncio.gather(*(one_env(i) for i in range(n))))
    box_s, box_ok = await timed(asyncio.gather(*(one_sandbox(i) for i in range(n))))
    out = {"n": n, "concurrency": concurrency, "env_s": round(env_s, 3), "envs_per_s": round(n / env_s, 1),
           "sandbox_s": round(box_s, 3), "sandboxes_per_s": round(n / box_s, 1),
           "env_failures": n - sum(env_ok), "sandbox_failures": n - sum(box_ok),
           "leftovers": leftovers(state)}
    print(f"throughput: {out['envs_per_s']} environments/s ({n} at {concurrency} at once), "
          f"bare sandboxes {out['sandboxes_per_s']}/s", flush=True)
    return out


async def bench_scheduler(spec: BaseSpec, state: Path, bases: Path, n: int) -> dict:
    cpus = float(os.cpu_count() or 1)
    async with Scheduler(cpus=cpus, max_concurrency=32, state_dir=state, base_dir=bases) as sched:
        await sched.prepare(spec)
        jobs = [Job(base=spec, commands=(f"echo {i} > {EDIT}",), tests=(f"grep -q {i} {EDIT}",),
                    limits=Limits(cpus=0.25)) for i in range(n)]
        seconds, results = await timed(sched.map(jobs))
    stage = {k: ms(statistics.median(r.timings.get(k, 0) for r in results)) for k in ("setup", "run", "grade", "queue")}
    out = {"jobs": n, "cpus": cpus, "seconds": round(seconds, 3), "jobs_per_s": round(n / seconds, 1),
           "passed": sum(r.passed for r in results), "stage_p50_ms": stage}
    print(f"scheduler: {out['jobs_per_s']} jobs/s ({out['passed']}/{n} passed), stage p50s {stage}", flush=True)
    return out


def tables(res: dict) -> str:
    s, t, j = res["start"], res["throughput"], res["scheduler"]
    kb = 1024
    out = ["| environments | training.envs | baseline | ratio |", "| --- | --- | --- | --- |",
           f"| start: `Environment.create` p50 / p95 ({s['isolation']['overlay']}) vs the copy level "
           f"({s['isolation']['copy']}) | {s['overlay_p50_ms']:.1f} / {s['overlay_p95_ms']:.1f} ms | "
           f"{s['copy_p50_ms']:.0f} / {s['copy_p95_ms']:.0f} ms | {s['copy_p50_ms'] / s['overlay_p50_ms']:.0f}x faster |",
           f"| create + `run(\"true\")` + close, p50 / p95, vs a bare `run_sandboxed(\"true\")` | "
           f"{s['cycle_p50_ms']:.1f} / {s['cycle_p95_ms']:.1f} ms | {s['sandbox_p50_ms']:.1f} / "
           f"{s['sandbox_p95_ms']:.1f} ms | {s['cycle_p50_ms'] / s['sandbox_p50_ms']:.2f}x |",
           f"| {t['n']} environments (create, `echo`, close), {t['concurrency']} at once, vs {t['n']} bare sandboxes | "
           f"{t['envs_per_s']:.0f} envs/s | {t['sandboxes_per_s']:.0f} sandboxes/s | "
           f"{t['sandboxes_per_s'] / t['envs_per_s']:.2f}x slower |",
           f"| scheduler: {j['jobs']} jobs setup -> run -> grade (2 views each), {j['cpus']:.0f} CPUs, 0.25 CPU a job | "
           f"{j['jobs_per_s']:.0f} jobs/s | - | - |",
           "", f"| overlay vs plain copy, base = {res['repo']} | overlay | copy (`cp -a --reflink=auto`) | copy / overlay |",
           "| --- | --- | --- | --- |"]
    for label, a, b, unit in (("create p50", s["overlay_p50_ms"], s["copy_p50_ms"], "ms"),
                              ("diff after a one-file edit, p50", s["diff_overlay_p50_ms"], s["diff_copy_p50_ms"], "ms"),
                              ("close p50", s["close_overlay_p50_ms"], s["close_copy_p50_ms"], "ms"),
                              ("disk per environment after the edit (du -sb)", s["disk_overlay_bytes"] / kb,
                               s["disk_copy_bytes"] / kb, "KB")):
        out.append(f"| {label} | {a:,.2f} {unit} | {b:,.2f} {unit} | {b / max(a, 1e-9):,.0f}x |")
    return "\n".join(out) + "\n"


async def run(args: argparse.Namespace) -> dict:
    repo = Path(args.repo).resolve()
    files = sum(len(f) for _, _, f in os.walk(repo))
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="composer-bench-envs-") as tmp:
        state, bases = Path(tmp) / "state", Path(tmp) / "bases"
        src = Path(tmp) / "src"
        shutil.copytree(repo, src / repo.name, symlinks=True)
        (src / "src").mkdir()
        spec = BaseSpec(key=f"bench-{repo.name}", source=str(src))
        base = await Base.build(spec, bases)
        runs, n = (3, 40) if args.quick else (args.runs, args.envs)
        copy_runs = min(runs, 2 if args.quick else args.copy_runs)
        res: dict = {"repo": f"`{repo.name}` ({files} files, {du_bytes(src) / 1024**2:.0f} MB)",
                     "start": await bench_start(base, state, runs, copy_runs),
                     "throughput": await bench_throughput(base, state, n, args.concurrency),
                     "scheduler": await bench_scheduler(spec, state, bases, max(8, n // 4))}
        res["leftovers"] = leftovers(state)
    support = sandbox_support()
    res["meta"] = (f"training.envs on {platform.machine()}, {os.cpu_count()} CPUs, kernel {platform.release()}, "
                   f"sandbox {support.isolation} (pids cgroup v{support.cgroup_version}), Python "
                   f"{platform.python_version()}, load average {load:.1f} at the start (a shared machine: "
                   f"compare ratios, not times); {runs} overlay and {copy_runs} copy runs after a warm-up, the arms "
                   f"interleaved; {datetime.date.today()}.")
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=str(Path(sysconfig.get_path("purelib")) / "transformers"),
                    help="the tree the base copies (default: site-packages/transformers)")
    ap.add_argument("--runs", type=int, default=15, help="runs per start arm (after a warm-up)")
    ap.add_argument("--copy-runs", type=int, default=5, help="runs of the copy arm (seconds each)")
    ap.add_argument("--envs", type=int, default=200, help="environments in the throughput run")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--quick", action="store_true", help="3 runs, 40 environments: a smoke run")
    ap.add_argument("--no-write", action="store_true", help="print only; leave results and docs alone")
    args = ap.parse_args(argv)
    res = asyncio.run(run(args))
    text = tables(res)
    publish("envs", "Environments", res, text, res["meta"], write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
