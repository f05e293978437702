"""The bug-fix family: small generated tasks a small model can grow into. Each breaks one function
of a tiny package, quotes the failing check in the request, and grades with tests hidden from the
workspace (training/tasks.py format; an `inline` source, so a workspace is a few files written
from the line: no network, milliseconds).

    python -m training.bugfix                # writes training/data/suites/bugfix-{train,heldout}.jsonl
    python -m training.bugfix --check        # exit 1 when the committed files differ from a regeneration
    python -m training.bugfix --split train --all-levels --out FILE    # every bug at every level
    python -m training.bugfix --split train --seed 0 1 2 3 4 5 --out FILE  # more bugs: several seeds' pooled

The corpus is training/data/bugfix/: PACKAGE/MODULE.py (plain functions, stdlib only) and
tests/test_MODULE.py with one `test_<function>` per function.

Split (frozen): by module. The modules in HELDOUT_MODULES form the held-out split, the rest the
train split. So the splits' functions are disjoint by identity (package.module.function), and no
train workspace holds a held-out function, not even unbroken.

Bugs: each function's mutations (training/mutations.py), grouped by kind and shuffled by a
generator seeded with (--seed, the function's name), so a function's bugs do not change when
others are added; the next one tried is of the kind used least so far in that function (kinds
are drawn evenly, not by how many candidates each has; LAST_KINDS after the others); kept when the module's tests catch it in
this process (training/testprobe.py) and no statement loops; BUGS_PER_FUNCTION of them.

A task: the workspace holds pyproject.toml, PACKAGE/__init__.py, PACKAGE/MODULE.py (source.patch
breaks it) and tests/test_MODULE.py without the tests the bug fails; test_patch puts those back
(FAIL_TO_PASS), the module's other tests are PASS_TO_PASS, and `patch` undoes the bug.

Levels (metadata.level; the split's k-th bug, in corpus order, gets level k % 3):
  0  the request quotes the failing check, what it gives, the file and the broken function:
     one edit fixes it, no read needed;
  1  the failing check, what it gives, and the file: read_file first;
  2  the failing check and what it gives: find the function (grep), read, then edit.

Tests: .venv/bin/python -m pytest tests/training/test_bugfix.py
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import random
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from training.mutations import Mutation, find_mutations, parses
from training.patches import file_diff, hide_tests
from training.taskgen import TEST_CMD
from training.tasks import Source, Task, load_tasks, write_tasks
from training.testprobe import Failure, OutOfFuel, Probe

CORPUS = Path(__file__).parent / "data" / "bugfix"
SUITES = Path(__file__).parent / "data" / "suites"
HELDOUT_MODULES = ("bankkit.ledger", "gridkit.grid", "spankit.intervals", "unitkit.convert", "wordkit.words")
BUGS_PER_FUNCTION = {"train": 3, "heldout": 2}
LEVELS = (0, 1, 2)
LAST_KINDS = ("wrong_return",)
"""Tried after the other kinds used as often: nearly every function has a return, and nearly
every `return None` is caught, so it would crowd out the rest."""
PYPROJECT = """[project]
name = "{package}"
version = "0.1.0"
requires-python = ">=3.10"

[tool.pytest.ini_options]
pythonpath = ["."]
"""


class BugfixError(ValueError):
    """The corpus breaks a rule (a function without a test, a test failing on the original)."""


@dataclass(frozen=True)
class CorpusModule:
    package: str
    module: str
    source: str
    tests: str

    @property
    def name(self) -> str:
        return f"{self.package}.{self.module}"

    @property
    def path(self) -> str:
        return f"{self.package}/{self.module}.py"

    @property
    def test_path(self) -> str:
        return f"tests/test_{self.module}.py"

    @property
    def split(self) -> str:
        return "heldout" if self.name in HELDOUT_MODULES else "train"


@dataclass(frozen=True)
class Bug:
    module: CorpusModule
    function: str
    mutation: Mutation
    failing: dict[str, Failure]
    """test name -> how it fails on the bug (every failing test of the module)."""

    @property
    def quoted(self) -> Failure:
        """The failure the request quotes: the function's own test's, else the first."""
        return self.failing.get(f"test_{self.function}") or next(iter(self.failing.values()))


def load_corpus(root: Path = CORPUS) -> list[CorpusModule]:
    """Every PACKAGE/MODULE.py under `root` with its tests/test_MODULE.py, sorted by name."""
    found = []
    for path in sorted(root.glob("*/*.py")):
        if path.parent.name == "tests" or path.name == "__init__.py":
            continue
        tests = root / "tests" / f"test_{path.stem}.py"
        if not tests.is_file():
            raise BugfixError(f"{path}: no tests at {tests}")
        found.append(CorpusModule(path.parent.name, path.stem, path.read_text(encoding="utf-8"),
                                  tests.read_text(encoding="utf-8")))
    if len({m.module for m in found}) != len(found):
        raise BugfixError("two corpus modules share a name: their tests/test_MODULE.py would collide")
    return found


def functions(module: CorpusModule) -> list[str]:
    """The module's top-level functions, in file order; each must have `test_<name>`."""
    names = [n.name for n in ast.parse(module.source).body if isinstance(n, ast.FunctionDef)]
    tests = {n.name for n in ast.parse(module.tests).body if isinstance(n, ast.FunctionDef)}
    missing = [n for n in names if f"test_{n}" not in tests]
    if missing:
        raise BugfixError(f"{module.name}: no test_{missing[0]} in {module.test_path}")
    return names


