"""Composer Bench from the command line: run a policy on suites, rebuild a report, compare two.

    python -m training.eval --suite bugfix-heldout --policy composer-mini [--parallel 2]
    python -m training.eval --policy http://127.0.0.1:8000/v1 --model-name NAME   # every full-run suite
    python -m training.eval --suite path/to/suite.toml --policy ~/ckpt/step-100 --out runs/
    python -m training.eval --report RUN_DIR            # report.{json,md,png} from the records so far
    python -m training.eval --compare A/report.json B/report.json [--out cmp.md]

`--policy` is composer-mini (the in-process engine), a checkpoint directory (Hugging Face
layout, in-process) or the base URL of any OpenAI-compatible server (model.serve, vLLM, a hosted
API; its key from the environment variable `--api-key-env` names; `--tokenizer DIR`: its model's
tokenizer, for token-in requests and token-exact logs). Each suite runs in
`OUT/SUITE/` (default OUT: $COMPOSER_EVAL_DIR, else ~/.local/share/composer/eval/POLICY): the same
command again continues a run that was stopped (every recorded attempt is kept, the others run).
Tasks run in the sandbox (bubblewrap); below it the run refuses unless --allow-unsandboxed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from agent.isolation import UnsandboxedError
from training.eval.report import build_report, compare, load_report, write_report
from training.eval.runner import PolicySpec, RunDir, parse_policy, run_suite
from training.eval.suite import Suite, SuiteError, load_suite, suite_names


def default_eval_dir() -> Path:
    """Where runs go: $COMPOSER_EVAL_DIR, else $XDG_DATA_HOME/composer/eval."""
    if os.environ.get("COMPOSER_EVAL_DIR"):
        return Path(os.environ["COMPOSER_EVAL_DIR"])
    data = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return data / "composer" / "eval"


def machine() -> dict[str, Any]:
    """The CPU and the commit a run's timings belong to."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    root = Path(__file__).resolve().parents[2]
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu, "cpus": os.cpu_count(), "python": platform.python_version(), "commit": commit or None}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.eval", description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", action="append", help="a suite name or manifest path (repeatable; default: the full-run suites)")
    p.add_argument("--policy", help="composer-mini, a checkpoint directory, or an OpenAI-compatible base URL")
    p.add_argument("--model-name", help="the model to ask an endpoint for (default: its only one)")
    p.add_argument("--tokenizer", help="an endpoint's tokenizer (a checkpoint directory): token-in requests and "
                   "token-exact logs (default: composer-mini's when --model-name is composer-mini)")
    p.add_argument("--api-key-env", default="COMPOSER_API_KEY", help="environment variable holding an endpoint's key (as composer-lsp reads)")
    p.add_argument("--quantize", choices=["int4", "none"], default="int4",
                   help="in-process weights (default int4; a trained checkpoint's LoRA adapter stays "
                        "beside the int4 matrices in fp32)")
    p.add_argument("--parallel", type=int, default=2, help="attempts at once (default 2)")
    p.add_argument("--out", type=Path, help="root of the run directories (one per suite)")
    p.add_argument("--instance", action="append", help="run only this task (repeatable)")
    p.add_argument("--limit", type=int, help="run only the first N tasks of each suite")
    p.add_argument("--timeout", type=float, help="seconds per attempt instead of the suite's timeout_s (a slow machine)")
    p.add_argument("--allow-unsandboxed", action="store_true", help="run where the sandbox is weaker than bubblewrap")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (one line per attempt instead)")
    p.add_argument("--report", type=Path, metavar="RUN_DIR", help="rebuild a run's report from its records")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="two report.json files side by side")
    return p


def suite_tasks(suite: Suite, instances: list[str] | None, limit: int | None) -> list:
    tasks = suite.tasks()
    if instances:
        missing = sorted(set(instances) - {t.instance_id for t in tasks})
        if missing and len(missing) == len(set(instances)):
            raise SuiteError(f"{suite.name}: no task {missing}")
        tasks = [t for t in tasks if t.instance_id in instances]
    return tasks[:limit] if limit else tasks


class Progress:
    """A tqdm bar on stderr (or a line per attempt) with the running resolved count."""

    def __init__(self, name: str, plain: bool) -> None:
        self.name, self.plain, self.bar, self.resolved = name, plain, None, 0

    def start(self, done: int, total: int) -> None:
        if not self.plain:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, desc=self.name, unit="task", file=sys.stderr, dynamic_ncols=True)
        else:
            print(f"{self.name}: {done}/{total} attempts recorded, running the rest", file=sys.stderr, flush=True)

    def record(self, record: dict[str, Any]) -> None:
        self.resolved += bool(record["resolved"])
        if self.bar is not None:
            self.bar.set_postfix(resolved=self.resolved, refresh=False)
            self.bar.update(1)
        else:
            print(f"{self.name} {record['instance_id']} seed {record['seed']}: {record['status']} "
                  f"resolved={record['resolved']} steps={record['steps']}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


async def run(args: argparse.Namespace, policy: PolicySpec, argv: list[str]) -> int:
    """Every suite in turn, in one event loop (an in-process engine is shared across them)."""
    suites = [load_suite(s) for s in args.suite] if args.suite else \
        [s for s in map(load_suite, suite_names()) if s.full_run]
    root = args.out or default_eval_dir() / policy.slug
    api_key = os.environ.get(args.api_key_env) if policy.kind == "endpoint" else None
    command = "python -m training.eval " + shlex.join(argv)
    for suite in suites:
        tasks = suite_tasks(suite, args.instance, args.limit)
        run_dir = RunDir(root / suite.name)
        progress = Progress(suite.name, args.no_progress)
        try:
            records = await run_suite(suite, policy, run_dir, tasks=tasks, parallel=args.parallel, api_key=api_key,
                                      allow_unsandboxed=args.allow_unsandboxed, on_record=progress.record,
                                      on_start=progress.start, command=command, timeout_s=args.timeout)
        finally:
            progress.close()
        report = build_report(run_dir.meta(), records, suite=suite, extra={"command": command, "machine": machine()})
        paths = write_report(report, run_dir.path)
        s = report["summary"]
        print(f"{suite.name}: resolved {s['resolved']} ({s['resolved_count']}/{s['scored']} scored, "
              f"{s['masked']} masked) -> {paths[0]}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.compare:
            text = compare(load_report(args.compare[0]), load_report(args.compare[1]))
            if args.out:
                args.out.write_text(text, encoding="utf-8")
            print(text)
            return 0
        if args.report:
            run_dir = RunDir(args.report)
            meta = run_dir.meta()
            suite = load_suite(meta["suite_path"]) if Path(meta["suite_path"]).is_file() else None
            report = build_report(meta, run_dir.records(), suite=suite,
                                  extra={"command": meta.get("command"), "machine": machine()})
            print("\n".join(map(str, write_report(report, run_dir.path))))
            return 0
        if not args.policy:
            parser.error("--policy is required to run suites (or use --report / --compare)")
        if args.parallel < 1:
            parser.error(f"--parallel must be at least 1, got {args.parallel}")
        policy = parse_policy(args.policy, model_name=args.model_name, quantize=args.quantize,
                              tokenizer=args.tokenizer)
        return asyncio.run(run(args, policy, argv))
    except (ValueError, OSError, UnsandboxedError) as err:  # SuiteError, TaskError, a bad --policy
        # are ValueErrors; UnsandboxedError: no bubblewrap, no --allow-unsandboxed (nothing ran)
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
