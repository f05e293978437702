"""list_dir, glob and grep on real files in a temp workspace, with real ripgrep (both engines:
the rg binary and the pyripgrep binding)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.tools import search
from agent.tools.base import ToolContext, ToolRegistry
from agent.tools.search import Glob, Grep, ListDir, find_rg
from agent.workspace import Workspace

ENGINES = ["rg", "pyripgrep"] if find_rg() else ["pyripgrep"]


def write(root: Path, rel: str, text: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A small project, no .git (ripgrep must honour .gitignore anyway)."""
    root = tmp_path / "proj"
    write(root, ".gitignore", "build/\n*.log\n")
    write(root, "src/app.py", "import os\n\ndef main():\n    return handle()\n\n\ndef handle():\n    return 1\n")
    write(root, "src/util.py", "def helper():\n    pass\n# TODO: tidy\n")
    write(root, "src/web/page.ts", "export function main() {}\n")
    write(root, "src/web/page.tsx", "export const App = () => main();\n")
    write(root, "docs/notes.md", "Main notes\nmain body\n")
    write(root, "build/out.py", "def main(): pass\n")
    write(root, "run.log", "main started\n")
    write(root, ".github/workflows/ci.yml", "run: main\n")
    write(root, ".env", "MAIN=1\n")
    write(root, "data.bin", b"main\x00\x01\x02binary")
    write(root, "README.md", "# Project\n")
    return root


def ctx_for(root: Path) -> ToolContext:
    return ToolContext(workspace=Workspace(root))


async def call(tool, args: dict, ctx: ToolContext):
    return await ToolRegistry([tool]).call(tool.spec.name, args, ctx)


# ---- list_dir ------------------------------------------------------------------------------


async def test_list_dir_shows_dirs_sizes_and_hides_gitignored(tree: Path):
    (tree / ".git").mkdir()
    res = await call(ListDir(), {}, ctx_for(tree))
    assert res.ok, res.error
    lines = res.output.splitlines()
    assert lines[0].startswith("./")
    assert lines[1:5] == [".github/", "docs/", "src/", ".env  (7 B)"]
    assert "README.md  (10 B)" in lines
    assert ".git/" not in lines and "build/" not in lines and "run.log" not in res.output.split("[")[0]
    assert "[2 gitignored entries hidden: build/, run.log]" in res.output
    assert res.data["ignored_hidden"] == 2
    assert {"name": "src", "is_dir": True, "size": None} in res.data["entries"]


async def test_list_dir_subdir_ignored_dir_and_errors(tree: Path):
    ctx = ctx_for(tree)
    res = await call(ListDir(), {"path": "src/web"}, ctx)
    assert res.output.splitlines()[1:] == ["page.ts  (26 B)", "page.tsx  (33 B)"]
    shown = await call(ListDir(), {"path": "build"}, ctx)  # asked for explicitly: shown in full
    assert "out.py" in shown.output
    not_dir = await call(ListDir(), {"path": "src/app.py"}, ctx)
    assert "is a file, not a directory" in not_dir.error
    missing = await call(ListDir(), {"path": "srcc"}, ctx)
    assert "does not exist" in missing.error and "src" in missing.error
    outside = await call(ListDir(), {"path": "../"}, ctx)
    assert "outside" in outside.error or "escapes" in outside.error


async def test_list_dir_caps_with_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(search, "LIST_CAP", 5)
    for i in range(8):
        write(tmp_path, f"f{i}.txt", "x")
    res = await call(ListDir(), {}, ctx_for(tmp_path))
    assert res.truncated and len(res.data["entries"]) == 5
    assert "[showing 5 of 8 entries; list a subdirectory, or use glob" in res.output


# ---- glob ----------------------------------------------------------------------------------


