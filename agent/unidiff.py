"""Reading git-style unified diffs (the checkpoints' `final_diff`, training/envs' tree diffs, a
task's `test_patch`): which files a diff touches, its hunks, and the diff with some files left
out; and `equal_ends`, the part of two texts a diff need not look at. Pure functions over the
text; nothing is applied.

    files = parse_diff(text)          # [FileDiff(path="a.py", old_path="a.py", hunks=[...]), ...]
    touched_paths(text)               # {"a.py", "tests/test_a.py"}
    without_paths(text, {"tests/test_a.py"})   # the same diff minus that file's section

Paths come from the `diff --git a/X b/Y` header (C-quoted paths, as git writes non-ASCII names,
are unquoted); a file's section runs to the next such header. A hunk keeps its lines with their
prefix (' ', '-', '+'); `\\ No newline at end of file` markers are dropped.

Tests: .venv/bin/python -m pytest tests/training/test_editor_signals.py -k diff
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HEADER = re.compile(r'^diff --git ("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*"|\S+)$')
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


@dataclass
class Hunk:
    lines: list[str] = field(default_factory=list)
    """Body lines with their one-character prefix, newline removed."""

    @property
    def old(self) -> list[str]:
        """The lines this hunk expects before (context and removed)."""
        return [line[1:] for line in self.lines if line[:1] in (" ", "-")]

    @property
    def new(self) -> list[str]:
        """The lines this hunk leaves (context and added)."""
        return [line[1:] for line in self.lines if line[:1] in (" ", "+")]


@dataclass
class FileDiff:
    path: str
    """The file after the change (b/ side); for a deletion, the deleted file."""
    old_path: str
    created: bool = False
    deleted: bool = False
    binary: bool = False
    hunks: list[Hunk] = field(default_factory=list)
    text: str = ""
    """This file's whole section, header included, as it stood in the diff."""


def unquote(name: str) -> str:
    """A path as git writes it in headers, without its quotes and C escapes."""
    if not (len(name) >= 2 and name[0] == name[-1] == '"'):
        return name
    out, body, i = bytearray(), name[1:-1], 0
    while i < len(body):
        char = body[i]
        if char != "\\":
            out += char.encode()
            i += 1
        elif body[i + 1 : i + 4].isdigit() and len(body[i + 1 : i + 4]) == 3:
            out.append(int(body[i + 1 : i + 4], 8))
            i += 4
        else:
            out.append(_ESCAPES.get(body[i + 1 : i + 2], ord(body[i + 1 : i + 2] or "\\")))
            i += 2
    return out.decode("utf-8", "surrogateescape")


def _strip_prefix(name: str) -> str:
    name = unquote(name)
    return name[2:] if name[:2] in ("a/", "b/") else name


def _sections(text: str) -> list[list[str]]:
    sections: list[list[str]] = []
    for line in text.splitlines(keepends=True):
        if line.startswith("diff --git ") or not sections:
            sections.append([])
        sections[-1].append(line)
    return [s for s in sections if s and s[0].startswith("diff --git ")]


def _parse_section(lines: list[str]) -> FileDiff:
    m = _HEADER.match(lines[0].rstrip("\n"))
    old_name, new_name = (m.group(1), m.group(2)) if m else (lines[0].split()[2], lines[0].split()[-1])
    fd = FileDiff(path=_strip_prefix(new_name), old_path=_strip_prefix(old_name), text="".join(lines))
    hunk: Hunk | None = None
    for line in lines[1:]:
        line = line.rstrip("\n")
        if hunk is None:
            fd.created |= line.startswith("new file mode") or line == "--- /dev/null"
            fd.deleted |= line.startswith("deleted file mode") or line == "+++ /dev/null"
            fd.binary |= line.startswith(("GIT binary patch", "Binary files "))
        if _HUNK.match(line):
            hunk = Hunk()
            fd.hunks.append(hunk)
        elif hunk is not None and line[:1] in (" ", "-", "+"):
            hunk.lines.append(line)
        elif hunk is not None and line == "":
            hunk.lines.append(" ")  # an empty context line whose space an editor trimmed
    return fd


def equal_ends(old: list, new: list) -> tuple[int, int]:
    """How many lines two versions share at their start, then at their end (never overlapping):
    what lies between is all a diff has to compare, a few lines when a big file changed a little."""
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    return head, tail


def parse_diff(text: str) -> list[FileDiff]:
    """Every file section of a git-style diff, in order."""
    return [_parse_section(section) for section in _sections(text or "")]


def touched_paths(text: str) -> set[str]:
    """The paths a diff changes, both sides of a rename included."""
    return {p for fd in parse_diff(text) for p in (fd.path, fd.old_path)}


def without_paths(text: str, paths: set[str] | frozenset[str]) -> str:
    """The diff with the sections of files in `paths` (either side) left out."""
    return "".join(fd.text for fd in parse_diff(text) if not {fd.path, fd.old_path} & set(paths))
