"""What a perfect and a trivial policy score on a task, graded the way a run is: the workspace
built from the task (training/tasks.py), its setup run, `test_patch` applied, the tests run in the
sandbox (agent/sandbox.py).

    result = await verify_task(task, Path("/tmp/scratch"))
    result.trivial_ok      # the untouched workspace: every FAIL_TO_PASS fails, every PASS_TO_PASS passes
    result.perfect_ok      # the reference `patch` applied: resolved
    result.ok, result.problems

bench/suites.py runs it over every shipped task and records the results; the tests run it on a few.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from training.tasks import (
    MISSING,
    Task,
    TaskError,
    apply_patch,
    evaluate,
    materialize,
    run_setup,
    run_tests,
)


@dataclass
class Verdict:
    instance_id: str
    trivial_ok: bool = False
    """The starting state fails every FAIL_TO_PASS and passes every PASS_TO_PASS (so it is unresolved)."""
    trivial_resolved: bool = True
    perfect_ok: bool = False
    """The reference patch resolves the task."""
    hidden_ok: bool = False
    """No FAIL_TO_PASS test is in the starting workspace: each is missing there until test_patch."""
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.trivial_ok and self.perfect_ok and self.hidden_ok


async def _build(task: Task, dest: Path, cache_dir: Path | None) -> Path:
    root = materialize(task, dest, cache_dir=cache_dir)
    await run_setup(task, root)
    return root


async def verify_task(task: Task, scratch: Path, *, cache_dir: Path | None = None,
                      timeout_s: float = 600) -> Verdict:
    """Builds the task twice under `scratch` (removed after): untouched, and with its reference
    patch; grades both."""
    verdict = Verdict(task.instance_id)
    started = time.perf_counter()
    base = scratch / task.instance_id
    try:
        root = await _build(task, base / "trivial", cache_dir)
        before = await run_tests(task, root, task.FAIL_TO_PASS, timeout_s=timeout_s)
        verdict.hidden_ok = all(o == MISSING for o in before.outcomes.values())
        if not verdict.hidden_ok:
            verdict.problems.append("FAIL_TO_PASS tests run before test_patch: they are not hidden")
        trivial = await evaluate(task, root, timeout_s=timeout_s)
        f2p_failing = trivial["fail_to_pass"].startswith("0/")
        p2p_passing = all(t not in trivial["failing"] for t in task.PASS_TO_PASS)
        verdict.trivial_resolved = trivial["resolved"]
        verdict.trivial_ok = f2p_failing and p2p_passing
        if not verdict.trivial_ok:
            verdict.problems.append(f"untouched: FAIL_TO_PASS passing {trivial['fail_to_pass']}, "
                                    f"PASS_TO_PASS passing {trivial['pass_to_pass']}")
        root = await _build(task, base / "perfect", cache_dir)
        apply_patch(root, task.patch, "patch")
        perfect = await evaluate(task, root, timeout_s=timeout_s)
        verdict.perfect_ok = perfect["resolved"]
        if not verdict.perfect_ok:
            verdict.problems.append(f"reference patch: failing {perfect['failing'][:5]}")
    except TaskError as err:
        verdict.problems.append(str(err)[:500])
    finally:
        shutil.rmtree(base, ignore_errors=True)
        verdict.seconds = round(time.perf_counter() - started, 2)
    return verdict
