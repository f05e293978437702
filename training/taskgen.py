"""Bug-fix tasks from real PyPI packages and their own test suites, SWE-smith style: take the
package's sdist, mutate one function (training/mutations.py), keep the mutants that make tests
fail, and write each as a task (training/tasks.py format) whose starting workspace is the sdist
with the bug and without the tests that catch it, whose `test_patch` puts those tests back at
grading, and whose gold `patch` undoes the bug.

    python -m training.taskgen --package toolz --version 1.2.0 --out tasks.jsonl --max-tasks 5 --seed 0
    python -m training.taskgen --package more-itertools --sdist more_itertools-11.2.1.tar.gz --out tasks.jsonl --append

Offline except for `pip download --no-deps --no-binary :all: NAME==V` of the sdist, cached under
~/.cache/composer/sdists ($COMPOSER_SDISTS; `--sdist FILE` skips the cache). The unpacked sdist is
a training/envs base; mutants are written into one environment's view of it, and tests run there
with pytest in its sandbox and limits (training.tasks.run_tests), with plugin autoloading off so
the suite sees only its own configuration.

For each mutant (chosen with --seed, balancing the mutation kinds, one task per function):
  1. the tests that mention the function (by name, found in the test files' syntax trees, among
     the ids `pytest --collect-only` lists) run on the mutant; none failing: it survived;
     a run past --timeout (an endless loop) drops it;
  2. the same tests run on the original (once per test): FAIL_TO_PASS = failing on the mutant
     and passing on the original; PASS_TO_PASS candidates = a seeded sample passing on both,
     topped up from the failing tests' files when the function has few tests;
  3. FAIL_TO_PASS + the candidates run again on both, alone: every FAIL_TO_PASS test must fail
     on the mutant and pass on the original, else the mutant is dropped (order-dependent or flaky
     tests); PASS_TO_PASS = the candidates passing on both. So the broken workspace fails
     exactly FAIL_TO_PASS of FAIL_TO_PASS + PASS_TO_PASS. (No `pytest -x`: every outcome counts.)
  4. the problem statement is the failing test's traceback as pytest prints it (--tb=short),
     keeping only the test's own frames and the error lines, never a frame of the library, and
     dropping any line that holds the changed code: it shows the symptom, not the fix.
  5. the FAIL_TO_PASS test functions leave the workspace (training/patches.py: source.patch is the
     bug plus their removal; test_patch restores them); a test that is no function of a test file
     (a doctest, a generated test) cannot be hidden, and its mutant is dropped.

It prints a JSON summary (candidates, tried, kept, survived, ...). Tests:
.venv/bin/python -m pytest tests/training/test_taskgen.py
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import hashlib
import json
import random
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from training.envs import Base, Environment, Limits
from training.mutations import KINDS, Mutation, find_mutations, parses
from training.patches import HideError, file_diff, hide_tests
from training.tasks import (
    PASSED,
    TEST_ENV,
    TEST_OUTPUT_BYTES,
    Source,
    Task,
    TaskError,
    TestRun,
    fetch_sdist,
    load_tasks,
    normal_name,
    run_tests,
    sdist_name_version,
    unpack_sdist,
    write_tasks,
)

TEST_CMD = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -q -p no:cacheprovider -rA --tb=short {tests}"
MAX_F2P = 50
MAX_STATEMENT_LINES = 30
HIDDEN_NOTE = ("These tests are not in the checkout: they run when the fix is graded. They describe the "
               "intended behaviour: fix the library so that they pass.")
_SKIP_DIRS = {"tests", "test", "testing", "docs", "doc", "examples", "benchmarks", "build", "dist"}


@dataclass
class Stats:
    candidates: int = 0
    tried: int = 0
    kept: int = 0
    survived: int = 0
    no_fail_to_pass: int = 0
    unstable: int = 0
    no_statement: int = 0
    unhideable: int = 0
    timed_out: int = 0
    tried_by_kind: Counter = field(default_factory=Counter)
    kept_by_kind: Counter = field(default_factory=Counter)


# ---- the package: its code, its tests ---------------------------------------------------------


def _is_test_file(rel: Path) -> bool:
    return rel.name.startswith("test_") or rel.name.endswith("_test.py") or rel.name == "conftest.py" or any(
        part in ("tests", "test", "testing") for part in rel.parts[:-1])


def source_files(root: Path) -> list[Path]:
    """The package's own modules (relative paths): under a folder with __init__.py, not tests,
    docs or build scripts."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if len(rel.parts) < 2 or _is_test_file(rel) or rel.parts[0] in _SKIP_DIRS or rel.name.startswith("_build"):
            continue
        if (path.parent / "__init__.py").exists():
            found.append(rel)
    return found


