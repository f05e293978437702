"""The patches of generated tasks: one file's unified diff (`file_diff`, what `git apply` takes),
and hidden tests: a task's grading tests are taken out of the agent's workspace and come back at
grading as its `test_patch` (SWE-bench's layout), so the agent cannot read or edit them.

    bug = file_diff("pkg/mod.py", original, broken)    # a/ b/ paths, '\\ No newline' handled
    removal, test_patch = hide_tests(read, ["tests/test_m.py::test_add", "tests/test_m.py::TestBox::test_has[1]"])
    # removal: a diff deleting those test functions (whole functions: every parameter of a
    #          parametrised test goes); it joins the task's source.patch (the starting state)
    # test_patch: the diff that puts them back, byte for byte, before the tests run

`read(path)` returns a test file's text as it stands (the original, tests included). A test is a
function at the top of its file or a method of a class there; a class left with nothing but its
docstring goes whole. Anything else (a doctest, a test made by assignment, a nested class) raises
HideError: the task cannot hide it.

Tests: .venv/bin/python -m pytest tests/training/test_patches.py
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Callable


def file_diff(path: str, old: str, new: str) -> str:
    """A git-style unified diff of one existing file (`git apply` takes it from the workspace
    root); "" when nothing changed."""
    lines = list(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                      f"a/{path}", f"b/{path}", n=3))
    if not lines:
        return ""
    body = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return f"diff --git a/{path} b/{path}\n{body}"


class HideError(ValueError):
    """A test id that names no function this module can take out of its file."""


def names_by_file(test_ids: list[str] | tuple[str, ...]) -> dict[str, set[str]]:
    """{file: {"test_x", "TestBox::test_y"}} from pytest ids (parameters dropped)."""
    found: dict[str, set[str]] = {}
    for test_id in test_ids:
        path, sep, name = test_id.split("[", 1)[0].partition("::")
        if not sep or not name:
            raise HideError(f"{test_id!r} is not a test function id (FILE::[CLASS::]NAME)")
        found.setdefault(path, set()).add(name)
    return found


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _span(node: ast.stmt) -> tuple[int, int]:
    """0-based first and last line of a definition, decorators included."""
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)]) - 1, node.end_lineno - 1


def _spans(tree: ast.Module, names: set[str], where: str) -> list[tuple[int, int]]:
    """The line spans to delete for `names` (functions, Class::method)."""
    top = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    spans, methods = [], {}
    for name in sorted(names):
        head, _, rest = name.partition("::")
        node = top.get(head)
        if node is None or (not rest and isinstance(node, ast.ClassDef)) or "::" in rest:
            raise HideError(f"{where}: no test function {name!r} at the top of the file or in a top-level class")
        if not rest:
            spans.append(_span(node))
        else:
            methods.setdefault(head, set()).add(rest)
    for cls_name, wanted in methods.items():
        cls = top[cls_name]
        defs = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        missing = sorted(wanted - set(defs))
        if missing or not isinstance(cls, ast.ClassDef):
            raise HideError(f"{where}: class {cls_name!r} has no test method {missing[0] if missing else ''!r}")
        if all(_is_docstring(n) or getattr(n, "name", None) in wanted for n in cls.body):
            spans.append(_span(cls))  # nothing would be left of the class
        else:
            spans += [_span(defs[m]) for m in wanted]
    return spans


def without_tests(source: str, names: set[str], where: str = "<tests>") -> str:
    """The file's text without the named test functions; blank lines around each cut are
    trimmed so the file reads as if they had never been there."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise HideError(f"{where}: does not parse ({err})") from None
    lines = source.splitlines(keepends=True)
    drop = set()
    for start, end in _spans(tree, names, where):
        drop.update(range(start, end + 1))
    kept: list[str] = []
    for i, line in enumerate(lines):
        if i in drop:
            continue
        if not line.strip() and i - 1 in drop and (not kept or not kept[-1].strip()):
            drop.add(i)  # the blank lines after a cut, when a blank line already precedes it
            continue
        kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    return "".join(kept) + ("\n" if kept and not kept[-1].endswith("\n") else "")


def hide_tests(read: Callable[[str], str], test_ids: list[str] | tuple[str, ...]) -> tuple[str, str]:
    """(removal diff, test_patch) for taking `test_ids` out of their files and back."""
    removal, restore = [], []
    for path, names in sorted(names_by_file(test_ids).items()):
        original = read(path)
        visible = without_tests(original, names, path)
        removal.append(file_diff(path, original, visible))
        restore.append(file_diff(path, visible, original))
    return "".join(removal), "".join(restore)