def find_bugs(module: CorpusModule, function: str, count: int, seed: int, *,
              tests: Probe | None = None, mutations: list[Mutation] | None = None) -> list[Bug]:
    """Up to `count` bugs in `function` that the module's tests catch (see the module docstring).
    `tests` and `mutations` (the module's) save recomputing them per function."""
    source = module.source.encode()
    tests = tests or Probe(module.package, module.module, module.tests)
    mutations = mutations if mutations is not None else find_mutations(source, module.path)
    rng = random.Random(f"{seed}:{module.name}.{function}")
    by_kind: dict[str, list[Mutation]] = {}
    for m in mutations:
        if m.function == function:
            by_kind.setdefault(m.kind, []).append(m)
    order = sorted(by_kind)
    rng.shuffle(order)  # breaks ties between kinds used equally often
    for queue in by_kind.values():
        rng.shuffle(queue)
    bugs: list[Bug] = []
    used: Counter = Counter()
    seen: set[str] = set()
    while len(bugs) < count and any(by_kind.values()):
        kind = min((k for k in order if by_kind[k]), key=lambda k: (used[k], k in LAST_KINDS, order.index(k)))
        m = by_kind[kind].pop()
        broken = m.apply(source).decode() if parses(m, source) else None
        if broken is None or broken in seen:
            continue
        seen.add(broken)
        try:
            results = tests.run(broken)
        except OutOfFuel:
            continue
        failing = {name: f for name, f in results.items() if f is not None}
        if failing:
            bugs.append(Bug(module, function, m, failing))
            used[m.kind] += 1
    return bugs


def _function_source(source: str, name: str) -> str:
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name)
    return "\n".join(source.splitlines()[node.lineno - 1:node.end_lineno])


def _quoted(failure: Failure) -> str:
    return f"`{failure.call}` {failure.actual}" if "\n" not in failure.call else failure.actual.capitalize()


def request(bug: Bug, level: int, broken: str, rng: random.Random) -> str:
    """The problem statement for `bug` at `level` (wording varies with `rng`)."""
    failure = bug.quoted
    check = f"```python\n{failure.statement}\n```"
    what = _quoted(failure)
    path = bug.module.path
    if level == 0:
        code = f"```python\n{_function_source(broken, bug.function)}\n```"
        opening = rng.choice([f"This check fails:\n\n{check}\n\n{what}.",
                              f"{what}, so this check fails:\n\n{check}"])
        return (f"{opening}\n\nThe function is `{bug.function}` in `{path}`:\n\n{code}\n\n"
                f"Fix the bug in `{bug.function}`.")
    if level == 1:
        return rng.choice([f"This check fails:\n\n{check}\n\n{what}. The bug is in `{path}`; fix it there.",
                           f"{what}, so this check fails:\n\n{check}\n\nPlease fix `{path}`."])
    return rng.choice([f"This check fails:\n\n{check}\n\n{what}. Find the bug in the project and fix it.",
                       f"{what}, so this check fails:\n\n{check}\n\nPlease find the bug and fix it."])


