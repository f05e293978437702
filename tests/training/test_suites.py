"""Benchmark suites (training/eval/suite.py): the manifest format and its errors, the shipped
suites (sizes, pinned sources, hidden tests, helpers borne out by the reference patch), the
hand-written requests against a rebuild of their source, and one task of each kind graded in the
sandbox (bench/suites.py grades every task).
Run: .venv/bin/python -m pytest tests/training/test_suites.py"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from training.eval import handwritten
from training.eval.adherence import check_helpers
from training.eval.suite import SuiteError, load_suite, suite_names
from training.eval.verify import verify_task
from training.tasks import load_tasks, materialize

DATA = Path(__file__).parent / "data"
SUITES = Path(__file__).resolve().parents[2] / "training" / "data" / "suites"

MANIFEST = '''\
name = "mini"
description = "two tasks"
tasks = "mini.jsonl"
difficulty = "easy"

[budget]
max_steps = 4
max_tokens_per_step = 128
max_tokens = 256
temperature = 0.0
seeds = [0, 1]
timeout_s = 60

[scores]
perfect = 1.0
trivial = 0.0
'''


def top_level(line: str) -> str:
    """The manifest with a top-level key added (before its first table)."""
    return MANIFEST.replace("[budget]", f"{line}\n\n[budget]")


def write_suite(folder: Path, text: str = MANIFEST, name: str = "mini") -> Path:
    (folder / "mini.jsonl").write_text("".join(
        (SUITES / "bugfix-heldout.jsonl").read_text().splitlines(keepends=True)[:2]))
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def test_a_manifest_fixes_the_budget_and_names_its_tasks(tmp_path):
    path = write_suite(tmp_path)
    suite = load_suite("mini", folder=tmp_path)
    assert suite == load_suite(path)
    assert suite.budget.max_steps == 4 and suite.budget.seeds == (0, 1) and suite.budget.temperature == 0.0
    assert suite.perfect == 1.0 and suite.trivial == 0.0 and not suite.full_run
    assert len(suite.tasks()) == 2 and suite_names(tmp_path) == ["mini"]
    picked = write_suite(tmp_path, top_level(f'instances = ["{suite.tasks()[1].instance_id}"]'))
    assert [t.instance_id for t in load_suite(picked).tasks()] == [suite.tasks()[1].instance_id]


@pytest.mark.parametrize(("change", "words"), [
    (lambda t: t.replace("max_steps = 4\n", ""), "field 'budget': 'max_steps' is a required property"),
    (lambda t: t.replace("seeds = [0, 1]", "seeds = []"), "field 'budget/seeds'"),
    (lambda t: t.replace("temperature = 0.0", "temperature = -1"), "field 'budget/temperature'"),
    (lambda t: t + "colour = 'red'\n", "'colour' was unexpected"),
    (lambda t: t.replace('name = "mini"', 'name = "other"'), "field 'name': 'other' is not the file's name 'mini'"),
    (lambda t: t.replace('tasks = "mini.jsonl"', 'tasks = "gone.jsonl"'), "field 'tasks'"),
    (lambda t: t.replace("[scores]", "[scores"), "not valid TOML"),
])
def test_a_bad_manifest_is_named_with_its_field(tmp_path, change, words):
    path = write_suite(tmp_path, change(MANIFEST))
    with pytest.raises(SuiteError, match=r"mini\.toml") as err:
        load_suite(path)
    assert words in str(err.value)


def test_unknown_suites_and_instances_are_refused(tmp_path):
    write_suite(tmp_path)
    with pytest.raises(SuiteError, match="no suite 'nope': the suites are mini"):
        load_suite("nope", folder=tmp_path)
    path = write_suite(tmp_path, top_level('instances = ["not-a-task"]'))
    with pytest.raises(SuiteError, match="instance 'not-a-task' is not in"):
        load_suite(path).tasks()


def test_the_shipped_suites_are_what_the_issue_asks_for():
    assert {"taskgen", "requests", "bugfix-train", "bugfix-heldout"} <= set(suite_names())
    suites = {name: load_suite(name) for name in suite_names()}
    assert {n for n, s in suites.items() if s.full_run} == {"taskgen", "requests", "bugfix-heldout"}
    taskgen = suites["taskgen"].tasks()
    packages = Counter(t.source.name for t in taskgen)
    assert len(taskgen) >= 30 and len(packages) >= 3
    assert all(t.source.kind == "pypi" and t.source.version and len(t.source.sha256 or "") == 64 for t in taskgen)
    requests = suites["requests"].tasks()
    assert len(requests) >= 10 and {t.metadata["kind"] for t in requests} == {"feature", "refactor"}
    for task in [*taskgen, *requests, *suites["bugfix-heldout"].tasks()]:
        assert task.patch and task.test_patch, task.instance_id
        for test_id in task.FAIL_TO_PASS:  # each grading test comes back with test_patch
            name = test_id.split("[")[0].split("::")[-1]
            assert f"+    def {name}(" in task.test_patch or f"+def {name}(" in task.test_patch, test_id
    assert all(s.perfect == 1.0 and s.trivial == 0.0 for s in suites.values())


def test_requests_equal_a_rebuild_of_their_source():
    assert handwritten.build(cache_dir=DATA) == load_tasks(handwritten.OUT)


@pytest.mark.slow
def test_requests_helpers_are_borne_out_by_the_reference(tmp_path):
    for task in load_suite("requests").tasks():
        root = materialize(task, tmp_path / task.instance_id, cache_dir=DATA)
        assert check_helpers(task, root) == [], task.instance_id


@pytest.mark.slow
@pytest.mark.parametrize("suite", ["taskgen", "requests"])
async def test_one_task_of_each_suite_grades_in_the_sandbox(tmp_path, suite):
    task = next(t for t in load_suite(suite).tasks() if t.source.name == "toolz")
    verdict = await verify_task(task, tmp_path, cache_dir=DATA)
    assert verdict.ok and not verdict.trivial_resolved, verdict.problems