async def test_glob_recursive_newest_first_skips_ignored_and_hidden(tree: Path):
    for i, rel in enumerate(["src/util.py", "src/app.py"]):
        os.utime(tree / rel, (1_000_000 + i, 1_000_000 + i))
    res = await call(Glob(), {"pattern": "**/*.py"}, ctx_for(tree))
    assert res.ok, res.error
    assert res.data["files"] == ["src/app.py", "src/util.py"]  # build/ is ignored; newest first
    assert "newest first" in res.output


async def test_glob_pattern_forms(tree: Path):
    ctx = ctx_for(tree)

    async def files(args: dict) -> list[str]:
        res = await call(Glob(), args, ctx)
        assert res.ok, res.error
        return sorted(res.data["files"])

    assert await files({"pattern": "*.md"}) == ["README.md", "docs/notes.md"]  # any depth
    assert await files({"pattern": "src/*.py"}) == ["src/app.py", "src/util.py"]
    assert await files({"pattern": "*.{ts,tsx}"}) == ["src/web/page.ts", "src/web/page.tsx"]
    assert await files({"pattern": "web/*.ts", "path": "src"}) == ["src/web/page.ts"]  # relative to path
    assert await files({"pattern": ".github/**"}) == [".github/workflows/ci.yml"]  # names a dot-dir
    assert await files({"pattern": "*.yml"}) == []
    assert await files({"pattern": "*.py", "path": "build"}) == ["build/out.py"]  # explicit ignored dir


async def test_glob_no_match_and_cap_notes(tree: Path, monkeypatch: pytest.MonkeyPatch):
    ctx = ctx_for(tree)
    none = await call(Glob(), {"pattern": "**/*.rs"}, ctx)
    assert none.ok and "No files match '**/*.rs'" in none.output
    monkeypatch.setattr(search, "GLOB_CAP", 2)
    capped = await call(Glob(), {"pattern": "*"}, ctx)
    assert capped.truncated and len(capped.data["files"]) == 2
    assert "narrow the pattern" in capped.output


# ---- grep ----------------------------------------------------------------------------------


@pytest.fixture(params=ENGINES)
def grep(request: pytest.FixtureRequest) -> Grep:
    return Grep(engine=request.param)


async def test_grep_content_relative_paths_line_numbers(tree: Path, grep: Grep):
    res = await call(grep, {"pattern": r"def \w+"}, ctx_for(tree))
    assert res.ok, res.error
    assert res.output.splitlines() == [
        "3 matching lines in 2 files:",
        "src/app.py", "3:def main():", "--", "7:def handle():",
        "",
        "src/util.py", "1:def helper():",
    ]  # build/out.py is gitignored (no .git here: the .gitignore counts anyway)
    assert res.data["engine"] == grep.engine
    assert res.data["locations"][0] == {"path": "src/app.py", "line": 3}


async def test_grep_skips_ignored_hidden_binary_unless_path_given(tree: Path, grep: Grep):
    ctx = ctx_for(tree)
    res = await call(grep, {"pattern": "main", "output_mode": "files_with_matches"}, ctx)
    assert res.data["paths"] == ["docs/notes.md", "src/app.py", "src/web/page.ts", "src/web/page.tsx"]
    hidden = await call(grep, {"pattern": "main", "path": ".github"}, ctx)
    assert hidden.output.splitlines()[1:] == [".github/workflows/ci.yml", "1:run: main"]
    ignored = await call(grep, {"pattern": "main", "path": "build"}, ctx)
    assert "build/out.py" in ignored.output
    one_file = await call(grep, {"pattern": "main", "path": "run.log"}, ctx)
    assert one_file.output.splitlines()[1:] == ["run.log", "1:main started"]


async def test_grep_caps_results_with_note(tmp_path: Path, grep: Grep):
    write(tmp_path, "a.txt", "hit\n" * 5)
    write(tmp_path, "b.txt", "hit\n" * 5)
    res = await call(grep, {"pattern": "hit", "max_results": 3}, ctx_for(tmp_path))
    assert res.truncated and res.data["matches"] == 10
    assert res.output.splitlines()[:5] == ["10 matching lines in 2 files:", "a.txt", "1:hit", "2:hit", "3:hit"]
    assert "[showing the first 3 of 10 matching lines (1 of 2 files" in res.output
    assert "Narrow the search" in res.output and "glob=" in res.output
    files = await call(grep, {"pattern": "hit", "output_mode": "files_with_matches", "max_results": 1}, ctx_for(tmp_path))
    assert files.data["paths"] == ["a.txt"] and "[showing 1 of 2 files" in files.output


