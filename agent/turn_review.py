"""Keep or undo a turn's changes one hunk at a time, after the turn, whoever made them (edit tools
or shell commands), without losing anything written since.

"Undo last turn" (a rewind) throws the whole turn away; a person who wants most of it but not one
change had to undo by hand. Here the changes since the checkpoint taken before the turn's first
write are listed as diff hunks per file, the file's text now (an editor's unsaved buffer
included) against its text at the checkpoint, and the person picks the ones to undo:

    files = turn_changes(store, checkpoint_id, workspace)      # [FileHunks(path, status, hunks)]
    picks = [Pick("app.py", 1, files[0].hunks[1].digest)]
    result = await undo_hunks(store, checkpoint_id, workspace, picks)

Undoing a hunk puts back the checkpoint's lines in its place and leaves every other line as it
is now, so edits the person made after the turn, elsewhere in the file, stay. A pick names its
hunk by index and by a digest of its lines: when the file changed since it was listed, the pick
no longer matches and that file is refused, untouched ("list the changes again"). Edits go through
the workspace, so an open buffer gets them as an editor edit the person can undo there too.
A file the turn created goes away when its hunk is undone; one it deleted comes back. Binary
and over-large files are listed without hunks: a rewind restores those.

Tests: .venv/bin/python -m pytest tests/agent/test_turn_review.py
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agent.exceptions import WorkspaceError
from agent.textfile import decode_bytes

CONTEXT = 3
"""Unchanged lines shown around a hunk (and merging changes this close into one hunk)."""


@dataclass(frozen=True)
class Hunk:
    index: int
    header: str
    """`@@ -start,count +start,count @@`, 1-based as in a unified diff."""
    lines: tuple[str, ...]
    """Its lines with their prefix (' ', '-', '+'), line breaks removed."""
    digest: str
    """Names this hunk's exact lines, so a pick made from an older listing is caught."""
    ops: tuple[tuple[int, int, int, int], ...] = field(repr=False)
    """(i1, i2, j1, j2): checkpoint lines [i1, i2) became the current lines [j1, j2)."""

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "header": self.header, "lines": list(self.lines), "digest": self.digest}


@dataclass(frozen=True)
class FileHunks:
    path: str
    status: str
    """added, modified or deleted since the checkpoint."""
    hunks: tuple[Hunk, ...] = ()
    binary: bool = False
    """Binary or too large to show: no hunks; a rewind restores it."""

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "status": self.status, "binary": self.binary,
                "hunks": [h.to_dict() for h in self.hunks]}


@dataclass(frozen=True)
class Pick:
    path: str
    index: int
    digest: str


@dataclass
class UndoResult:
    undone: list[Pick] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    """path -> why its picks were not undone (nothing in that file was touched)."""

    def to_dict(self) -> dict[str, Any]:
        return {"undone": [{"path": p.path, "index": p.index} for p in self.undone], "refused": self.refused}


def _hunks(old: list[str], new: list[str]) -> tuple[Hunk, ...]:
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=len(old) + len(new) > 4000)
    hunks = []
    for index, group in enumerate(matcher.get_grouped_opcodes(CONTEXT)):
        lines: list[str] = []
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines += [" " + line.rstrip("\r\n") for line in old[i1:i2]]
                continue
            lines += ["-" + line.rstrip("\r\n") for line in old[i1:i2]]
            lines += ["+" + line.rstrip("\r\n") for line in new[j1:j2]]
        (_, i1, _, j1, _), (_, _, i2, _, j2) = group[0], group[-1]
        header = f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@"
        body = "".join(old[i1:i2]) + "\0" + "".join(new[j1:j2])
        digest = hashlib.sha256(f"{i1},{j1}\0{body}".encode("utf-8", "surrogatepass")).hexdigest()[:16]
        ops = tuple((a1, a2, b1, b2) for tag, a1, a2, b1, b2 in group if tag != "equal")
        hunks.append(Hunk(index, header, tuple(lines), digest, ops))
    return tuple(hunks)


def _texts(store: Any, checkpoint_id: str, workspace: Any, path: str) -> tuple[str | None, str | None] | None:
    """(text at the checkpoint, text now), None for a missing side; None when either is binary
    or too large to show."""
    data = store.file_bytes(checkpoint_id, path)
    before = None if data is None else decode_bytes(data)
    if data is not None and before is None:
        return None
    try:
        now = workspace.read_text(path) if workspace.exists(path) else None
    except WorkspaceError:  # binary, too large
        return None
    return (None if before is None else before[0]), now


def turn_changes(store: Any, checkpoint_id: str, workspace: Any, also: Iterable[str] = ()) -> list[FileHunks]:
    """Each file that differs from the checkpoint now, with its hunks. `also`: paths to compare
    besides those changed on disk (the open buffers an editor holds the turn's edits in)."""
    changes = store.diff(checkpoint_id)
    on_disk = {*changes.added, *changes.modified, *changes.deleted}
    files = []
    for path in sorted({p for p in on_disk if not p.endswith("/")} | set(also)):
        texts = _texts(store, checkpoint_id, workspace, path)
        if texts is None:
            status = "added" if path in changes.added else "deleted" if path in changes.deleted else "modified"
            files.append(FileHunks(path, status, binary=True))
            continue
        before, now = texts
        if before == now:
            continue
        status = "added" if before is None else "deleted" if now is None else "modified"
        old, new = (t.splitlines(keepends=True) if t else [] for t in (before, now))
        files.append(FileHunks(path, status, _hunks(old, new)))
    return files


async def undo_hunks(store: Any, checkpoint_id: str, workspace: Any, picks: Iterable[Pick]) -> UndoResult:
    """Puts the checkpoint's lines back in place of each picked hunk, file by file; a file whose
    picks no longer match its hunks (it changed since they were listed) is left as it is."""
    result = UndoResult()
    by_path: dict[str, list[Pick]] = {}
    for pick in picks:
        by_path.setdefault(pick.path, []).append(pick)
    for path, chosen in sorted(by_path.items()):
        try:
            texts = _texts(store, checkpoint_id, workspace, path)
            if texts is None:
                raise WorkspaceError(f"{path} is binary or too large to undo in parts; rewind the turn instead")
            before, now = texts
            old, new = (t.splitlines(keepends=True) if t else [] for t in (before, now))
            hunks = _hunks(old, new)
            stale = [p for p in chosen if not (0 <= p.index < len(hunks) and hunks[p.index].digest == p.digest)]
            if stale:
                raise WorkspaceError(f"{path} changed since its changes were listed; list them again")
            ops = sorted((op for p in {p.index: p for p in chosen}.values() for op in hunks[p.index].ops), reverse=True)
            for i1, i2, j1, j2 in ops:  # from the end, so earlier indices still hold
                new[j1:j2] = old[i1:i2]
            if before is None and not new:
                await workspace.apply_delete(path)  # every line of a file the turn created
            else:
                await workspace.apply_text(path, "".join(new))
        except WorkspaceError as err:
            result.refused[path] = str(err)
            continue
        result.undone += chosen
    return result
