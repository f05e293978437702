"""The task loader (SWE-bench lines accepted, malformed ones rejected naming line and field),
building workspaces from each source kind, pytest summary parsing and grading, and the curated
task set. Run: .venv/bin/python -m pytest tests/training/test_tasks.py"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from add_task import add_task_line

from training.envs import Base, Environment
from training.tasks import (
    DEFAULT_TEST_CMD,
    MISSING,
    Source,
    Task,
    TaskError,
    TaskGrade,
    apply_patch,
    base_spec,
    grade,
    load_tasks,
    materialize,
    parse_pytest_summary,
    parse_task,
    protected_paths,
    run_tests,
    write_tasks,
)

DATA = Path(__file__).parent / "data"
CURATED = Path(__file__).resolve().parents[2] / "training" / "data" / "tasks" / "curated.jsonl"

SWE_BENCH_LINE = {
    "repo": "astropy/astropy",
    "instance_id": "astropy__astropy-12907",
    "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
    "patch": "diff --git a/astropy/modeling/separable.py b/astropy/modeling/separable.py\n--- a/x\n+++ b/x\n",
    "test_patch": "diff --git a/astropy/modeling/tests/test_separable.py b/astropy/modeling/tests/test_separable.py\n",
    "problem_statement": "Modeling's `separability_matrix` does not compute separability correctly for nested CompoundModels",
    "hints_text": "",
    "created_at": "2022-03-03T15:14:54Z",
    "version": "4.3",
    "FAIL_TO_PASS": "[\"astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]\"]",
    "PASS_TO_PASS": "[\"astropy/modeling/tests/test_separable.py::test_coord_matrix\", \"astropy/modeling/tests/test_separable.py::test_cdot\"]",
    "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752",
    "difficulty": "15 min - 1 hour",
}


def write_lines(path: Path, *objs) -> Path:
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs))
    return path


def test_loader_accepts_a_swe_bench_line_with_json_string_lists(tmp_path):
    (task,) = load_tasks(write_lines(tmp_path / "t.jsonl", SWE_BENCH_LINE))
    assert task.instance_id == "astropy__astropy-12907" and task.version == "4.3"
    assert task.FAIL_TO_PASS == ("astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]",)
    assert len(task.PASS_TO_PASS) == 2
    assert task.source.kind == "git" and task.source.url == "https://github.com/astropy/astropy.git"
    assert task.source.commit == SWE_BENCH_LINE["base_commit"]
    assert task.extra["hints_text"] == "" and task.extra["difficulty"] == "15 min - 1 hour"
    assert task.test_cmd == DEFAULT_TEST_CMD
    again = parse_task(task.to_json())  # round trip, lists now real JSON lists
    assert again == task and isinstance(task.to_json()["FAIL_TO_PASS"], list)


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"problem_statement": None}, "problem_statement", "is a required property"),
    ({"FAIL_TO_PASS": "not json"}, "FAIL_TO_PASS", "JSON list"),
    ({"FAIL_TO_PASS": "{\"a\": 1}"}, "FAIL_TO_PASS", "not a JSON list"),
    ({"FAIL_TO_PASS": []}, "FAIL_TO_PASS", "at least one"),
    ({"FAIL_TO_PASS": 5}, "FAIL_TO_PASS", "must be a list of test ids or a JSON string of one, got 5"),
    ({"PASS_TO_PASS": [1, 2]}, "PASS_TO_PASS/0", "1 is not of type 'string'"),
    ({"source": {"kind": "zip", "path": "x"}}, "source/kind", "'zip' is not one of"),
    ({"source": {"kind": "pypi", "name": "toolz"}}, "source/version", "'version' is a required property"),
    ({"source": {"kind": "dir", "path": "x", "branch": "main"}}, "source", "'branch' was unexpected"),
    ({"setup": "pip install -e ."}, "setup", "is not of type 'array'"),
    ({"instance_id": "has spaces"}, "instance_id", "does not match"),
    ({"repo": None, "base_commit": None}, "(task)", "needs a 'source', or 'repo' and 'base_commit'"),
])
def test_loader_rejects_malformed_lines_naming_line_and_field(tmp_path, change, field, words):
    bad = {k: v for k, v in {**SWE_BENCH_LINE, **change}.items() if v is not None}
    good = {**SWE_BENCH_LINE, "instance_id": "ok-1"}
    path = write_lines(tmp_path / "t.jsonl", good, "", bad)
    with pytest.raises(TaskError) as err:
        load_tasks(path)
    message = str(err.value)
    assert f"{path}:3" in message and f"field '{field}'" in message and words in message, message


def test_loader_rejects_bad_json_duplicates_and_non_objects(tmp_path):
    with pytest.raises(TaskError, match=r"t\.jsonl:2: not valid JSON"):
        load_tasks(write_lines(tmp_path / "t.jsonl", SWE_BENCH_LINE, "{oops"))
    with pytest.raises(TaskError, match=r"t\.jsonl:2: field 'instance_id': 'astropy__astropy-12907' repeats line 1"):
        load_tasks(write_lines(tmp_path / "t.jsonl", SWE_BENCH_LINE, SWE_BENCH_LINE))
    with pytest.raises(TaskError, match=r"t\.jsonl:1: a task must be a JSON object, got list"):
        load_tasks(write_lines(tmp_path / "t.jsonl", "[1, 2]"))


def test_test_command_quotes_ids():
    task = parse_task({**SWE_BENCH_LINE, "test_cmd": "pytest -rA {tests} -x"})
    assert task.test_command(["a.py::t[x y]", "b.py::u"]) == "pytest -rA 'a.py::t[x y]' b.py::u -x"
    plain = parse_task({**SWE_BENCH_LINE, "test_cmd": "pytest"})
    assert plain.test_command(["a.py::t"]) == "pytest a.py::t"


def test_pytest_summary_parsing_counts_subtests_and_teardown_errors():
    output = "\n".join([
        "PASSED t.py::T::test_a",
        "SUBFAILED(i=0) t.py::T::test_a - AssertionError: 0 != 1",
        "PASSED t.py::test_b[a - b]",
        "FAILED t.py::test_c[x - y] - assert 1 == 2",
        "PASSED t.py::test_d",
        "ERROR t.py::test_d - RuntimeError: teardown",
        "XFAIL t.py::test_e - reason",
        "ERROR t.py - ImportError: no module",
        "SKIPPED [1] t.py:3: skipped",
    ])
    assert parse_pytest_summary(output) == {
        "t.py::T::test_a": "failed", "t.py::test_b[a - b]": "passed", "t.py::test_c[x - y]": "failed",
        "t.py::test_d": "failed", "t.py::test_e": "passed",
    }


def _dir_task(tmp_path: Path, **fields) -> Task:
    line = add_task_line(tmp_path, **fields)
    (task,) = load_tasks(write_lines(tmp_path / "tasks.jsonl", line))
    return task


async def open_env(root: Path, tmp_path: Path) -> Environment:
    """An environment on the directory `root` as it is (state kept under tmp_path)."""
    return await Environment.create(Base.from_dir(root), state_dir=tmp_path / "state")


async def test_dir_task_builds_fails_then_passes_with_the_gold_patch(tmp_path):
    task = _dir_task(tmp_path)
    assert task.source.path == str(tmp_path / "src")  # relative to the tasks file
    root = materialize(task, tmp_path / "ws")
    assert "a - b" in (root / "pkg" / "__init__.py").read_text()
    status = subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == ""  # the bug is committed: `git diff` shows the agent nothing
    async with await open_env(root, tmp_path) as env:
        run = await run_tests(task, env)
        assert run.outcomes == {"test_pkg.py::test_add": "failed", "test_pkg.py::test_zero": "passed"}
        broken = grade(task, run.outcomes)
        assert broken.resolved is False and broken.counts() == {"fail_to_pass": "0/1", "pass_to_pass": "1/1"}
        assert (await env.apply(task.patch)).exit_code == 0
        fixed = grade(task, (await run_tests(task, env)).outcomes)
    assert fixed.resolved is True and fixed.fail_to_pass == {"test_pkg.py::test_add": "passed"}
    assert TaskGrade.from_json(fixed.to_json()) == fixed and fixed.outcome()["reward"] == 1.0
    again = materialize(task, tmp_path / "ws2")  # deterministic starting commit
    head = [subprocess.run(["git", "-C", str(r), "rev-parse", "HEAD"], capture_output=True, text=True).stdout for r in (root, again)]
    assert head[0] == head[1]


async def test_missing_tests_and_bad_patches(tmp_path):
    task = _dir_task(tmp_path)
    root = materialize(task, tmp_path / "ws")
    async with await open_env(root, tmp_path) as env:
        run = await run_tests(task, env, ["test_pkg.py::test_nope"])
    assert run.outcomes == {"test_pkg.py::test_nope": MISSING}
    with pytest.raises(TaskError, match="test_patch does not apply"):
        apply_patch(root, task.patch.replace("a - b", "a * b"), "test_patch")
    with pytest.raises(TaskError, match="not empty"):
        materialize(task, root)


def test_git_source_checks_out_the_commit(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    env = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("one\n")
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), *env, "commit", "-qm", "1"], check=True)
    first = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    (repo / "a.txt").write_text("two\n")
    subprocess.run(["git", "-C", str(repo), *env, "commit", "-qam", "2"], check=True)
    task = parse_task({"instance_id": "g-1", "problem_statement": "p", "FAIL_TO_PASS": ["x"],
                       "source": {"kind": "git", "url": str(repo), "commit": first}})
    root = materialize(task, tmp_path / "ws")
    assert (root / "a.txt").read_text() == "one\n"


def test_pypi_source_uses_the_cached_sdist_and_checks_its_hash(tmp_path):
    line = {"instance_id": "p-1", "problem_statement": "p", "FAIL_TO_PASS": ["x"],
            "source": {"kind": "pypi", "name": "toolz", "version": "1.2.0", "sha256": "0" * 64}}
    with pytest.raises(TaskError, match="sha256"):
        materialize(parse_task(line), tmp_path / "ws", cache_dir=DATA)
    line["source"].pop("sha256")
    root = materialize(parse_task(line), tmp_path / "ws2", cache_dir=DATA)
    assert (root / "toolz" / "itertoolz.py").is_file() and (root / ".git").is_dir()


def test_write_tasks_round_trips(tmp_path):
    task = parse_task(SWE_BENCH_LINE)
    write_tasks(tmp_path / "out.jsonl", [task])
    assert load_tasks(tmp_path / "out.jsonl") == [task]


def test_curated_set_loads_and_spans_two_packages():
    tasks = load_tasks(CURATED)
    assert len(tasks) >= 10
    packages = {t.source.name for t in tasks}
    assert len(packages) >= 2 and all(t.source.kind == "pypi" for t in tasks)
    for task in tasks:
        assert task.FAIL_TO_PASS and task.patch.startswith("diff --git ") and task.source.patch


INLINE_FILES = {"pkg/__init__.py": "def add(a, b):\n    return a + b\n",
                "tests/test_pkg.py": "from pkg import add\n\ndef test_add():\n    assert add(2, 3) == 5\n"}


async def test_inline_source_writes_its_files_and_grades(tmp_path):
    bug = ("diff --git a/pkg/__init__.py b/pkg/__init__.py\n--- a/pkg/__init__.py\n+++ b/pkg/__init__.py\n"
           "@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a + b\n+    return a - b\n")
    line = {"instance_id": "inline-1", "problem_statement": "add(2, 3) is -1", "FAIL_TO_PASS": ["tests/test_pkg.py::test_add"],
            "source": {"kind": "inline", "files": INLINE_FILES, "patch": bug},
            "test_cmd": "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 " + DEFAULT_TEST_CMD}
    (task,) = load_tasks(write_lines(tmp_path / "t.jsonl", line))
    assert task.source.files == INLINE_FILES and parse_task(task.to_json()) == task
    root = materialize(task, tmp_path / "ws")
    assert (root / "pkg" / "__init__.py").read_text() == "def add(a, b):\n    return a - b\n"
    status = subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == ""
    async with await open_env(root, tmp_path) as env:
        assert grade(task, (await run_tests(task, env)).outcomes).resolved is False
    again = materialize(task, tmp_path / "ws2")  # the same starting commit every time
    heads = [subprocess.run(["git", "-C", str(r), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
             for r in (root, again)]
    assert heads[0] == heads[1]


@pytest.mark.parametrize("path", ["/etc/passwd", "../up.py", "a/../../b.py", ".git/config", "a/.git/hooks/x", "a\\b.py", "dir/"])
def test_inline_source_rejects_paths_outside_the_workspace(tmp_path, path):
    line = {"instance_id": "inline-2", "problem_statement": "p", "FAIL_TO_PASS": ["x"],
            "source": {"kind": "inline", "files": {path: "x"}}}
    with pytest.raises(TaskError, match="field 'source/files'"):
        parse_task(line)
    with pytest.raises(TaskError, match="not a relative path inside the workspace"):
        materialize(Task(instance_id="i", problem_statement="p", FAIL_TO_PASS=("x",),
                         source=Source(kind="inline", files={path: "x"})), tmp_path / "ws")
    assert not (tmp_path / "ws").exists() or not any((tmp_path / "ws").rglob("*"))


def test_inline_source_needs_files():
    line = {"instance_id": "inline-3", "problem_statement": "p", "FAIL_TO_PASS": ["x"], "source": {"kind": "inline"}}
    with pytest.raises(TaskError, match="'files' is a required property"):
        parse_task(line)


async def test_the_base_of_a_task_is_its_materialized_workspace(tmp_path):
    task = _dir_task(tmp_path, test_patch="diff --git a/tests/test_new.py b/tests/test_new.py\n")
    spec = base_spec(task)
    assert spec.key == "dir-1" and spec.digest == base_spec(task).digest
    other = parse_task(task.to_json() | {"source": task.source.to_json() | {"patch": ""}})
    assert base_spec(other).digest != spec.digest  # another starting state, another base
    base = await Base.build(spec, tmp_path / "bases")
    root = materialize(task, tmp_path / "ws")
    for rel in ("pkg/__init__.py", "test_pkg.py"):
        assert (base.path / rel).read_bytes() == (root / rel).read_bytes()
    assert protected_paths(task) == {"test_pkg.py", "tests/test_new.py"}