def _names_in(node: ast.AST) -> set[str]:
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            names.add(sub.attr)
    return names


def names_in_tests(root: Path) -> dict[str, set[str]]:
    """`file::[Class::]test` -> the names its body mentions, for every test file."""
    refs: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if not _is_test_file(rel) or rel.name == "conftest.py":
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                refs[f"{rel.as_posix()}::{node.name}"] = _names_in(node)
            elif isinstance(node, ast.ClassDef):
                shared = set().union(*(_names_in(n) for n in node.body if isinstance(n, ast.FunctionDef)
                                       and not n.name.startswith("test")))
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        refs[f"{rel.as_posix()}::{node.name}::{item.name}"] = _names_in(item) | shared
    return refs


async def collect_tests(env: Environment, timeout_s: float) -> list[str]:
    """The test ids pytest collects in the environment."""
    command = TEST_CMD.replace(" -rA --tb=short {tests}", " --collect-only")
    result = await env.run(command, timeout_s=timeout_s, env=TEST_ENV, max_output_bytes=TEST_OUTPUT_BYTES)
    ids = [line.strip() for line in result.output.splitlines() if "::" in line and not line.startswith(" ")]
    if result.exit_code != 0 or not ids:
        raise TaskError(f"collecting the tests of {env.base.key} failed (exit {result.exit_code}): "
                        f"{result.output[-1500:]}")
    return ids


def related_tests(mutation: Mutation, collected: list[str], refs: dict[str, set[str]]) -> list[str]:
    """Collected ids whose test mentions the mutated function (a method: its name or class)."""
    parts = mutation.function.split(".")
    names = {p for p in parts[-2:] if not (p.startswith("__") and p.endswith("__"))} if len(parts) > 1 else {parts[0]}
    names = {n for n in names if len(n) > 2}
    return [t for t in collected if names & refs.get(t.split("[", 1)[0], set())]


# ---- diffs and statements --------------------------------------------------------------------


