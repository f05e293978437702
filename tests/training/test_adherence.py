"""Adherence (training/eval/adherence.py) on constructed patches over a small workspace: calling
the helper beats re-implementing it, touching unrelated functions strays further, a lint finding
is counted, an empty patch scores 0; and the helpers a task names are checked against the
reference patch's syntax tree.
Run: .venv/bin/python -m pytest tests/training/test_adherence.py"""

from __future__ import annotations

from pathlib import Path

import pytest

from training.eval.adherence import (
    AdherenceError,
    adherence,
    changed_scopes,
    check_helpers,
    patched_files,
)
from training.patches import file_diff
from training.tasks import Source, Task

UTIL = '''\
def clamp(x, lo, hi):
    """x limited to [lo, hi]."""
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def other(x):
    return x + 1
'''

MOD = '''\
from pkg.util import clamp


def scale(xs, factor):
    return [x * factor for x in xs]


def unrelated(y):
    return y * 2
'''

REFERENCE = MOD + '''

def scale_clamped(xs, factor, lo, hi):
    return [clamp(x, lo, hi) for x in scale(xs, factor)]
'''

CALLS = MOD + '''

def scale_clamped(xs, factor, lo, hi):
    out = []
    for x in scale(xs, factor):
        out.append(clamp(x, lo, hi))
    return out
'''

INLINE = MOD + '''

def scale_clamped(xs, factor, lo, hi):
    return [min(max(x, lo), hi) for x in scale(xs, factor)]
'''

COPIED = MOD + '''

def _limit(v, low, high):
    if v < low:
        return low
    if v > high:
        return high
    return v


def scale_clamped(xs, factor, lo, hi):
    return [_limit(x, lo, hi) for x in scale(xs, factor)]
'''


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "util.py").write_text(UTIL)
    (tmp_path / "pkg" / "mod.py").write_text(MOD)
    return tmp_path


def make_task(helpers=("pkg.util.clamp",), reference=REFERENCE) -> Task:
    return Task(instance_id="t-1", problem_statement="add scale_clamped", FAIL_TO_PASS=("tests/t.py::t",),
                source=Source(kind="dir", path="."), patch=file_diff("pkg/mod.py", MOD, reference),
                metadata={"helpers": list(helpers)})


def mod_patch(new: str) -> str:
    return file_diff("pkg/mod.py", MOD, new)


async def test_calling_the_helper_beats_reimplementing_it(workspace):
    task = make_task()
    calls = await adherence(task, mod_patch(CALLS), workspace)
    assert calls.reused == ["pkg.util.clamp"] and calls.reuse == 1.0 and calls.stray == 0.0
    assert calls.lint_clean and calls.score == 1.0
    inline = await adherence(task, mod_patch(INLINE), workspace)
    assert inline.reuse == 0.0 and inline.missing == ["pkg.util.clamp"] and inline.rewritten == []
    copied = await adherence(task, mod_patch(COPIED), workspace)
    assert copied.rewritten == ["pkg.util.clamp"] and copied.reused == []
    assert copied.stray > 0  # its own helper is a function the reference does not touch
    assert calls.score > inline.score and calls.score > copied.score
    assert (await adherence(task, task.patch, workspace)).score == 1.0  # the reference itself


async def test_a_function_named_like_the_helper_is_a_rewrite_even_when_called(workspace):
    shadow = MOD.replace("from pkg.util import clamp\n", "") + '''

def clamp(x, lo, hi):
    return min(max(x, lo), hi)


def scale_clamped(xs, factor, lo, hi):
    return [clamp(x, lo, hi) for x in scale(xs, factor)]
'''
    report = await adherence(make_task(), mod_patch(shadow), workspace)
    assert report.rewritten == ["pkg.util.clamp"] and report.reuse == 0.0


async def test_touching_unrelated_functions_strays_further(workspace):
    task = make_task()
    focused = await adherence(task, mod_patch(CALLS), workspace)
    wandering = CALLS.replace("    return y * 2\n", "    # doubled\n    return y + y\n")
    other_file = mod_patch(CALLS) + file_diff("pkg/util.py", UTIL, UTIL.replace("x + 1", "1 + x"))
    near = await adherence(task, mod_patch(wandering), workspace)
    far = await adherence(task, other_file, workspace)
    assert focused.stray == 0.0 and 0 < near.stray < 1
    assert near.stray_functions == ["pkg/mod.py::unrelated"] and near.stray_files == []
    assert far.stray_files == ["pkg/util.py"] and far.stray_functions == ["pkg/util.py::other"]
    assert near.score < focused.score and far.score < focused.score


