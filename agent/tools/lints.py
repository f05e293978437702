"""Lint diagnostics for one file, and the `read_lints` tool.

    diags = await lint(workspace, "src/app.py")                    # the file as it reads now
    diags = await lint(workspace, "src/app.py", text=proposed)     # or any text for that path
    fresh = new_diagnostics(before, after, edit_start_line=12, line_delta=+3)

Where diagnostics come from:
- Python (.py, .pyi): ruff (`ruff check --output-format json --stdin-filename PATH -`, the venv's
  ruff binary, else `python -m ruff`). A ruff.toml, .ruff.toml or pyproject.toml with [tool.ruff]
  between the file and the workspace root means the project's own config (and its excludes);
  otherwise ruff runs `--isolated` with DEFAULT_RUFF_RULES: syntax errors (E9), bad comparisons
  (F63), misplaced statements (F7), undefined names (F82) as errors, and unused imports (F401),
  redefinitions (F811) and unused variables (F841) as warnings. When ruff cannot run, tree-sitter's
  Python grammar still reports syntax errors.
- .js .mjs .cjs .jsx .ts .mts .cts .tsx .go .rs .json: tree-sitter syntax errors (ERROR and
  MISSING nodes), from the grammar wheels.
- The editor's diagnostics (LSP Diagnostic dicts from `ToolContext.diagnostics`), merged in with
  their own `source` when `editor=` is given.

`new_diagnostics` is what edit tools show after an edit: only what the edit introduced.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from agent.exceptions import WorkspaceError
from agent.retrieval import languages
from agent.tools.base import ToolContext, ToolResult, ToolSpec, truncate

if TYPE_CHECKING:
    from tree_sitter import Node

    from agent.workspace import Workspace

DEFAULT_RUFF_RULES = ("E9", "F63", "F7", "F82", "F401", "F811", "F841")
"""What ruff checks in a workspace without its own ruff config."""
RUFF_ERROR_PREFIXES = ("E9", "F63", "F7", "F82", "syntax", "invalid-syntax")
RUFF_TIMEOUT_S = 20.0

SYNTAX_CHECKED_LANGUAGES = ("python", "javascript", "typescript", "tsx", "go", "rust", "json")
"""Languages (agent.retrieval.languages) whose tree-sitter syntax errors lints report."""
TREE_SITTER_LANGUAGES = {suffix: name for suffix, name in languages.SUFFIXES.items()
                         if name in SYNTAX_CHECKED_LANGUAGES}
LINTABLE_SUFFIXES = frozenset(TREE_SITTER_LANGUAGES)
MAX_SYNTAX_ERRORS = 20
MAX_LINT_FILES = 100
_LSP_SEVERITY = {1: "error", 2: "warning", 3: "info", 4: "hint"}

EditorDiagnostics = Callable[[str], Awaitable[list[dict[str, Any]]]]


@dataclass(frozen=True)
class Diagnostic:
    line: int
    """1-based."""
    column: int
    """1-based, in characters."""
    code: str
    message: str
    severity: str
    """error, warning, info or hint."""
    source: str
    """ruff, tree-sitter, or the editor's source (pyright, eslint, ...)."""

    def format(self) -> str:
        code = f" {self.code}" if self.code else ""
        return f"{self.line}:{self.column} {self.severity}{code} {self.message} ({self.source})"


async def lint(workspace: Workspace, path: str, text: str | None = None, *,
               editor: EditorDiagnostics | None = None) -> list[Diagnostic]:
    """Diagnostics for `path` (its current text, or `text`), sorted by position. `editor`
    adds the editor's own diagnostics for the path; they describe the buffer as the editor holds
    it, so leave it out when `text` is a proposed edit."""
    rel = workspace.relative(path)
    if text is None:
        text = workspace.read_text(rel)
    found = await _local_diagnostics(workspace, rel, text)
    if editor is not None:
        seen = {(d.line, d.code, d.message) for d in found}
        for item in await editor(rel):
            d = from_lsp(item)
            if (d.line, d.code, d.message) not in seen:
                found.append(d)
    return sorted(found, key=lambda d: (d.line, d.column))


async def _local_diagnostics(workspace: Workspace, rel: str, text: str) -> list[Diagnostic]:
    suffix = PurePosixPath(rel).suffix.lower()
    if suffix in (".py", ".pyi"):
        found = await ruff_diagnostics(workspace, rel, text)
        if found is not None:
            return found
    return syntax_errors(text, suffix) if suffix in TREE_SITTER_LANGUAGES else []


