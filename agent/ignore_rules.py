"""Gitignore rules as the workspace applies them: parsed `.gitignore` files, re-read when they
change, and git's precedence over them (agent/workspace.py `is_ignored`, `iter_files`).

Tests: .venv/bin/python -m pytest tests/agent/test_workspace.py -k ignore
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pathspec


@dataclass
class IgnoreFiles:
    """Parsed .gitignore files, re-read when their mtime or size changes."""

    root: Path
    cache: dict[str, tuple[tuple[int, int], pathspec.GitIgnoreSpec | None]] = field(
        default_factory=dict
    )

    def load(self, file: Path) -> pathspec.GitIgnoreSpec | None:
        try:
            st = file.stat()
        except OSError:
            return None
        key, stamp = str(file), (st.st_mtime_ns, st.st_size)
        hit = self.cache.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
        spec = pathspec.GitIgnoreSpec.from_lines(lines)
        spec = spec if spec.patterns else None
        self.cache[key] = (stamp, spec)
        return spec

    def base_rules(self) -> list[tuple[str, pathspec.GitIgnoreSpec]]:
        """`.git/info/exclude` (lowest precedence), then the root .gitignore."""
        specs = (
            self.load(self.root / ".git" / "info" / "exclude"),
            self.load(self.root / ".gitignore"),
        )
        return [("", spec) for spec in specs if spec is not None]


def ignored(rules: list[tuple[str, pathspec.GitIgnoreSpec]], rel: str, is_dir: bool) -> bool:
    """Git's precedence: the deepest .gitignore with a matching pattern decides, and within one
    file the last matching pattern (a `!negation` un-ignores)."""
    for prefix, spec in reversed(rules):
        sub = rel[len(prefix) :] + ("/" if is_dir else "")
        include = spec.check_file(sub).include
        if include is not None:
            return include
    return False
