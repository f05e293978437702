"""Lints: ruff for Python (default rules or the project's config), tree-sitter syntax errors,
editor diagnostics, the new-diagnostics diff and the read_lints tool.

Run: .venv/bin/python -m pytest tests/agent/test_lints.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.tools import lints
from agent.tools.base import ToolContext, ToolRegistry
from agent.tools.lints import Diagnostic, ReadLints, lint, new_diagnostics, syntax_errors
from agent.workspace import Workspace


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


def d(line: int, code: str = "F821", message: str = "Undefined name `x`") -> Diagnostic:
    return Diagnostic(line, 1, code, message, "error", "ruff")


async def test_ruff_default_rules(ws: Workspace) -> None:
    (ws.root / "a.py").write_text("import os\n\n\ndef f():\n    unused = 1\n    return y\n")
    found = await lint(ws, "a.py")
    assert [(x.line, x.code, x.severity) for x in found] == [
        (1, "F401", "warning"), (5, "F841", "warning"), (6, "F821", "error")
    ]
    assert found[2].message == "Undefined name `y`" and found[2].source == "ruff"
    assert (await lint(ws, "a.py", text="x = 1\n")) == []


async def test_ruff_uses_the_project_config(ws: Workspace) -> None:
    (ws.root / "pyproject.toml").write_text('[tool.ruff.lint]\nselect = ["E711"]\n')
    (ws.root / "pkg").mkdir()
    (ws.root / "pkg" / "m.py").write_text("import os\nif x == None:\n    pass\n")
    assert [x.code for x in await lint(ws, "pkg/m.py")] == ["E711"]


async def test_python_syntax_error_and_tree_sitter_fallback(ws: Workspace, monkeypatch) -> None:
    (ws.root / "bad.py").write_text("def f(:\n    pass\n")
    found = await lint(ws, "bad.py")
    assert found and all(x.severity == "error" and x.line == 1 for x in found)
    monkeypatch.setattr(lints, "_ruff_command", lambda: ("/nonexistent/ruff",))
    fallback = await lint(ws, "bad.py")
    assert fallback and fallback[0].source == "tree-sitter" and fallback[0].line == 1


@pytest.mark.parametrize(
    ("name", "text", "line"),
    [
        ("app.ts", "const a: number = 1;\nfunction f(x: number {\n  return x;\n}\n", 2),
        ("view.tsx", "const v = <div>{x</div>;\n", 1),
        ("main.js", "let a = 1;\nlet = ;\n", 2),
        ("main.go", "package main\n\nfunc main() {\n\tx := \n}\n", 4),
        ("lib.rs", "fn main() {\n    let x = ;\n}\n", 2),
        ("data.json", '{"a": 1,,\n "b": 2}\n', 1),
    ],
)
async def test_tree_sitter_syntax_errors(ws: Workspace, name: str, text: str, line: int) -> None:
    (ws.root / name).write_text(text)
    found = await lint(ws, name)
    assert found, name
    assert found[0].line == line and found[0].source == "tree-sitter" and found[0].code == "syntax"
    assert found[0].message.startswith("syntax error")


def test_clean_sources_have_no_syntax_errors() -> None:
    assert syntax_errors("const a: number = 1;\nexport function f(x: number) { return x; }\n", ".ts") == []
    assert syntax_errors('{"a": [1, 2]}', ".json") == []


async def test_editor_diagnostics_are_merged_with_their_source(ws: Workspace) -> None:
    (ws.root / "a.py").write_text("x = y\n")

    async def editor(path: str) -> list[dict]:
        assert path == "a.py"
        return [
            {"range": {"start": {"line": 0, "character": 4}}, "severity": 1, "code": "F821",
             "source": "ruff", "message": "Undefined name `y`"},  # the same finding: dropped
            {"range": {"start": {"line": 0, "character": 0}}, "severity": 2,
             "source": "pyright", "message": "x is not accessed"},
        ]

    found = await lint(ws, "a.py", editor=editor)
    assert [(x.line, x.column, x.source, x.severity) for x in found] == [
        (1, 1, "pyright", "warning"), (1, 5, "ruff", "error")
    ]


def test_new_diagnostics_accounts_for_line_shifts() -> None:
    before = [d(3), d(20, "F401", "`os` imported but unused")]
    # the edit at line 10 added 2 lines and introduced a second undefined name at line 11
    after = [d(3), d(11), d(22, "F401", "`os` imported but unused")]
    assert new_diagnostics(before, after, edit_start_line=10, line_delta=2) == [d(11)]
    # an error inside the edited region that only moved is not new
    assert new_diagnostics([d(12)], [d(10)], edit_start_line=10, line_delta=0) == []
    # an error above the edit that disappeared and reappeared below it is new
    assert new_diagnostics([], [d(30)], edit_start_line=10, line_delta=0) == [d(30)]


def _ctx(ws: Workspace, **state) -> ToolContext:
    return ToolContext(workspace=ws, state=dict(state))


async def test_read_lints_tool(ws: Workspace) -> None:
    registry = ToolRegistry([ReadLints()])
    (ws.root / "src").mkdir()
    (ws.root / "src" / "a.py").write_text("x = y\n")
    (ws.root / "src" / "ok.py").write_text("x = 1\n")
    (ws.root / "src" / "b.ts").write_text("let = ;\n")
    result = await registry.call("read_lints", {"paths": ["src"]}, _ctx(ws))
    assert result.ok, result.error
    assert result.output.splitlines()[0] == "src/a.py:"
    assert "  1:5 error F821 Undefined name `y` (ruff)" in result.output
    assert "src/b.ts:\n  1:" in result.output and "src/ok.py" not in result.output
    assert set(result.data["diagnostics"]) == {"src/a.py", "src/b.ts", "src/ok.py"}

    clean = await registry.call("read_lints", {"paths": ["src/ok.py"]}, _ctx(ws))
    assert clean.output == "No lint errors."
    changed = await registry.call("read_lints", {}, _ctx(ws, changed_paths=["src/a.py", "deleted.py"]))
    assert changed.output.startswith("src/a.py:\n  1:5 error F821")
    nothing = await registry.call("read_lints", {}, _ctx(ws))
    assert nothing.output.startswith("No files to lint")
    missing = await registry.call("read_lints", {"paths": ["src/a.pyy"]}, _ctx(ws))
    assert "could not lint: src/a.pyy does not exist; did you mean src/a.py" in missing.output
    bad = await registry.call("read_lints", {"paths": "src"}, _ctx(ws))
    assert bad.error is not None and "is not of type 'array'" in bad.error