def from_lsp(item: dict[str, Any]) -> Diagnostic:
    """An LSP Diagnostic dict (0-based positions) as a Diagnostic."""
    start = item.get("range", {}).get("start", {})
    code = item.get("code")
    return Diagnostic(
        line=int(start.get("line", 0)) + 1,
        column=int(start.get("character", 0)) + 1,
        code="" if code is None else str(code),
        message=str(item.get("message", "")),
        severity=_LSP_SEVERITY.get(item.get("severity") or 1, "error"),
        source=str(item.get("source") or "editor"),
    )


# ---- ruff ------------------------------------------------------------------------------------


@cache
def _ruff_command() -> tuple[str, ...]:
    try:
        from ruff.__main__ import find_ruff_bin

        return (os.fspath(find_ruff_bin()),)  # the binary itself: no interpreter start (~30 ms)
    except (ImportError, FileNotFoundError):
        return (sys.executable, "-m", "ruff")


def has_ruff_config(workspace: Workspace, rel: str) -> bool:
    """True when a ruff config sits between the file's folder and the workspace root."""
    folder = (workspace.root / rel).parent
    while True:
        if (folder / "ruff.toml").is_file() or (folder / ".ruff.toml").is_file():
            return True
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "[tool.ruff" in pyproject.read_text(errors="replace"):
            return True
        if folder == workspace.root or workspace.root not in folder.parents:
            return False
        folder = folder.parent


async def ruff_diagnostics(workspace: Workspace, rel: str, text: str) -> list[Diagnostic] | None:
    """Ruff's findings for `text` as the content of `rel`; None when ruff could not run."""
    argv = [*_ruff_command(), "check", "--output-format", "json", "--no-fix"]
    if has_ruff_config(workspace, rel):
        argv.append("--force-exclude")  # the project's excludes apply to stdin too
    else:
        argv += ["--isolated", "--select", ",".join(DEFAULT_RUFF_RULES)]
    argv += ["--stdin-filename", str(workspace.root / rel), "-"]
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=workspace.root, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
    except OSError:
        return None
    try:
        out, _ = await asyncio.wait_for(proc.communicate(text.encode("utf-8", "replace")), RUFF_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None
    except asyncio.CancelledError:
        proc.kill()  # the turn was cancelled: do not leave ruff behind
        raise
    if proc.returncode not in (0, 1):
        return None
    return [_from_ruff(item) for item in json.loads(out or b"[]")]


def _from_ruff(item: dict[str, Any]) -> Diagnostic:
    code = item.get("code") or "syntax"
    where = item.get("location") or {}
    return Diagnostic(
        line=int(where.get("row", 1)),
        column=int(where.get("column", 1)),
        code=code,
        message=str(item.get("message", "")),
        severity="error" if code.startswith(RUFF_ERROR_PREFIXES) else "warning",
        source="ruff",
    )


# ---- tree-sitter -----------------------------------------------------------------------------


def syntax_errors(text: str, suffix: str) -> list[Diagnostic]:
    """Tree-sitter's ERROR and MISSING nodes for a file with this suffix (".ts", ".go", ...),
    outermost first, at most MAX_SYNTAX_ERRORS."""
    source = text.encode("utf-8", "replace")
    tree = languages.parser(TREE_SITTER_LANGUAGES[suffix]).parse(source)
    if not tree.root_node.has_error:
        return []
    lines = source.split(b"\n")
    found: list[Diagnostic] = []
    stack: list[Node] = [tree.root_node]
    while stack and len(found) < MAX_SYNTAX_ERRORS:
        node = stack.pop()
        if node.is_missing or node.is_error:
            found.append(_syntax_diagnostic(node, source, lines))
        elif node.has_error:
            stack.extend(reversed(node.children))
    return found


def _syntax_diagnostic(node: Node, source: bytes, lines: list[bytes]) -> Diagnostic:
    row, byte_col = node.start_point
    column = len(lines[row][:byte_col].decode("utf-8", "replace")) + 1 if row < len(lines) else 1
    if node.is_missing:
        message = f"syntax error: missing {node.type!r}"
    else:
        snippet = source[node.start_byte : node.end_byte].decode("utf-8", "replace").strip()
        snippet = snippet.split("\n")[0][:40]
        message = f"syntax error: unexpected {snippet!r}" if snippet else "syntax error"
    return Diagnostic(row + 1, column, "syntax", message, "error", "tree-sitter")


# ---- what an edit introduced -----------------------------------------------------------------


def new_diagnostics(before: list[Diagnostic], after: list[Diagnostic], edit_start_line: int,
                    line_delta: int) -> list[Diagnostic]:
    """The diagnostics in `after` that the edit introduced. An old diagnostic counts as the same
    when its (code, message) reappears at its line, shifted by `line_delta` when it was at or
    below `edit_start_line` (1-based, the first changed line); failing that, when it was inside
    or below the edit and reappears anywhere from `edit_start_line` on (the edit moved it)."""

    def shifted(d: Diagnostic) -> int:
        return d.line if d.line < edit_start_line else d.line + line_delta

    exact = Counter((d.code, d.message, shifted(d)) for d in before)
    unmatched = []
    for d in after:
        key = (d.code, d.message, d.line)
        if exact[key] > 0:
            exact[key] -= 1
        else:
            unmatched.append(d)
    moved: Counter[tuple[str, str]] = Counter()
    for (code, message, line), n in exact.items():
        if line >= edit_start_line:
            moved[(code, message)] += n
    fresh = []
    for d in unmatched:
        key2 = (d.code, d.message)
        if d.line >= edit_start_line and moved[key2] > 0:
            moved[key2] -= 1
        else:
            fresh.append(d)
    return fresh


def format_diagnostics(diagnostics: list[Diagnostic], indent: str = "  ") -> str:
    return "\n".join(indent + d.format() for d in diagnostics)


# ---- the tool --------------------------------------------------------------------------------


class ReadLints:
    spec = ToolSpec(
        name="read_lints",
        description=(
            "Lint and syntax errors for files: ruff for Python; syntax errors for JavaScript, "
            "TypeScript, Go, Rust and JSON; plus the editor's diagnostics when an editor is "
            "attached. Without paths, checks the files changed in this session. Use it after "
            "editing to check your work; edit_file already reports the errors each edit adds."
        ),
        parameters={
            "type": "object",
            "properties": {
                "paths": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": (
                        "Files or folders to lint, relative to the workspace root. Folders are "
                        f"expanded to their lintable files (at most {MAX_LINT_FILES}). Omit to "
                        "lint the files changed in this session."
                    ),
                }
            },
            "additionalProperties": False,
        },
        read_only=True,
        kind="read",
    )

    def paths(self, args: dict[str, Any]) -> list[str] | None:
        return []

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        given = list(args.get("paths") or [])
        ws = ctx.workspace
        if given:
            files, problems = _expand(ws, given)
        else:
            changed = ctx.state.get("changed_paths") or []
            files, problems = [p for p in changed if ws.is_file(p)], {}
        if not files and not problems:
            return ToolResult(output="No files to lint: no paths were given and no files changed "
                                     "in this session. Pass paths=[...].")
        gate = asyncio.Semaphore(4)

        async def one(rel: str) -> tuple[str, list[Diagnostic] | str]:
            async with gate:
                try:
                    return rel, await lint(ws, rel, editor=ctx.diagnostics)
                except WorkspaceError as err:
                    return rel, str(err)

        results = dict(problems)
        results.update(await asyncio.gather(*(one(rel) for rel in files[:MAX_LINT_FILES])))
        return _report(results, len(files))


