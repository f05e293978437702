"""Task generation: the mutation operators (exact-span edits, byte-identical elsewhere), diffs
that `git apply` takes, problem statements that show the symptom and not the change, and (slow)
`python -m training.taskgen` on two real PyPI packages from their committed sdists, whose tasks
must hold up: the broken workspace fails exactly FAIL_TO_PASS and passes PASS_TO_PASS, and the
gold patch makes everything pass, with the failing tests hidden from the workspace. The curated
set is checked the same way.
Run: .venv/bin/python -m pytest tests/training/test_taskgen.py"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from training.eval.verify import verify_task
from training.mutations import find_mutations, parses
from training.patches import file_diff
from training.taskgen import problem_statement, related_tests, statement_lines
from training.tasks import Task, apply_patch, load_tasks

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
CURATED = ROOT / "training" / "data" / "tasks" / "curated.jsonl"

SOURCE = '''\
"""Docstring with 1 < 2 in it."""
LIMIT = 10


def clip(xs, lo=0, hi=LIMIT):
    """Keeps values in range: 3 > 2."""
    out = []
    for i in range(len(xs)):
        if xs[i] >= lo and not xs[i] > hi:  # comment ü
            out.append(xs[i] + 1)
    total = 0
    total += len(out)
    sep = ","
    print(f"{sep},{total}", "x", sep * 10, flush=False)
    return out[:total]


class Box:
    def has(self, item):
        return item in self.items

    def ok(self):
        return True

    def gen(self):
        yield divmod(self.a, self.b)
'''


def by_kind(mutations):
    found: dict[str, list[tuple[str, str, str]]] = {}
    for m in mutations:
        found.setdefault(m.kind, []).append((m.function, m.old, m.new))
    return found


def test_mutations_cover_every_kind_inside_functions_only():
    data = SOURCE.encode()
    mutations = find_mutations(data, "pkg/mod.py")
    kinds = by_kind(mutations)
    assert ("clip", ">=", ">") in kinds["wrong_comparison"] and ("clip", "+=", "-=") in kinds["operator_swap"]
    assert ("clip", "and", "or") in kinds["operator_swap"] and ("Box.has", "in", "not in") in kinds["wrong_comparison"]
    assert ("clip", "1", "2") in kinds["off_by_one"] and ("clip", "len(xs)", "len(xs) + 1") in kinds["off_by_one"]
    assert ("clip", "total", "total - 1") in kinds["off_by_one"]
    assert ("clip", "not xs[i] > hi", "xs[i] > hi") in kinds["missing_negation"]
    src = "def f(a, b):\n    return not (a or b)\n"
    assert [m.new for m in find_mutations(src, "m.py") if m.kind == "dropped_condition"] == ["a", "b"]
    assert [m.new for m in find_mutations(src, "m.py") if m.kind == "missing_negation"] == ["(a or b)"]
    assert ("clip", "xs[i] >= lo and not xs[i] > hi", "xs[i] >= lo") in kinds["dropped_condition"]
    assert ("Box.ok", "True", "False") in kinds["wrong_return"] and ("Box.has", "item in self.items", "None") in kinds["wrong_return"]
    assert ("Box.gen", "self.a, self.b", "self.b, self.a") in kinds["swapped_args"]
    assert not any(m.function == "Box.gen" and m.kind == "wrong_return" for m in mutations)  # generators
    assert ("clip", "10", "20") in kinds["wrong_constant"] and ("clip", '","', '";"') in kinds["wrong_constant"]
    assert ("clip", "False", "True") in kinds["wrong_constant"]
    assert not any(m.kind == "wrong_constant" and m.function == "Box.ok" for m in mutations)  # wrong_return's
    strings = [old for _, old, _ in kinds["wrong_constant"] if old.startswith('"')]
    assert strings == ['","']  # not the f-string's "," nor other strings
    assert all(m.line >= 5 for m in mutations)  # not the module docstring, LIMIT, or defaults
    for m in mutations:
        broken = m.apply(data)
        assert parses(m, data) and ast.dump(ast.parse(broken)) != ast.dump(ast.parse(data))
        assert broken[: m.start] == data[: m.start] and broken[m.start + len(m.new.encode()):] == data[m.end:]
    assert "# comment \u00fc" in mutations[-1].apply(data).decode()  # byte offsets survive non-ASCII


def test_apply_refuses_a_different_file():
    m = find_mutations(SOURCE.encode(), "pkg/mod.py")[0]
    with pytest.raises(ValueError, match="expected"):
        m.apply(("# a new first line\n" + SOURCE).encode())


def test_file_diff_is_git_applyable_both_ways(tmp_path):
    old, new = "a\nb\nc", "a\nB\nc"  # no newline at the end
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(old)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    apply_patch(tmp_path, file_diff("pkg/m.py", old, new))
    assert (tmp_path / "pkg" / "m.py").read_text() == new
    apply_patch(tmp_path, file_diff("pkg/m.py", new, old))
    assert (tmp_path / "pkg" / "m.py").read_text() == old


def test_statement_keeps_test_frames_and_errors_but_not_library_code():
    block = [
        "tests/test_m.py:10: in test_clip",
        "    assert clip([1, 2]) == [2, 3]",
        "pkg/mod.py:9: in clip",
        "    if xs[i] >= lo and xs[i] > hi:",
        "E   assert [] == [2, 3]",
        "E     at 0x7f3a2b1c9d00",
    ]
    changed = {"if xs[i] >= lo and xs[i] > hi:", "if xs[i] >= lo and not xs[i] > hi:"}
    lines = statement_lines(block, {"tests/test_m.py"}, changed)
    assert lines == ["tests/test_m.py:10: in test_clip", "    assert clip([1, 2]) == [2, 3]",
                     "E   assert [] == [2, 3]", "E     at 0x..."]
    output = "\n".join(["=== FAILURES ===", "____ test_clip ____", *block, "=== short test summary info ==="])
    text = problem_statement("pkg", "1.0", ["tests/test_m.py::test_clip", "tests/test_m.py::test_b"], output,
                             {"tests/test_m.py"}, changed)
    assert "`tests/test_m.py::test_clip` fails in pkg 1.0" in text and "1 other test fails" in text
    assert "pkg/mod.py" not in text and not any(c in text for c in changed)
    assert problem_statement("pkg", "1.0", ["tests/test_m.py::test_x"], output, {"tests/test_m.py"}, changed) is None


def test_related_tests_match_function_and_class_names():
    m = next(m for m in find_mutations(SOURCE.encode(), "pkg/mod.py") if m.function == "Box.has")
    refs = {"t.py::test_box": {"Box", "x"}, "t.py::test_has": {"has"}, "t.py::test_other": {"clip"}}
    assert related_tests(m, ["t.py::test_box[1]", "t.py::test_has", "t.py::test_other"], refs) == [
        "t.py::test_box[1]", "t.py::test_has"]


async def check_task(task: Task, tmp: Path) -> None:
    """The task holds up (training/eval/verify.py): the FAIL_TO_PASS tests are hidden, the broken
    workspace fails exactly them and passes PASS_TO_PASS, the gold patch makes everything pass;
    the statement shows no changed line."""
    verdict = await verify_task(task, tmp, cache_dir=DATA)
    assert verdict.ok and not verdict.trivial_resolved, (task.instance_id, verdict.problems)
    changed = {line[1:].strip() for line in task.patch.splitlines()
               if line[:1] in "+-" and not line.startswith(("+++", "---")) and len(line[1:].strip()) >= 4}
    assert changed and not any(c in task.problem_statement for c in changed), task.instance_id
    assert "not in the checkout" in task.problem_statement
    assert task.metadata["mutation"]["old"] not in ("", task.metadata["mutation"]["new"])


@pytest.mark.slow
@pytest.mark.parametrize(("package", "sdist"), [("toolz", "toolz-1.2.0.tar.gz"),
                                                ("more-itertools", "more_itertools-11.2.1.tar.gz")])
async def test_taskgen_cli_makes_valid_tasks_from_a_real_package(tmp_path, package, sdist):
    out = tmp_path / "tasks.jsonl"
    done = subprocess.run([sys.executable, "-m", "training.taskgen", "--package", package, "--sdist", str(DATA / sdist),
                           "--out", str(out), "--max-tasks", "2", "--seed", "7", "--p2p", "8"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["kept"] == 2 and summary["tried"] >= 2 and summary["candidates"] > 100
    tasks = load_tasks(out)
    assert len(tasks) == 2 and all(t.source.name == package and t.source.patch for t in tasks)
    assert len({t.metadata["mutation"]["function"] for t in tasks}) == 2
    for task in tasks:
        await check_task(task, tmp_path)


@pytest.mark.slow
async def test_curated_tasks_hold_up(tmp_path):
    for task in load_tasks(CURATED):
        await check_task(task, tmp_path)
