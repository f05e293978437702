"""read_file, edit_file, write_file, delete_file through the ToolRegistry, on real files.

Run: .venv/bin/python -m pytest tests/agent/test_file_tools.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.tools.base import ToolContext, ToolRegistry, ToolResult
from agent.tools.files import READ_LIMIT, file_tools, plan_edit
from agent.workspace import Workspace


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace=Workspace(tmp_path))


@pytest.fixture
def root(ctx: ToolContext) -> Path:
    return ctx.workspace.root


REGISTRY = ToolRegistry(file_tools())


async def call(ctx: ToolContext, name: str, **args) -> ToolResult:
    return await REGISTRY.call(name, args, ctx)


async def edit(ctx: ToolContext, path: str, old: str, new: str, **more) -> ToolResult:
    return await call(ctx, "edit_file", path=path, old_string=old, new_string=new, **more)


def test_specs_are_strict_and_described() -> None:
    for spec in REGISTRY.specs():
        assert spec.parameters["additionalProperties"] is False
        assert all(p.get("description") for p in spec.parameters["properties"].values())
    assert [s.name for s in REGISTRY.specs()] == ["read_file", "edit_file", "write_file", "delete_file"]
    assert REGISTRY.get("read_file").spec.read_only and not REGISTRY.get("edit_file").spec.read_only


# ---- read_file -------------------------------------------------------------------------------


async def test_read_file_numbers_lines_and_says_how_to_continue(ctx: ToolContext, root: Path) -> None:
    (root / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 1001)))
    first = await call(ctx, "read_file", path="f.txt")
    lines = first.output.splitlines()
    assert lines[0] == "     1\tline 1" and lines[READ_LIMIT - 1] == f"   {READ_LIMIT}\tline {READ_LIMIT}"
    assert lines[-1] == f"[showing lines 1-{READ_LIMIT} of 1000; call read_file with offset={READ_LIMIT + 1} to continue]"
    part = await call(ctx, "read_file", path="f.txt", offset=998, limit=10)
    assert part.output == "   998\tline 998\n   999\tline 999\n  1000\tline 1000"
    past = await call(ctx, "read_file", path="f.txt", offset=1001)
    assert past.error == "offset 1001 is past the end of f.txt, which has 1000 lines; use an offset from 1 to 1000"
    extra = await call(ctx, "read_file", path="f.txt", lines=3)
    assert "Additional properties are not allowed" in extra.error


async def test_read_file_edge_cases(ctx: ToolContext, root: Path) -> None:
    (root / "empty.py").write_text("")
    assert (await call(ctx, "read_file", path="empty.py")).output == "empty.py is empty (0 lines)."
    (root / "long.txt").write_text("x" * 5000 + "\nshort\n")
    out = (await call(ctx, "read_file", path="long.txt")).output
    assert "... [line cut: 5000 characters]" in out and "1 long line(s) cut" in out and "     2\tshort" in out
    (root / "pkg").mkdir()
    assert "pkg is a directory" in (await call(ctx, "read_file", path="pkg")).error
    assert "did you mean long.txt" in (await call(ctx, "read_file", path="lng.txt")).error
    (root / "latin.txt").write_bytes(b"caf\xe9\n")
    latin = await call(ctx, "read_file", path="latin.txt")
    assert latin.output.startswith("     1\tcaf\u00e9") and "decoded as latin-1" in latin.output
    (root / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    assert "binary file, 300 bytes" in (await call(ctx, "read_file", path="blob.bin")).error
    assert "outside the workspace" in (await call(ctx, "read_file", path="/etc/hostname")).error


async def test_read_file_streams_files_over_the_size_limit(tmp_path: Path) -> None:
    ctx = ToolContext(workspace=Workspace(tmp_path, max_file_bytes=100))
    (tmp_path / "big.log").write_text("".join(f"event {i}\n" for i in range(1, 101)))
    result = await call(ctx, "read_file", path="big.log", offset=50, limit=2)
    assert result.output.splitlines()[:3] == [
        "    50\tevent 50", "    51\tevent 51", "[showing lines 50-51 of 100; call read_file with offset=52 to continue]"
    ]
    assert "over the size limit" in result.output
    assert "edit_file cannot change a file this large" in (await edit(ctx, "big.log", "event 1\n", "x\n")).error


async def test_read_file_sees_the_editor_buffer(ctx: ToolContext, root: Path) -> None:
    (root / "a.py").write_text("on disk\n")
    ctx.workspace.set_buffer("a.py", "unsaved\n", 4)
    result = await call(ctx, "read_file", path="a.py")
    assert result.output.startswith("     1\tunsaved\n") and "unsaved buffer" in result.output


# ---- edit_file -------------------------------------------------------------------------------


async def test_edit_unique_match_shows_snippet_and_diff(ctx: ToolContext, root: Path) -> None:
    (root / "a.py").write_text("".join(f"v{i} = {i}\n" for i in range(1, 11)))
    result = await edit(ctx, "a.py", "v5 = 5\n", "v5 = 50\nv55 = 55\n")
    assert result.ok, result.error
    assert result.output.splitlines()[0] == "Edited a.py: replaced 1 occurrence (written to disk)."
    assert "     5\tv5 = 50\n     6\tv55 = 55\n" in result.output
    assert "     2\tv2 = 2" in result.output and "     1\tv1" not in result.output
    assert "-v5 = 5\n+v5 = 50\n+v55 = 55\n" in result.data["diff"]
    assert result.data["applied_via"] == "disk" and result.data["tolerated"] is None
    assert result.data["old_text"].count("\n") == 10 and "v55 = 55" in result.data["new_text"]
    assert (root / "a.py").read_text() == result.data["new_text"]
    assert ctx.state["changed_paths"] == ["a.py"]


async def test_edit_non_unique_and_replace_all(ctx: ToolContext, root: Path) -> None:
    (root / "a.py").write_text("x = 1\ny = 2\nx = 1\nz = 3\nx = 1\n")
    many = await edit(ctx, "a.py", "x = 1", "x = 9")
    assert many.error == ("old_string occurs 3 times in a.py, at lines [1, 3, 5]; include more "
                          "surrounding lines to make it unique, or set replace_all=true to change every occurrence")
    assert (root / "a.py").read_text().count("x = 1") == 3
    done = await edit(ctx, "a.py", "x = 1", "x = 9", replace_all=True)
    assert done.ok and "replaced 3 occurrences" in done.output
    assert (root / "a.py").read_text() == "x = 9\ny = 2\nx = 9\nz = 3\nx = 9\n"


async def test_edit_errors_that_teach(ctx: ToolContext, root: Path) -> None:
    (root / "a.py").write_text("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n")
    same = await edit(ctx, "a.py", "a + b", "a + b")
    assert "identical" in same.error
    missing = await edit(ctx, "a.py", "def add(a, c):\n    return a + c\n", "x")
    assert missing.error.startswith("old_string did not appear verbatim in a.py")
    assert "The closest match" in missing.error
    assert "at lines 1-2:\n     1\tdef add(a, b):\n     2\t    return a + b" in missing.error
    numbered = await edit(ctx, "a.py", "     1\tdef add(a, b):", "x")
    assert "line-number prefixes" in numbered.error
    exists = await edit(ctx, "a.py", "", "new content\n")
    assert "already has content" in exists.error and "write_file" in exists.error
    nofile = await edit(ctx, "nope.py", "x", "y")
    assert nofile.error == "nope.py does not exist; to create a new file, use write_file"
    (root / "pkg").mkdir()
    assert "is a directory" in (await edit(ctx, "pkg", "x", "y")).error


async def test_edit_creates_and_fills_empty_files(ctx: ToolContext, root: Path) -> None:
    created = await edit(ctx, "new/mod.py", "", "A = 1\n")
    assert created.ok and created.output.startswith("Created new/mod.py (1 line, written to disk).")
    assert (root / "new" / "mod.py").read_text() == "A = 1\n" and created.data["old_text"] is None
    (root / "empty.txt").write_text("")
    filled = await edit(ctx, "empty.txt", "", "hello\n")
    assert filled.ok and (root / "empty.txt").read_text() == "hello\n"


async def test_edit_crlf_tabs_and_unicode(ctx: ToolContext, root: Path) -> None:
    (root / "w.c").write_bytes(b"int main() {\r\n\treturn 0;\r\n}\r\n")
    result = await edit(ctx, "w.c", "\treturn 0;\n", "\tputs(\"h\u00e9llo \u2603\");\n\treturn 0;\n")
    assert result.ok, result.error
    assert (root / "w.c").read_bytes() == "int main() {\r\n\tputs(\"h\u00e9llo \u2603\");\r\n\treturn 0;\r\n}\r\n".encode()
    again = await edit(ctx, "w.c", "\u2603", "\u263a")  # a CRLF old_string from the model also works
    assert again.ok and "\u263a" in (root / "w.c").read_text(encoding="utf-8")
    crlf_old = await edit(ctx, "w.c", "{\r\n\tputs", "{\r\n\t/* hi */\r\n\tputs")
    assert crlf_old.ok, crlf_old.error
    assert b"{\r\n\t/* hi */\r\n\tputs" in (root / "w.c").read_bytes()
    assert b"\n" not in (root / "w.c").read_bytes().replace(b"\r\n", b"")


async def test_whitespace_tolerant_fallback_reindents(ctx: ToolContext, root: Path) -> None:
    (root / "a.py").write_text(
        "class A:\n    def f(self):\n        x = 1   \n        return x\n\n    def g(self):\n        return 2\n"
    )
    old = "def f(self):\n    x = 1\n    return x\n"
    new = "def f(self):\n    x = 2\n    if x:\n        x += 1\n    return x\n"
    result = await edit(ctx, "a.py", old, new)
    assert result.ok, result.error
    assert result.data["tolerated"] == result.output.splitlines()[1]
    assert "matched lines 2-4 when ignoring indentation" in result.output
    assert "re-indented by the same offset) and trailing whitespace. Check" in result.output
    assert (root / "a.py").read_text() == (
        "class A:\n    def f(self):\n        x = 2\n        if x:\n            x += 1\n        return x\n"
        "\n    def g(self):\n        return 2\n"
    )


async def test_whitespace_tolerant_match_must_be_unique(ctx: ToolContext, root: Path) -> None:
    (root / "a.py").write_text("if a:\n    pass\nif b:\n    x\nif a:\n        pass\n")
    result = await edit(ctx, "a.py", "if a:\npass", "if a:\n    y")
    assert "ignoring whitespace it matches 2 places, at lines [1, 5]" in result.error


async def test_edit_notices_a_file_changed_underneath(ctx: ToolContext, root: Path) -> None:
    (root / "a.py").write_text("a = 1\nb = 2\n")
    await call(ctx, "read_file", path="a.py")
    (root / "a.py").write_text("a = 1\nb = 2\nc = 3\n")  # the user edits meanwhile
    result = await edit(ctx, "a.py", "b = 2", "b = 20")
    assert result.ok and "changed since you last read it" in result.output
    assert result.data["changed_underneath"] is True
    assert (root / "a.py").read_text() == "a = 1\nb = 20\nc = 3\n"
    calm = await edit(ctx, "a.py", "a = 1", "a = 10")  # our own edit is not "underneath"
    assert "changed since" not in calm.output
    (root / "a.py").write_text("zzz\n")
    lost = await edit(ctx, "a.py", "a = 10", "a = 11")
    assert "did not appear verbatim" in lost.error and "changed since you last read it" in lost.error


async def test_edit_through_the_editor_sink(tmp_path: Path) -> None:
    calls = []

    class Sink:
        async def apply(self, path, old_text, new_text, version):
            calls.append((path, old_text, new_text, version))
            return True

    ws = Workspace(tmp_path, edit_sink=Sink())
    ctx = ToolContext(workspace=ws)
    (tmp_path / "a.py").write_text("x = 1\n")
    ws.set_buffer("a.py", "x = 1\ny = 2\n", 12)
    result = await edit(ctx, "a.py", "y = 2", "y = 3")
    assert result.ok and result.data["applied_via"] == "editor" and "(applied in the editor)" in result.output
    assert calls == [("a.py", "x = 1\ny = 2\n", "x = 1\ny = 3\n", 12)]
    assert (tmp_path / "a.py").read_text() == "x = 1\n"  # the editor owns the buffer; disk untouched
    assert ws.read_text("a.py") == "x = 1\ny = 3\n"


async def test_edit_reports_only_the_lint_errors_it_introduced(ctx: ToolContext, root: Path) -> None:
    (root / "m.py").write_text(
        "import os\n\n\ndef f():\n    return missing_one\n\n\ndef g():\n    return 1\n\n\n"
        "def h():\n    return missing_three\n"
    )
    result = await edit(ctx, "m.py", "def g():\n    return 1\n", "def g():\n    value = 2\n    return undefined_two\n")
    assert result.ok, result.error
    lints = result.output.split("New lint errors introduced by this change:\n")[1]
    assert lints.splitlines() == [
        "  9:5 warning F841 Local variable `value` is assigned to but never used (ruff)",
        "  10:12 error F821 Undefined name `undefined_two` (ruff)",
    ]
    assert [d["line"] for d in result.data["new_diagnostics"]] == [9, 10]
    clean = await edit(ctx, "m.py", "return undefined_two", "return value")
    assert clean.ok and "New lint errors" not in clean.output


# ---- write_file, delete_file -----------------------------------------------------------------


async def test_write_file_creates_and_overwrites(ctx: ToolContext, root: Path) -> None:
    created = await call(ctx, "write_file", path="pkg/new.ts", content="export const a = 1;\n")
    assert created.output == "Created pkg/new.ts (1 line, written to disk)."
    assert created.data["old_text"] is None and "+export const a = 1;" in created.data["diff"]
    (root / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    over = await call(ctx, "write_file", path="crlf.txt", content="one\nTWO\nthree\n")
    assert over.output.startswith("Overwrote crlf.txt (3 lines: +2 -1, written to disk).")
    assert (root / "crlf.txt").read_bytes() == b"one\r\nTWO\r\nthree\r\n"
    same = await call(ctx, "write_file", path="crlf.txt", content="one\nTWO\nthree\n")
    assert "nothing was written" in same.output
    broken = await call(ctx, "write_file", path="pkg/bad.ts", content="export const = ;\n")
    assert "New lint errors introduced by this change:\n  1:" in broken.output
    assert "is a directory" in (await call(ctx, "write_file", path="pkg", content="x")).error


async def test_delete_file(ctx: ToolContext, root: Path) -> None:
    (root / "a.txt").write_text("bye\n")
    (root / "d").mkdir()
    result = await call(ctx, "delete_file", path="a.txt")
    assert result.output == "Deleted a.txt (from disk)." and not (root / "a.txt").exists()
    assert result.data["old_text"] == "bye\n" and result.data["new_text"] == "" and "-bye" in result.data["diff"]
    refused = await call(ctx, "delete_file", path="d")
    assert "d is a directory; delete_file removes single files only" in refused.error and (root / "d").is_dir()
    assert "a.txt does not exist" in (await call(ctx, "delete_file", path="a.txt")).error
    assert ctx.state["changed_paths"] == ["a.txt"]


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(st.sampled_from("ab \n\t\u00e9"), max_size=60),
    old=st.text(st.sampled_from("ab \n"), min_size=1, max_size=4),
    new=st.text(st.sampled_from("xy\n"), max_size=4),
)
def test_exact_edits_agree_with_str_replace(text: str, old: str, new: str) -> None:
    count = text.count(old)
    if count == 0:
        return
    plan = plan_edit(text, old, new, True, "f.txt")
    assert plan.new_text == text.replace(old, new) and plan.count == count
    lines = plan.new_text.split("\n")
    for start, end in plan.regions:
        assert 1 <= start <= end <= len(lines)
    if count == 1:
        assert plan_edit(text, old, new, False, "f.txt").new_text == text.replace(old, new, 1)


async def test_a_failing_linter_does_not_hide_an_applied_edit(ctx: ToolContext, root: Path, monkeypatch) -> None:
    from agent.tools import files

    async def broken_lint(*args, **kwargs):
        raise RuntimeError("linter exploded")

    monkeypatch.setattr(files, "lint", broken_lint)
    (root / "a.py").write_text("x = 1\n")
    result = await edit(ctx, "a.py", "x = 1", "x = 2")
    assert result.ok and "[lint check failed: RuntimeError: linter exploded; the change was applied]" in result.output
    assert (root / "a.py").read_text() == "x = 2\n"