def _changed_lines(diff: str) -> set[str]:
    return {line[1:].strip() for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---")) and len(line[1:].strip()) >= 4}


def failure_block(output: str, test_id: str) -> list[str]:
    """The lines pytest printed under `test_id`'s header in the FAILURES section."""
    title = test_id.split("::", 1)[-1].replace("::", ".")
    lines, block, inside = output.splitlines(), [], False
    for line in lines:
        header = re.match(r"^_{3,} (.+?) _{3,}$", line)
        if header or line.startswith("====="):
            if inside:
                break
            inside = bool(header) and (header.group(1) == title or header.group(1).startswith(title + " ("))
            continue
        if inside:
            if line.startswith("-----"):
                break
            block.append(line)
    return block


def statement_lines(block: list[str], test_files: set[str], changed: set[str]) -> list[str]:
    """The test's own frames and the error lines of a --tb=short block; library frames (their
    file:line and code) and any line holding changed code are left out."""
    kept: list[str] = []
    keep_frame = False
    for line in block:
        frame = re.match(r"^(\S[^:]*\.py):\d+: in ", line)
        if frame:
            keep_frame = frame.group(1) in test_files
        elif line.startswith("E "):
            keep_frame = True
        if keep_frame and line.strip() and not any(c in line for c in changed):
            kept.append(re.sub(r"0x[0-9a-f]{6,}", "0x...", line.rstrip()[:240]))
    return kept[-MAX_STATEMENT_LINES:]


def problem_statement(package: str, version: str, f2p: list[str], output: str, test_files: set[str],
                      changed: set[str]) -> str | None:
    """The issue text: which test fails and how; None when nothing but the changed code shows."""
    for test_id in f2p:
        lines = statement_lines(failure_block(output, test_id), test_files, changed)
        if any(line.startswith("E ") for line in lines):
            break
    else:
        return None
    text = [f"`{test_id}` fails in {package} {version}:", "", "```", *lines, "```", ""]
    others = [t for t in f2p if t != test_id]
    if others:
        shown = ", ".join(f"`{t}`" for t in others[:5]) + (", ..." if len(others) > 5 else "")
        text += [f"{len(others)} other test{'s fail' if len(others) > 1 else ' fails'} as well: {shown}.", ""]
    text.append(HIDDEN_NOTE)
    return "\n".join(text)


# ---- the generator ---------------------------------------------------------------------------


class Generator:
    """Mutants of the package in `env` (its view is changed in place and restored after each)."""

    def __init__(self, env: Environment, package: str, version: str, sdist_sha256: str, *, seed: int,
                 p2p: int, timeout_s: float) -> None:
        self.env, self.root = env, env.root
        self.package, self.version, self.sha256 = package, version, sdist_sha256
        self.rng = random.Random(seed)
        self.seed, self.p2p, self.timeout_s = seed, p2p, timeout_s
        self.stats = Stats()
        self.baseline: dict[str, str] = {}
        """Outcomes on the original source, filled as tests are first needed."""
        self.collected: list[str] = []
        self.refs: dict[str, set[str]] = {}
        self.test_files: set[str] = set()
        self.template = Task(instance_id="x", problem_statement="x", FAIL_TO_PASS=("x",), test_cmd=TEST_CMD,
                             source=Source(kind="dir", path=str(env.base.path)))

    async def prepare(self) -> list[Mutation]:
        self.collected = await collect_tests(self.env, self.timeout_s)
        self.refs = names_in_tests(self.root)
        self.test_files = {t.split("::", 1)[0] for t in self.collected}
        candidates = []
        for rel in source_files(self.root):
            for m in find_mutations((self.root / rel).read_bytes(), rel.as_posix()):
                if related_tests(m, self.collected, self.refs):
                    candidates.append(m)
        self.stats.candidates = len(candidates)
        return candidates

    def _next(self, queues: dict[str, list[Mutation]], used: set[str], tries: Counter) -> Mutation | None:
        """The next mutant: of the kind with the fewest kept (then tried) so far, in a function
        with no task yet and fewer than two tries."""
        while any(queues.values()):
            kind = min((k for k in KINDS if queues.get(k)),
                       key=lambda k: (self.stats.kept_by_kind[k], self.stats.tried_by_kind[k]))
            m = queues[kind].pop()
            key = f"{m.path}:{m.function}"
            if key not in used and tries[key] < 2:
                tries[key] += 1
                return m
        return None

    async def generate(self, max_tasks: int, max_tries: int) -> list[Task]:
        candidates = await self.prepare()
        queues: dict[str, list[Mutation]] = {k: [] for k in KINDS}
        for m in candidates:
            queues[m.kind].append(m)
        for queue in queues.values():
            self.rng.shuffle(queue)
        used: set[str] = set()
        tries: Counter = Counter()
        tasks: list[Task] = []
        while len(tasks) < max_tasks and self.stats.tried < max_tries:
            m = self._next(queues, used, tries)
            if m is None:
                break
            task = await self.try_mutation(m)
            if task is not None:
                tasks.append(task)
                used.add(f"{m.path}:{m.function}")
        return tasks

    async def _run(self, ids: list[str]) -> TestRun:
        return await run_tests(self.template, self.env, ids, timeout_s=self.timeout_s)

    async def try_mutation(self, m: Mutation) -> Task | None:
        path = self.root / m.path
        original = path.read_bytes()
        if not parses(m, original):
            return None
        self.stats.tried += 1
        self.stats.tried_by_kind[m.kind] += 1
        broken = m.apply(original)
        try:
            path.write_bytes(broken)
            related = related_tests(m, self.collected, self.refs)
            on_mutant = await self._run(related)
            if on_mutant.timed_out:  # an endless loop, most likely: no task to learn from
                self.stats.timed_out += 1
                return None
            failing = [t for t, outcome in on_mutant.outcomes.items() if outcome != PASSED]
            if not failing:
                self.stats.survived += 1
                return None
            path.write_bytes(original)
            unknown = [t for t in related if t not in self.baseline]
            if unknown:
                self.baseline.update((await self._run(unknown)).outcomes)
            return await self._make_task(m, original, broken, on_mutant)
        finally:
            path.write_bytes(original)

    async def _make_task(self, m: Mutation, original: bytes, broken: bytes, on_mutant: TestRun) -> Task | None:
        f2p = [t for t, o in on_mutant.outcomes.items() if o != PASSED and self.baseline.get(t) == PASSED][:MAX_F2P]
        if not f2p:
            self.stats.no_fail_to_pass += 1
            return None
        both = sorted(t for t, o in on_mutant.outcomes.items() if o == PASSED and self.baseline.get(t) == PASSED)
        candidates = self.rng.sample(both, min(self.p2p, len(both)))
        if len(candidates) < self.p2p:  # too few related tests: others from the failing tests' files
            files = {t.split("::", 1)[0] for t in f2p}
            pool = sorted(t for t in self.collected if t.split("::", 1)[0] in files and t not in on_mutant.outcomes)
            candidates += self.rng.sample(pool, min(self.p2p - len(candidates), len(pool)))
        gold = file_diff(m.path, broken.decode(), original.decode())
        bug = file_diff(m.path, original.decode(), broken.decode())
        statement = problem_statement(self.package, self.version, f2p, on_mutant.output, self.test_files,
                                      _changed_lines(gold))
        if statement is None:
            self.stats.no_statement += 1
            return None
        try:
            removal, test_patch = hide_tests(lambda rel: (self.root / rel).read_text(encoding="utf-8"), f2p)
        except HideError:
            self.stats.unhideable += 1
            return None
        p2p = await self._verify(m, broken, original, f2p, candidates)
        if p2p is None:
            self.stats.unstable += 1
            return None
        self.stats.kept += 1
        self.stats.kept_by_kind[m.kind] += 1
        digest = hashlib.sha256(bug.encode()).hexdigest()[:10]
        name = re.sub(r"[^A-Za-z0-9]+", "_", self.package).lower()
        return Task(
            instance_id=f"{name}-{self.version}__mut-{digest}", problem_statement=statement,
            source=Source(kind="pypi", name=self.package, version=self.version, sha256=self.sha256,
                          patch=bug + removal),
            FAIL_TO_PASS=tuple(f2p), PASS_TO_PASS=tuple(p2p), patch=gold, test_patch=test_patch,
            repo=f"pypi/{self.package}",
            version=self.version, test_cmd=TEST_CMD,
            metadata={"generator": "training.taskgen", "seed": self.seed, "mutation": m.describe()},
        )

    async def _verify(self, m: Mutation, broken: bytes, original: bytes, f2p: list[str],
                      candidates: list[str]) -> list[str] | None:
        """F2P + the P2P candidates alone, on both: every F2P test must fail on the mutant and
        pass on the original (else None); the P2P are the candidates passing on both."""
        path, ids = self.root / m.path, [*f2p, *candidates]
        path.write_bytes(broken)
        on_mutant = (await self._run(ids)).outcomes
        path.write_bytes(original)
        on_original = (await self._run(ids)).outcomes
        if any(on_mutant[t] == PASSED or on_original[t] != PASSED for t in f2p):
            return None
        return sorted(t for t in candidates if on_mutant[t] == PASSED and on_original[t] == PASSED)


def _version_of(sdist: Path, package: str) -> str:
    found = sdist_name_version(sdist.name)
    if found is None or found[0] != normal_name(package):
        raise TaskError(f"{sdist.name!r} is not an sdist file name of {package!r} (NAME-VERSION.tar.gz)")
    return found[1]


async def generate_tasks(package: str, *, version: str | None = None, sdist: Path | None = None,
                         cache_dir: Path | None = None, max_tasks: int = 5, max_tries: int | None = None,
                         seed: int = 0, p2p: int = 20, timeout_s: float = 60) -> tuple[list[Task], dict]:
    """Tasks from one package and a summary of the run."""
    started = time.perf_counter()
    sdist = Path(sdist) if sdist is not None else fetch_sdist(package, version, cache_dir=cache_dir)
    found = _version_of(sdist, package)
    if version is not None and version != found:
        raise TaskError(f"--version {version} does not match the sdist {sdist.name} (version {found})")
    sha256 = hashlib.sha256(sdist.read_bytes()).hexdigest()
    with tempfile.TemporaryDirectory(prefix="composer-taskgen-") as tmp:
        base = Base.from_dir(unpack_sdist(sdist, Path(tmp) / "src"), key=f"{normal_name(package)}-{found}")
        async with await Environment.create(base, limits=Limits(timeout_s=timeout_s)) as env:
            gen = Generator(env, package, found, sha256, seed=seed, p2p=p2p, timeout_s=timeout_s)
            tasks = await gen.generate(max_tasks, max_tries if max_tries is not None else max(10, 6 * max_tasks))
    s = gen.stats
    summary = {"package": package, "version": found, "sdist": str(sdist), "candidates": s.candidates,
               "tried": s.tried, "kept": s.kept, "survived": s.survived, "no_fail_to_pass": s.no_fail_to_pass,
               "unstable": s.unstable, "no_statement": s.no_statement, "unhideable": s.unhideable,
               "timed_out": s.timed_out, "tried_by_kind": dict(s.tried_by_kind),
               "kept_by_kind": dict(s.kept_by_kind), "seconds": round(time.perf_counter() - started, 1)}
    return tasks, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.taskgen", description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", required=True, help="PyPI distribution name")
    parser.add_argument("--version", help="exact version (default: the latest sdist)")
    parser.add_argument("--out", required=True, type=Path, help="tasks JSONL to write")
    parser.add_argument("--append", action="store_true", help="add to --out instead of replacing it")
    parser.add_argument("--max-tasks", type=int, default=5)
    parser.add_argument("--max-tries", type=int, help="mutants to test at most (default 6 per task, at least 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--p2p", type=int, default=20, help="PASS_TO_PASS tests per task at most")
    parser.add_argument("--sdist", type=Path, help="use this sdist file instead of the cache or pip")
    parser.add_argument("--cache-dir", type=Path, help="sdist cache (default ~/.cache/composer/sdists)")
    parser.add_argument("--timeout", type=float, default=60, help="seconds per pytest run (a mutant that runs "
                        "longer is dropped: mutations make endless loops)")
    args = parser.parse_args(argv)
    if args.max_tasks < 1:
        parser.error(f"--max-tasks must be >= 1, got {args.max_tasks}")
    tasks, summary = asyncio.run(generate_tasks(
        args.package, version=args.version, sdist=args.sdist, cache_dir=args.cache_dir, max_tasks=args.max_tasks,
        max_tries=args.max_tries, seed=args.seed, p2p=args.p2p, timeout_s=args.timeout))
    existing = load_tasks(args.out) if args.append and args.out.exists() else []
    ids = {t.instance_id for t in existing}
    write_tasks(args.out, existing + [t for t in tasks if t.instance_id not in ids])
    print(json.dumps(summary | {"out": str(args.out)}))
    return 0 if tasks else 1


if __name__ == "__main__":
    sys.exit(main())
