"""The bug-fix family (training/bugfix.py, training/testprobe.py): the in-process probe, the
frozen splits (disjoint functions, sizes, levels), the requests each level writes, the committed
files against a regeneration, and a few tasks graded in the sandbox.
Run: .venv/bin/python -m pytest tests/training/test_bugfix.py"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from training import bugfix
from training.eval.verify import verify_task
from training.tasks import load_tasks, materialize
from training.testprobe import OutOfFuel, Probe, probe

ROOT = Path(__file__).resolve().parents[2]

MODULE = '''\
def half(x):
    return x // 2


def spin(n):
    while n != 0:
        n -= 2
    return n


def check(x):
    if x < 0:
        raise ValueError("negative")
    return x
'''

TESTS = '''\
import pytest

from pkg.mod import check, half, spin

DATA = []


def test_half():
    assert half(4) == 2
    assert half(9) == 4


def test_spin():
    assert spin(4) == 0


def test_check():
    DATA.append(1)
    assert DATA == [1]
    with pytest.raises(ValueError):
        check(-1)
'''


@pytest.fixture(scope="module")
def heldout():
    return load_tasks(bugfix.suite_path("heldout"))


@pytest.fixture(scope="module")
def train():
    return load_tasks(bugfix.suite_path("train"))


def test_probe_passes_the_original_and_describes_each_failure():
    assert probe("pkg", "mod", MODULE, TESTS) == {"test_half": None, "test_spin": None, "test_check": None}
    results = probe("pkg", "mod", MODULE.replace("x // 2", "x // 3").replace("if x < 0", "if x < -5"), TESTS)
    assert results["test_half"].statement == "assert half(4) == 2"
    assert results["test_half"].call == "half(4)" and results["test_half"].actual == "returns 1"
    assert results["test_check"].actual == "does not raise ValueError"
    assert results["test_check"].statement == "with pytest.raises(ValueError):\n    check(-1)"
    raised = probe("pkg", "mod", MODULE.replace("return x // 2", "return x // 0"), TESTS)["test_half"]
    assert raised.actual == "raises ZeroDivisionError: integer division or modulo by zero"


def test_probe_runs_each_test_fresh_and_stops_endless_loops():
    tests = Probe("pkg", "mod", TESTS)
    assert tests.run(MODULE)["test_check"] is None
    assert tests.run(MODULE)["test_check"] is None  # DATA starts empty again
    with pytest.raises(OutOfFuel):
        tests.run(MODULE.replace("n -= 2", "n -= 3"))  # spin(4) never reaches 0
    assert "pkg.mod" not in sys.modules


def test_splits_are_disjoint_by_function_and_module(train, heldout):
    train_functions = {t.metadata["function"] for t in train}
    heldout_functions = {t.metadata["function"] for t in heldout}
    assert not train_functions & heldout_functions
    modules = {split: {f.rsplit(".", 1)[0] for f in fs} for split, fs in
               (("train", train_functions), ("heldout", heldout_functions))}
    assert modules["heldout"] == set(bugfix.HELDOUT_MODULES) and not modules["train"] & modules["heldout"]
    for task in heldout:  # no train code in a held-out workspace and the other way round
        assert {p.split("/")[0] for p in task.source.files if p.endswith(".py") and "/" in p} <= {
            "tests", *(m.split(".")[0] for m in bugfix.HELDOUT_MODULES)}
    assert len(heldout) >= 100 and len(heldout_functions) >= 50 and len(train) >= 300
    assert all(t.metadata["split"] == "heldout" for t in heldout) and all(t.metadata["split"] == "train" for t in train)


def test_levels_and_kinds_are_spread(train, heldout):
    for tasks in (train, heldout):
        levels = Counter(t.metadata["level"] for t in tasks)
        assert set(levels) == {0, 1, 2} and max(levels.values()) - min(levels.values()) <= 1
        kinds = Counter(t.metadata["mutation"]["kind"] for t in tasks)
        assert len(kinds) >= 7 and max(kinds.values()) < len(tasks) / 3


def test_each_level_says_what_it_should(heldout):
    for task in heldout:
        text, meta = task.problem_statement, task.metadata
        path = meta["mutation"]["path"]
        function = meta["function"].rsplit(".", 1)[1]
        assert meta["check"]["statement"] in text and meta["check"]["actual"] in text
        assert (f"def {function}(" in text) == (meta["level"] == 0), task.instance_id
        assert (path in text) == (meta["level"] < 2), task.instance_id
        assert meta["mutation"]["new"] in text or meta["level"] > 0  # level 0 quotes the broken code
        fixed_line = next(line[1:] for line in task.patch.splitlines() if line.startswith("+") and not line.startswith("+++"))
        assert fixed_line.strip() not in text  # never the fix


def test_workspace_hides_the_failing_tests_and_builds_offline(heldout, tmp_path):
    task = heldout[0]
    assert task.source.kind == "inline" and task.test_patch
    root = materialize(task, tmp_path / "ws")
    visible = (root / task.FAIL_TO_PASS[0].split("::")[0]).read_text()
    for test_id in task.FAIL_TO_PASS:
        assert f"def {test_id.split('::')[-1]}(" not in visible
        assert f"def {test_id.split('::')[-1]}(" in task.test_patch
    for test_id in task.PASS_TO_PASS:
        assert f"def {test_id.split('::')[-1]}(" in visible
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and ".git" not in p.parts) == sorted(task.source.files)


async def test_reference_patches_resolve_and_untouched_workspaces_fail(heldout, train, tmp_path):
    """A few gradings in the sandbox (bench/suites.py grades every task)."""
    picked = [next(t for t in heldout if t.metadata["level"] == level) for level in (0, 1, 2)] + [train[-1]]
    for task in picked:
        verdict = await verify_task(task, tmp_path)
        assert verdict.ok and not verdict.trivial_resolved, (task.instance_id, verdict.problems)


def test_corpus_rules_are_enforced(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(MODULE)
    (tmp_path / "tests" / "test_mod.py").write_text(TESTS.replace("def test_spin", "def spin_check"))
    with pytest.raises(bugfix.BugfixError, match="no test_spin"):
        bugfix.generate("train", corpus=tmp_path)
    (tmp_path / "tests" / "test_mod.py").write_text(TESTS.replace("== 2", "== 3"))
    with pytest.raises(bugfix.BugfixError, match="test_half fails on the unbroken module"):
        bugfix.generate("train", corpus=tmp_path)
    (tmp_path / "tests" / "test_mod.py").write_text(TESTS)
    tasks = bugfix.generate("train", corpus=tmp_path, all_levels=True)
    assert tasks and [t.metadata["level"] for t in tasks[:3]] == [0, 1, 2]
    assert tasks == bugfix.generate("train", corpus=tmp_path, all_levels=True)  # deterministic
    assert tasks != bugfix.generate("train", corpus=tmp_path, all_levels=True, seed=1)


def test_pooled_seeds_add_distinct_bugs_of_the_same_functions(train):
    tasks = bugfix.pooled("train", [0, 1])
    assert tasks[:len(train)] == train  # seed 0's split first, as committed
    more = tasks[len(train):]
    assert more and {t.metadata["seed"] for t in more} == {1}
    ids = [t.instance_id.rsplit("__", 1)[0] for t in tasks]
    assert len(ids) == len(set(ids))  # no bug twice, whatever its level
    assert {t.metadata["function"] for t in more} <= {t.metadata["function"] for t in train}
    assert {t.metadata["split"] for t in tasks} == {"train"}
    refused = subprocess.run([sys.executable, "-m", "training.bugfix", "--seed", "1"], capture_output=True,
                             text=True, cwd=ROOT, timeout=60)
    assert refused.returncode == 2 and "--out" in refused.stderr  # the committed splits stay seed 0's


@pytest.mark.slow
def test_committed_splits_equal_a_regeneration():
    done = subprocess.run([sys.executable, "-m", "training.bugfix", "--check"], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


async def test_verification_catches_visible_tests_and_wrong_references(heldout, tmp_path):
    task = heldout[0]
    visible = await verify_task(dataclasses.replace(task, test_patch=""), tmp_path)
    assert not visible.hidden_ok and not visible.ok
    wrong = await verify_task(dataclasses.replace(task, patch=task.source.patch.split("diff --git")[0]), tmp_path)
    assert wrong.hidden_ok and wrong.trivial_ok and not wrong.perfect_ok and not wrong.ok
