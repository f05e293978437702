"""Runs a small module's pytest-style tests in this process, statement by statement, and says
how each test first fails: the bug-fix family's generator (training/bugfix.py) uses it to keep
the mutants its tests catch and to quote the failing check in the request.

    results = probe("numkit", "arith", module_source, test_source)    # or Probe(...).run(source)
    results["test_clamp"]          # None (passed), or a Failure:
    Failure(test="test_clamp", statement="assert clamp(5, 0, 3) == 3", call="clamp(5, 0, 3)",
            actual="returns 5")

Each test gets a fresh copy of the module and of the test file's top-level names, as pytest's
separate runs would. A statement may execute at most FUEL traced lines (a count, not a clock:
the same code always gets as far), so a mutant that loops forever raises OutOfFuel instead of
hanging. What `actual` says: `returns R` (the repr of the checked expression's value, for
`assert X == Y`, `assert X is Y`, `assert X`, `assert not X`), `raises E: message`, or
`does not raise E` (for `with pytest.raises(E)`).

The grading of record is pytest in the sandbox (training/tasks.py); this is only how the
generator chooses. Tests: .venv/bin/python -m pytest tests/training/test_bugfix.py -k probe
"""

from __future__ import annotations

import ast
import sys
import textwrap
import types
from dataclasses import dataclass
from typing import Any

import pytest

FUEL = 20_000
"""Traced lines one test statement may run."""
MAX_REPR = 200


class OutOfFuel(BaseException):
    """A statement ran more than FUEL lines (an endless loop, most likely)."""


@dataclass(frozen=True)
class Failure:
    test: str
    statement: str
    """The failing statement's source, as written in the test."""
    call: str
    """The expression whose value or exception the check is about."""
    actual: str
    """`returns R`, `raises E: message` or `does not raise E`."""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_REPR else text[:MAX_REPR] + "..."


class _Fuel:
    def __init__(self, limit: int) -> None:
        self.left = limit

    def __call__(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self.left -= 1
            if self.left < 0:
                raise OutOfFuel
        return self


def _fueled(code: types.CodeType, namespace: dict[str, Any]) -> Any:
    """eval/exec of `code` with at most FUEL traced lines."""
    previous = sys.gettrace()
    sys.settrace(_Fuel(FUEL))
    try:
        return eval(code, namespace)
    finally:
        sys.settrace(previous)


def _checked(stmt: ast.stmt) -> ast.expr:
    """The expression a statement's check is about."""
    if isinstance(stmt, ast.Assert):
        test = stmt.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            return test.left
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return test.operand
        return test
    if isinstance(stmt, ast.With) and len(stmt.body) == 1 and isinstance(stmt.body[0], ast.Expr):
        return stmt.body[0].value
    if isinstance(stmt, ast.Expr | ast.Assign):
        return stmt.value
    return stmt  # type: ignore[return-value]  # described by its own text


def _raised(stmt: ast.stmt, source: str) -> str:
    """E of `with pytest.raises(E)`."""
    if isinstance(stmt, ast.With):
        call = stmt.items[0].context_expr
        if isinstance(call, ast.Call) and call.args:
            return ast.get_source_segment(source, call.args[0]) or "an exception"
    return "an exception"


def _describe(test: str, stmt: ast.stmt, source: str, namespace: dict[str, Any], error: BaseException) -> Failure:
    checked = _checked(stmt)
    call = ast.get_source_segment(source, checked) or ""
    statement = textwrap.dedent(ast.get_source_segment(source, stmt, padded=True) or call)
    if isinstance(error, pytest.fail.Exception):
        actual = f"does not raise {_raised(stmt, source)}"
    elif isinstance(error, AssertionError) and isinstance(stmt, ast.Assert) and isinstance(checked, ast.expr):
        code = compile(ast.Expression(checked), f"<{test}>", "eval")
        actual = f"returns {_short(_fueled(code, namespace))}"
    else:
        actual = f"raises {type(error).__name__}: {error}"[: MAX_REPR + 20]
    return Failure(test, statement, call, actual)


def _modules(package: str, module: str, code: types.CodeType) -> dict[str, types.ModuleType]:
    pkg = types.ModuleType(package)
    pkg.__path__ = []
    mod = types.ModuleType(f"{package}.{module}")
    mod.__file__ = f"{package}/{module}.py"
    exec(code, mod.__dict__)
    setattr(pkg, module, mod)
    return {package: pkg, f"{package}.{module}": mod}


def _run_test(name: str, statements: list[tuple[ast.stmt, types.CodeType]], header: types.CodeType,
              source: str) -> Failure | None:
    namespace: dict[str, Any] = {"__name__": "test_module"}
    exec(header, namespace)
    for stmt, code in statements:
        try:
            _fueled(code, namespace)
        except OutOfFuel:
            raise
        except BaseException as error:
            if isinstance(error, KeyboardInterrupt | SystemExit):
                raise
            return _describe(name, stmt, source, namespace, error)
    return None


class Probe:
    """A module's tests, compiled once, run against any version of the module."""

    def __init__(self, package: str, module: str, test_source: str) -> None:
        self.package, self.module, self.source = package, module, test_source
        tree = ast.parse(test_source)
        tests = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]
        self.header = compile(ast.Module([n for n in tree.body if n not in tests], type_ignores=[]), "<tests>", "exec")
        self.tests = {t.name: [(stmt, compile(ast.Module([stmt], type_ignores=[]), f"<{t.name}>", "exec"))
                               for stmt in t.body] for t in tests}

    def run(self, module_source: str) -> dict[str, Failure | None]:
        """test name -> None when it passes, else how it first fails; OutOfFuel when a statement
        runs past FUEL lines. The tests import `package.module` (any other imports are real)."""
        code = compile(module_source, f"{self.package}/{self.module}.py", "exec")
        names = (self.package, f"{self.package}.{self.module}")
        saved = {name: sys.modules.get(name) for name in names}
        results: dict[str, Failure | None] = {}
        try:
            for name, statements in self.tests.items():
                sys.modules.update(_modules(self.package, self.module, code))  # a fresh module per test
                results[name] = _run_test(name, statements, self.header, self.source)
        finally:
            for name, previous in saved.items():
                if previous is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = previous
        return results


def probe(package: str, module: str, module_source: str, test_source: str) -> dict[str, Failure | None]:
    """One run of `Probe(package, module, test_source)` on `module_source`."""
    return Probe(package, module, test_source).run(module_source)