async def test_a_lint_finding_the_patch_adds_is_counted(workspace):
    (workspace / "pkg" / "util.py").write_text("import os\n" + UTIL)  # an old finding stays uncounted
    task = make_task()
    clean = await adherence(task, mod_patch(CALLS), workspace)
    dirty = await adherence(task, mod_patch("import sys\n" + CALLS.replace("out = []", "out = []\n    unused = 1")), workspace)
    assert clean.lint_errors == 0
    assert dirty.lint_errors == 2 and any("F401" in f for f in dirty.lint_findings)
    assert any("F841" in f for f in dirty.lint_findings)
    assert dirty.score == pytest.approx(clean.score - 0.2, abs=0.05)
    touched_old = await adherence(task, file_diff("pkg/util.py", "import os\n" + UTIL, "import os\n" + UTIL.replace("x + 1", "x + 2")), workspace)
    assert touched_old.lint_errors == 0  # `import os` was there before


async def test_empty_and_broken_patches(workspace):
    task = make_task()
    empty = await adherence(task, "", workspace)
    assert empty.empty and empty.score == 0.0 and empty.missing == ["pkg.util.clamp"]
    with pytest.raises(AdherenceError, match="does not apply"):
        await adherence(task, mod_patch(CALLS).replace("def unrelated", "def nothere"), workspace)
    with pytest.raises(AdherenceError, match=r"no metadata\.helpers"):
        await adherence(make_task(helpers=()), mod_patch(CALLS), workspace)
    assert (workspace / "pkg" / "mod.py").read_text() == MOD  # never changed


def test_helpers_are_checked_against_the_reference(workspace):
    assert check_helpers(make_task(), workspace) == []
    problems = check_helpers(make_task(helpers=("pkg.util.clamp", "pkg.util.other", "pkg.util.nothere")), workspace)
    assert problems == ["pkg.util.other: the reference patch's changed code does not use it",
                        "pkg.util.nothere: not defined in the workspace"]
    assert check_helpers(make_task(reference=INLINE), workspace) == [
        "pkg.util.clamp: the reference patch's changed code does not use it"]


def test_changed_lines_land_in_their_scopes(workspace):
    files = patched_files(mod_patch(CALLS.replace("return y * 2", "return y * 3")), workspace)
    assert set(files) == {"pkg/mod.py"}
    scopes = changed_scopes(*files["pkg/mod.py"])
    assert scopes["unrelated"] == 2 and scopes["scale_clamped"] == 5 and "scale" not in scopes
    method = changed_scopes("class A:\n    def f(self):\n        return 1\n", "class A:\n    def f(self):\n        return 2\n")
    assert dict(method) == {"A.f": 2}
    stub = "@overload\ndef f(x: int) -> int: ...\n@overload\ndef f(x: str) -> str: ...\n"
    assert dict(changed_scopes(stub, stub.replace("(x: str)", "(x: bytes)"))) == {"f": 2}  # each overload its own scope


async def test_a_real_request_rewards_the_helpers_over_a_rewrite(tmp_path):
    """toolz countby: the reference calls getter and frequencies; a working rewrite does not."""
    from training.eval.suite import load_suite
    from training.tasks import materialize

    task = next(t for t in load_suite("requests").tasks() if t.instance_id == "toolz-1.2.0__countby-reuse")
    root = materialize(task, tmp_path / "ws", cache_dir=Path(__file__).parent / "data")
    before = (root / "toolz" / "recipes.py").read_text()
    rewrite = before.replace("    counts = {}\n", "    if not callable(key):\n        index = key\n"
                             "        key = lambda item: item[index]\n    counts = {}\n")
    reference = await adherence(task, task.patch, root)
    rewritten = await adherence(task, file_diff("toolz/recipes.py", before, rewrite), root)
    assert reference.reused == ["toolz.itertoolz.frequencies", "toolz.itertoolz.getter"] and reference.score == 1.0
    assert rewritten.reused == [] and rewritten.stray == 0.0 and rewritten.score < reference.score
