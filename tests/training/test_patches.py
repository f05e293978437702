"""Hidden tests (training/patches.py): test functions leave a file and come back byte for byte
through test_patch; what cannot be hidden is refused, naming the test.
Run: .venv/bin/python -m pytest tests/training/test_patches.py"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from training.patches import HideError, file_diff, hide_tests, names_by_file, without_tests
from training.tasks import apply_patch

TESTS = '''\
import pytest

from pkg import add

CASES = [1, 2]


def helper():
    return 1


def test_add():
    assert add(1, 2) == 3


@pytest.mark.parametrize("x", CASES)
def test_param(x):
    assert add(x, 0) == x


class TestBox:
    """Box tests."""

    def setup_method(self):
        self.n = 1

    def test_one(self):
        assert self.n == 1

    def test_two(self):
        assert self.n + 1 == 2


class TestOnly:
    def test_alone(self):
        assert True


def test_last():
    assert helper() == 1
'''


def test_without_tests_removes_whole_definitions_and_tidies_blank_lines():
    out = without_tests(TESTS, {"test_param", "TestBox::test_one", "TestOnly::test_alone"})
    assert "def test_param" not in out and "@pytest.mark.parametrize" not in out
    assert "def test_one" not in out and "def test_two" in out and "def setup_method" in out
    assert "class TestOnly" not in out  # nothing left of it
    assert "def test_add" in out and "def helper" in out and "CASES" in out
    assert "\n\n\n\n" not in out and out.endswith("assert helper() == 1\n")
    compile(out, "t.py", "exec")
    last = without_tests(TESTS, {"test_last"})
    assert last.endswith("        assert True\n")  # no trailing blank lines


def test_every_method_of_a_class_takes_the_class():
    out = without_tests(TESTS, {"TestBox::test_one", "TestBox::test_two", "TestBox::setup_method"})
    assert "class TestBox" not in out and '"""Box tests."""' not in out
    compile(out, "t.py", "exec")


@pytest.mark.parametrize(("names", "words"), [
    ({"test_missing"}, "no test function 'test_missing'"),
    ({"TestBox"}, "no test function 'TestBox'"),  # a class is not a test function
    ({"TestBox::test_nope"}, "has no test method 'test_nope'"),
    ({"TestBox::Inner::test_x"}, "no test function"),
    ({"CASES"}, "no test function 'CASES'"),
])
def test_what_cannot_be_hidden_is_named(names, words):
    with pytest.raises(HideError, match=words):
        without_tests(TESTS, names, "tests/test_pkg.py")


def test_ids_group_by_file_without_parameters():
    ids = ["t/a.py::test_x[1]", "t/a.py::test_x[2]", "t/a.py::C::test_y", "t/b.py::test_z"]
    assert names_by_file(ids) == {"t/a.py": {"test_x", "C::test_y"}, "t/b.py": {"test_z"}}
    with pytest.raises(HideError, match="not a test function id"):
        names_by_file(["t/a.py"])


def test_hide_then_restore_round_trips_through_git_apply(tmp_path: Path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_pkg.py").write_text(TESTS)
    (tmp_path / "tests" / "test_other.py").write_text("def test_o():\n    pass\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    ids = ["tests/test_pkg.py::test_param[1]", "tests/test_pkg.py::TestBox::test_two", "tests/test_other.py::test_o"]
    removal, test_patch = hide_tests(lambda rel: (tmp_path / rel).read_text(), ids)
    apply_patch(tmp_path, removal)
    hidden = (tmp_path / "tests" / "test_pkg.py").read_text()
    assert "test_param" not in hidden and "test_two" not in hidden and "test_one" in hidden
    assert (tmp_path / "tests" / "test_other.py").read_text() == ""
    apply_patch(tmp_path, test_patch)
    assert (tmp_path / "tests" / "test_pkg.py").read_text() == TESTS
    assert (tmp_path / "tests" / "test_other.py").read_text() == "def test_o():\n    pass\n"


def test_file_diff_is_empty_for_no_change():
    assert file_diff("a.py", "x\n", "x\n") == ""
