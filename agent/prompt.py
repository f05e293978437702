"""The system prompt: how the agent works, the workspace it is in, and the workspace's own rules
files (`AGENTS.md`, `.cursorrules`, `.cursor/rules/*.md[c]`). Tool schemas travel separately, in
the chat template's tools section (or the endpoint's `tools`).

    system = system_prompt(workspace_root, repo_map=workspace_repo_map(ws), semantic_search=True)
"""

from __future__ import annotations

import re
from pathlib import Path

RULES_FILES = ("AGENTS.md", ".cursorrules")
RULES_DIR = ".cursor/rules"
MAX_RULES_CHARS = 16_000
"""Rules beyond this are cut (with a note): they share the context with the work."""

BASE = """You are Composer, a coding agent working in the repository at {root}.
Work in small, verified steps:
- Look before you change: use list_dir, glob, grep and read_file to find the relevant code.
- Change files with edit_file (exact old_string -> new_string) or write_file for new files.
- Run tests and commands with run_terminal; it runs sandboxed in the workspace without network.
- Call several read-only tools in one message when they are independent: they run in parallel.
- Keep a plan with todo_write for work of more than a few steps.
- When the task is done, answer briefly: what you changed and how you checked it."""


def _frontmatter_body(text: str) -> str:
    """Drops a `---` YAML header (Cursor's .mdc rules carry one)."""
    match = re.match(r"^---\n.*?\n---\n", text, flags=re.DOTALL)
    return text[match.end() :] if match else text


def rules_files(root: Path) -> list[tuple[str, str]]:
    """(relative path, text) of each rules file present, in a stable order."""
    found: list[tuple[str, str]] = []
    for name in RULES_FILES:
        path = root / name
        if path.is_file() and not path.is_symlink():
            found.append((name, path.read_text(errors="replace")))
    rules_dir = root / RULES_DIR
    if rules_dir.is_dir():
        for path in sorted(rules_dir.glob("*.md*")):
            if path.is_file() and not path.is_symlink():
                found.append((f"{RULES_DIR}/{path.name}", _frontmatter_body(path.read_text(errors="replace"))))
    return found


SEMANTIC = "- Use codebase_search to find code by what it does when you do not know its names."
REPO_MAP = "# Repository map: the most referenced definitions, by file\n{map}"


def system_prompt(root: Path, extra: str = "", *, repo_map: str = "", semantic_search: bool = False,
                  display_root: str | None = None) -> str:
    """The prompt for the workspace at `root` (its rules files are read there), which it names
    `display_root` when given (agent/workspace.py Workspace.display_root)."""
    base = BASE.format(root=display_root or root)
    if semantic_search:
        base = base.replace("\n- Change files", f"\n{SEMANTIC}\n- Change files", 1)
    parts = [base]
    budget = MAX_RULES_CHARS
    for name, text in rules_files(root):
        text = text.strip()
        if not text:
            continue
        if len(text) > budget:
            text = text[:budget] + f"\n[{name} was cut to fit the context]"
        parts.append(f"# Rules from {name}\n{text}")
        budget -= len(text)
        if budget <= 0:
            break
    if repo_map:
        parts.append(REPO_MAP.format(map=repo_map.strip()))
    if extra:
        parts.append(extra)
    return "\n\n".join(parts)
