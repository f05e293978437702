"""What a perfect and a trivial policy score on a task, graded the way a run is (training/run.py):
the task's base built on training/envs (its workspace materialized, its setup run), then, in a
fresh view each, the untouched workspace and the reference patch graded with `test_patch` applied
and the tests run in the sandbox.

    result = await verify_task(task, Path("/tmp/scratch"))
    result.hidden_ok       # no FAIL_TO_PASS test function in the starting workspace; test_patch has them
    result.trivial_ok      # the untouched workspace: every FAIL_TO_PASS fails, every PASS_TO_PASS passes
    result.perfect_ok      # the reference `patch` applied: resolved
    result.ok, result.problems

bench/suites.py runs it over every shipped task and records the results; the tests run it on a few.
"""

from __future__ import annotations

import ast
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from training.envs import Base, BaseBuildError, Limits, grade
from training.patches import names_by_file
from training.run import graded_task, grading, task_limits
from training.tasks import PASSED, Task, TaskError, TaskGrade, base_spec


@dataclass
class Verdict:
    instance_id: str
    trivial_ok: bool = False
    """The starting state fails every FAIL_TO_PASS and passes every PASS_TO_PASS (so it is unresolved)."""
    trivial_resolved: bool = True
    perfect_ok: bool = False
    """The reference patch resolves the task."""
    hidden_ok: bool = False
    """No FAIL_TO_PASS test function is in the starting workspace; test_patch brings each back."""
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.trivial_ok and self.perfect_ok and self.hidden_ok


def visible_tests(task: Task, root: Path) -> list[str]:
    """The FAIL_TO_PASS tests whose function is defined in the workspace as it stands."""
    found = []
    for path, names in names_by_file(task.FAIL_TO_PASS).items():
        file = root / path
        defined = _test_names(file.read_text(encoding="utf-8", errors="replace")) if file.is_file() else set()
        found += [f"{path}::{name}" for name in sorted(names) if name in defined]
    return found


def _test_names(source: str) -> set[str]:
    """`name` and `Class::name` of the functions defined at the top of a file or in its classes."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.update(f"{node.name}::{n.name}" for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
    return names


async def verify_task(task: Task, scratch: Path, *, cache_dir: Path | None = None,
                      timeout_s: float = 600) -> Verdict:
    """Builds the task's base under `scratch` (removed after) and grades it untouched, then with
    its reference patch, each in a fresh view, as a run is graded (training/run.py)."""
    verdict = Verdict(task.instance_id)
    started = time.perf_counter()
    home = scratch / task.instance_id
    try:
        base = await Base.build(base_spec(task, cache_dir=cache_dir), home)
        shown = visible_tests(task, base.path)
        verdict.hidden_ok = not shown and bool(task.test_patch)
        if not verdict.hidden_ok:
            verdict.problems.append(f"FAIL_TO_PASS tests in the starting workspace: {shown[:3] or 'no test_patch'}")
        trivial = await _grade(task, base, None, timeout_s)
        verdict.trivial_resolved = bool(trivial.resolved)
        verdict.trivial_ok = not trivial.masked and PASSED not in trivial.fail_to_pass.values() and all(
            v == PASSED for v in trivial.pass_to_pass.values())
        if not verdict.trivial_ok:
            verdict.problems.append(f"untouched: {trivial.infra or trivial.counts()}")
        perfect = await _grade(task, base, task.patch, timeout_s)
        verdict.perfect_ok = bool(perfect.resolved)
        if not verdict.perfect_ok:
            failing = [t for t, v in {**perfect.fail_to_pass, **perfect.pass_to_pass}.items() if v != PASSED]
            verdict.problems.append(f"reference patch: {perfect.infra or failing[:5]}")
    except (TaskError, BaseBuildError) as err:
        verdict.problems.append(str(err)[:500])
    finally:
        shutil.rmtree(home, ignore_errors=True)
        verdict.seconds = round(time.perf_counter() - started, 2)
    return verdict


async def _grade(task: Task, base: Base, diff: str | None, timeout_s: float) -> TaskGrade:
    how = grading(task)
    result = await grade(base, how["tests"], diff, patches=how["patches"], exclude_paths=how["exclude_paths"],
                         limits=task_limits(Limits()), timeout_s=timeout_s)
    return graded_task(task, result)