async def test_grep_invalid_regex_and_fixed_strings(tree: Path, grep: Grep):
    ctx = ctx_for(tree)
    res = await call(grep, {"pattern": "handle("}, ctx)
    assert not res.ok and "invalid regex 'handle('" in res.error
    assert "fixed_strings=true" in res.error and "handle\\\\(" in res.error  # the escaped pattern
    fixed = await call(grep, {"pattern": "handle(", "fixed_strings": True}, ctx)
    assert fixed.ok and "4:    return handle()" in fixed.output


async def test_grep_refuses_paths_outside_and_missing(tree: Path, grep: Grep):
    ctx = ctx_for(tree)
    for path in ("..", "/etc", "../proj/../.."):
        res = await call(grep, {"pattern": "x", "path": path}, ctx)
        assert not res.ok and ("outside" in res.error or "escapes" in res.error), (path, res.error)
    inside = await call(grep, {"pattern": "helper", "path": str(tree / "src")}, ctx)  # absolute, inside
    assert inside.output.splitlines()[1:] == ["src/util.py", "1:def helper():"]
    missing = await call(grep, {"pattern": "x", "path": "src/ap.py"}, ctx)
    assert "does not exist" in missing.error and "src/app.py" in missing.error


async def test_grep_context_lines(tree: Path, grep: Grep):
    ctx = ctx_for(tree)
    both = await call(grep, {"pattern": "def handle", "context": 1}, ctx)
    assert both.output.splitlines()[1:] == ["src/app.py", "6-", "7:def handle():", "8-    return 1"]
    after = await call(grep, {"pattern": "^def", "after": 1, "path": "src/app.py"}, ctx)
    assert after.output.splitlines()[1:] == ["src/app.py", "3:def main():", "4-    return handle()", "--",
                                             "7:def handle():", "8-    return 1"]
    before = await call(grep, {"pattern": "TODO", "before": 2, "context": 0}, ctx)
    assert before.output.splitlines()[1:] == ["src/util.py", "1-def helper():", "2-    pass", "3:# TODO: tidy"]


async def test_grep_case_type_and_glob_filters(tree: Path, grep: Grep):
    ctx = ctx_for(tree)

    async def paths(args: dict) -> list[str]:
        res = await call(grep, {"output_mode": "files_with_matches", **args}, ctx)
        assert res.ok, res.error
        return res.data.get("paths", [])

    assert await paths({"pattern": "Main", "path": "docs"}) == ["docs/notes.md"]
    count = await call(grep, {"pattern": "main", "path": "docs", "output_mode": "count"}, ctx)
    assert count.output.splitlines()[1:] == ["docs/notes.md: 1"]
    loud = await call(grep, {"pattern": "main", "path": "docs", "output_mode": "count", "case_insensitive": True}, ctx)
    assert loud.output.splitlines()[1:] == ["docs/notes.md: 2"]
    assert await paths({"pattern": "main", "type": "py"}) == ["src/app.py"]
    assert await paths({"pattern": "main", "type": "python"}) == ["src/app.py"]
    assert await paths({"pattern": "main", "type": "ts"}) == ["src/web/page.ts", "src/web/page.tsx"]
    assert await paths({"pattern": "main", "glob": "*.tsx"}) == ["src/web/page.tsx"]
    assert await paths({"pattern": "main", "glob": "web/*.{ts,tsx}", "path": "src"}) == ["src/web/page.ts", "src/web/page.tsx"]
    assert await paths({"pattern": "main", "glob": "!*.ts*"}) == ["docs/notes.md", "src/app.py"]
    bad = await call(grep, {"pattern": "main", "type": "nosuchtype"}, ctx)
    assert "unknown file type 'nosuchtype'" in bad.error and "glob=" in bad.error