def make_task(bug: Bug, level: int, seed: int) -> Task:
    """One task: the bug at `level` (see the module docstring for the layout)."""
    module, m = bug.module, bug.mutation
    broken = m.apply(module.source.encode()).decode()
    failing = [f"{module.test_path}::{name}" for name in bug.failing]
    passing = [f"{module.test_path}::test_{f}" for f in functions(module) if f"test_{f}" not in bug.failing]
    removal, test_patch = hide_tests(lambda _path: module.tests, failing)
    bug_diff = file_diff(module.path, module.source, broken)
    digest = hashlib.sha256(bug_diff.encode()).hexdigest()[:8]
    ident = f"bugfix__{module.name}.{bug.function}__{m.kind}-{digest}__L{level}"
    rng = random.Random(ident)
    files = {"pyproject.toml": PYPROJECT.format(package=module.package),
             f"{module.package}/__init__.py": f'"""{module.package}: small helpers."""\n',
             module.path: module.source, module.test_path: module.tests}
    failure = bug.quoted
    return Task(
        instance_id=ident, problem_statement=request(bug, level, broken, rng),
        source=Source(kind="inline", files=files, patch=bug_diff + removal),
        FAIL_TO_PASS=tuple(failing), PASS_TO_PASS=tuple(passing), patch=file_diff(module.path, broken, module.source),
        test_patch=test_patch, repo=f"bugfix/{module.package}", version="0.1.0", test_cmd=TEST_CMD,
        metadata={"generator": "training.bugfix", "seed": seed, "split": module.split, "level": level,
                  "function": f"{module.name}.{bug.function}", "mutation": m.describe(),
                  "check": {"test": failure.test, "statement": failure.statement, "actual": failure.actual}},
    )


def split_bugs(split: str, *, seed: int = 0, corpus: Path = CORPUS) -> list[Bug]:
    """The split's bugs, in corpus order (module, function, the order found): deterministic."""
    bugs = []
    for module in load_corpus(corpus):
        if module.split != split:
            continue
        tests = Probe(module.package, module.module, module.tests)
        clean = tests.run(module.source)
        failing = sorted(name for name, f in clean.items() if f is not None)
        if failing:
            raise BugfixError(f"{module.name}: {failing[0]} fails on the unbroken module: {clean[failing[0]]}")
        mutations = find_mutations(module.source.encode(), module.path)
        for function in functions(module):
            bugs += find_bugs(module, function, BUGS_PER_FUNCTION[split], seed, tests=tests, mutations=mutations)
    return bugs


def generate(split: str, *, seed: int = 0, all_levels: bool = False, corpus: Path = CORPUS) -> list[Task]:
    """The split's tasks: its k-th bug at level k % 3 (or every bug at every level)."""
    bugs = split_bugs(split, seed=seed, corpus=corpus)
    return [make_task(bug, level, seed) for k, bug in enumerate(bugs)
            for level in (LEVELS if all_levels else (LEVELS[k % len(LEVELS)],))]


def pooled(split: str, seeds: list[int], *, all_levels: bool = False, corpus: Path = CORPUS) -> list[Task]:
    """The distinct bugs of several seeds' splits: each seed's tasks in order, less the bugs an
    earlier seed already gave (a bug keeps the level its first seed gave it). A function has more
    mutations than a split takes, so more seeds make more demonstrations of the same functions
    (the train split's 369 tasks become 767 over seeds 0-5)."""
    tasks: list[Task] = []
    seen: set[str] = set()
    for seed in seeds:
        fresh = [t for t in generate(split, seed=seed, all_levels=all_levels, corpus=corpus) if _bug_id(t) not in seen]
        seen |= {_bug_id(t) for t in fresh}
        tasks += fresh
    return tasks


def _bug_id(task: Task) -> str:
    """The instance id less its level: the function, the kind and the bug diff's digest."""
    return task.instance_id.rsplit("__", 1)[0]


def suite_path(split: str) -> Path:
    return SUITES / f"bugfix-{split}.jsonl"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.bugfix", description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=("train", "heldout", "both"), default="both")
    parser.add_argument("--seed", type=int, nargs="+", default=[0],
                        help="several seeds pool their distinct bugs (the committed splits: seed 0)")
    parser.add_argument("--all-levels", action="store_true", help="every bug at every level (default: one level each)")
    parser.add_argument("--out", type=Path, help="tasks JSONL to write (one split; default: the suite's file)")
    parser.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    args = parser.parse_args(argv)
    splits = ("train", "heldout") if args.split == "both" else (args.split,)
    if args.out is not None and len(splits) != 1:
        parser.error("--out takes one --split")
    if args.out is None and args.seed != [0]:
        parser.error("the committed splits use seed 0: write other seeds' tasks with --out")
    stale = []
    for split in splits:
        tasks = pooled(split, args.seed, all_levels=args.all_levels)
        out = args.out or suite_path(split)
        if args.check:
            if not out.is_file() or load_tasks(out) != tasks:
                stale.append(str(out))
            continue
        write_tasks(out, tasks)
        levels = Counter(t.metadata["level"] for t in tasks)
        functions_ = len({t.metadata["function"] for t in tasks})
        print(f"{out}: {len(tasks)} tasks, {functions_} functions, levels {dict(sorted(levels.items()))}")
    if stale:
        print(f"differs from a regeneration: {', '.join(stale)} (run python -m training.bugfix)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