def _expand(ws: Workspace, given: list[str]) -> tuple[list[str], dict[str, str]]:
    files: list[str] = []
    problems: dict[str, str] = {}
    for path in given:
        try:
            rel = ws.relative(path)
            if ws.is_dir(rel):
                files += [f for f in ws.iter_files(rel) if PurePosixPath(f).suffix.lower() in LINTABLE_SUFFIXES]
            elif ws.is_file(rel):
                files.append(rel)
            else:
                ws.stat(rel)  # raises with "does not exist; did you mean ..."
        except WorkspaceError as err:
            problems[path] = str(err)
    return list(dict.fromkeys(files)), problems


def _report(results: dict[str, list[Diagnostic] | str], num_files: int) -> ToolResult:
    parts = []
    for rel, found in results.items():
        if isinstance(found, str):
            parts.append(f"{rel}:\n  could not lint: {found}")
        elif found:
            parts.append(f"{rel}:\n{format_diagnostics(found)}")
    output = "\n".join(parts) if parts else "No lint errors."
    if num_files > MAX_LINT_FILES:
        output += f"\n[linted the first {MAX_LINT_FILES} of {num_files} files; pass narrower paths for the rest]"
    output, truncated = truncate(output, how_to_continue="Pass fewer paths to see the rest.")
    data = {
        "files": list(results),
        "diagnostics": {rel: [asdict(d) for d in found] for rel, found in results.items() if not isinstance(found, str)},
        "errors": {rel: found for rel, found in results.items() if isinstance(found, str)},
    }
    return ToolResult(output=output, data=data, truncated=truncated)