async def test_grep_unsaved_buffers_override_disk(tree: Path, grep: Grep):
    ctx = ctx_for(tree)
    ws = ctx.workspace
    ws.set_buffer("src/util.py", "def helper():\n    return needle\n", 3)  # adds a match the disk lacks
    ws.set_buffer("src/app.py", "import os\n\ndef start():\n    pass\n", 4)  # removes the disk's 'def main'
    ws.set_buffer("src/new.py", "needle = 1\n", 1)  # never saved
    res = await call(grep, {"pattern": "needle"}, ctx)
    assert res.output.splitlines() == ["2 matching lines in 2 files:", "src/new.py", "1:needle = 1", "",
                                       "src/util.py", "2:    return needle"]
    gone = await call(grep, {"pattern": "def main", "output_mode": "files_with_matches"}, ctx)
    assert gone.ok and gone.data["files"] == 0 and "No matches for 'def main'" in gone.output
    kept = await call(grep, {"pattern": "def (start|handle)"}, ctx)
    assert kept.output.splitlines()[1:] == ["src/app.py", "3:def start():"]
    one = await call(grep, {"pattern": "needle", "path": "src/new.py", "output_mode": "count"}, ctx)
    assert one.output.splitlines()[1:] == ["src/new.py: 1"]
    filtered = await call(grep, {"pattern": "needle", "glob": "new.*"}, ctx)
    assert filtered.data["locations"] == [{"path": "src/new.py", "line": 1}]
    assert set(res.data["buffers_searched"]) == {"src/app.py", "src/new.py", "src/util.py"}


async def test_grep_unicode_multiline_and_non_utf8(tmp_path: Path, grep: Grep):
    write(tmp_path, "u.txt", "caf\u00e9 cr\u00e8me\nna\u00efve \u65e5\u672c\u8a9e\n")
    write(tmp_path, "latin.txt", b"caf\xe9 latin-1\n")
    write(tmp_path, "m.py", "def f(\n    x,\n):\n    pass\n")
    ctx = ctx_for(tmp_path)
    res = await call(grep, {"pattern": "caf\u00e9|\u65e5\u672c"}, ctx)
    assert res.output.splitlines()[1:] == ["u.txt", "1:caf\u00e9 cr\u00e8me", "2:na\u00efve \u65e5\u672c\u8a9e"]
    latin = await call(grep, {"pattern": "latin"}, ctx)
    assert latin.ok  # invalid UTF-8 does not crash; rg finds the file, the pyripgrep binding skips it
    assert latin.data["files"] == (1 if grep.engine == "rg" else 0)
    multi = await call(grep, {"pattern": r"def f\(\n\s+x", "multiline": True}, ctx)
    assert multi.output.splitlines()[1:] == ["m.py", "1:def f(", "2:    x,"]
    single = await call(grep, {"pattern": r"f\(\n"}, ctx)
    assert not single.ok and "multiline" in single.error
    ctx.workspace.set_buffer("m.py", "def f(\n    y,\n):\n", 2)
    multi_buf = await call(grep, {"pattern": r"def f\(\n\s+x", "multiline": True}, ctx)
    assert multi_buf.data["files"] == 0


async def test_grep_long_lines_are_clipped(tmp_path: Path, grep: Grep):
    write(tmp_path, "min.js", "x" * 5000 + " needle " + "y" * 5000 + "\n")
    res = await call(grep, {"pattern": "needle"}, ctx_for(tmp_path))
    assert res.ok and len(res.output) < 1000


def test_specs_are_closed_schemas():
    for tool in (ListDir(), Glob(), Grep()):
        assert tool.spec.read_only and tool.spec.kind == "search"
        assert tool.spec.parameters["additionalProperties"] is False
        assert tool.paths({"pattern": "x"}) == []
