"""Keep or undo a turn's changes one hunk at a time, after the turn, whoever made them (edit tools
or shell commands), without losing anything written since.

"Undo last turn" (a rewind) throws the whole turn away; a person who wants most of it but not one
change had to undo by hand. Here the changes since the checkpoint taken before the turn's first
write are listed as diff hunks per file, the file's text now (an editor's unsaved buffer
included) against its text at the checkpoint (the unsaved buffers recorded with it included, so
what the person typed before the turn is not shown as the turn's), and the person picks the ones
to undo or keep:

    files = turn_changes(store, checkpoint_id, workspace)      # [FileHunks(path, status, hunks)]
    plan = plan_review(store, checkpoint_id, workspace, undo=[Pick("app.py", 1, digest)], keep=[])
    result = await apply_review(workspace, plan)                # UndoResult(undone, kept, refused)

Undoing a hunk puts back the checkpoint's lines in its place and leaves every other line as it
is now, so edits the person made after the turn, elsewhere in the file, stay. A pick names its
hunk by index and by a digest of its lines: when the file changed since it was listed, the pick
no longer matches and that file is refused, untouched ("list the changes again"); a kept pick is
checked the same way, since each verdict is a reward for training. Lines are compared as stored
(CRLF and mixed line breaks included), and edits go through the workspace in the file's own
encoding, so an open buffer gets them as an editor edit the person can undo there too. A file the
turn created goes away when its hunk is undone; one it deleted comes back with its bytes and mode.
Binary, over-large and non-regular files (links) are listed without hunks: a rewind restores them.
`plan_review` reads and diffs (slow on huge files: run it in a thread); `apply_review` writes.

Tests: .venv/bin/python -m pytest tests/agent/test_turn_review.py
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agent.exceptions import WorkspaceError
from agent.textfile import atomic_write, decode_bytes, restore_newlines
from agent.unidiff import equal_ends

CONTEXT = 3
"""Unchanged lines shown around a hunk (and merging changes this close into one hunk)."""

Op = tuple[str, int, int, int, int]


@dataclass(frozen=True)
class Hunk:
    index: int
    header: str
    """`@@ -start,count +start,count @@`, as in a unified diff."""
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
    """Binary, too large or not a regular file: no hunks; a rewind restores it."""

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
    kept: list[Pick] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    """path -> why its picks were not taken (nothing in that file was touched)."""

    def to_dict(self) -> dict[str, Any]:
        return {"undone": [{"path": p.path, "index": p.index} for p in self.undone],
                "kept": [{"path": p.path, "index": p.index} for p in self.kept], "refused": self.refused}


@dataclass
class _Write:
    text: str | None = None
    """The file's new text as stored; None with neither of the others: delete the file."""
    data: bytes | None = None
    mode: int = 0o644
    """Bytes to put back as they were (a file the turn deleted), with their mode."""
    now: str | None = None
    """The file's text the plan was made from: written only while it still is (no typing since)."""


@dataclass
class ReviewPlan:
    result: UndoResult
    writes: dict[str, _Write] = field(default_factory=dict)


@dataclass
class _Sides:
    before: str | None
    now: str | None
    stored: Any = None
    """The checkpoint's StoredFile for the path."""
    unsaved: bool = False
    """`before` is the text of a buffer unsaved at the checkpoint, not the stored file's."""
    current: str | None = None
    """`text_now`: what the file holds now (`now` says None for a buffer left open on a file a
    shell command deleted)."""


# ---- diffs -------------------------------------------------------------------------------------


def _lines(text: str | None) -> list[str]:
    """Lines with their breaks (\\n or \\r\\n): only \\n ends a line, as in git, not \\f or \\x85."""
    if not text:
        return []
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _grouped(old: list[str], new: list[str]) -> list[list[Op]]:
    """difflib's grouped opcodes (the changes, CONTEXT equal lines around each, near ones
    together), over the lines between the equal head and tail and CONTEXT lines beyond them: a
    few changes in a big file diff in milliseconds."""
    head, tail = equal_ends(old, new)
    lo, cut = max(0, head - CONTEXT), max(0, tail - CONTEXT)
    a, b = old[lo:len(old) - cut], new[lo:len(new) - cut]
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=len(a) + len(b) > 4000)
    return [[(t, lo + i1, lo + i2, lo + j1, lo + j2) for t, i1, i2, j1, j2 in group]
            for group in matcher.get_grouped_opcodes(CONTEXT)]


def _range(start: int, count: int) -> str:
    return f"{start + 1 if count else start},{count}"


def _hunks(old: list[str], new: list[str], whole_file: bool) -> tuple[Hunk, ...]:
    """The hunks from `old` to `new`; `whole_file`: an empty file created or deleted still gets
    one (empty) hunk, so it can be undone."""
    groups = _grouped(old, new) or ([[("replace", 0, 0, 0, 0)]] if whole_file else [])
    hunks = []
    for index, group in enumerate(groups):
        lines: list[str] = []
        for tag, i1, i2, j1, j2 in group:
            lines += [(" " if tag == "equal" else "-") + line.rstrip("\r\n") for line in old[i1:i2]]
            if tag != "equal":
                lines += ["+" + line.rstrip("\r\n") for line in new[j1:j2]]
        (_, i1, _, j1, _), (_, _, i2, _, j2) = group[0], group[-1]
        body = f"{i1},{j1}\0" + "".join(old[i1:i2]) + "\0" + "".join(new[j1:j2])
        digest = hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        ops = tuple((a1, a2, b1, b2) for tag, a1, a2, b1, b2 in group if tag != "equal")
        hunks.append(Hunk(index, f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@", tuple(lines), digest, ops))
    return tuple(hunks)


# ---- the two sides -----------------------------------------------------------------------------


def checkpoint_sides(store: Any, checkpoint_id: str, workspace: Any, path: str,
                     unsaved: dict[str, str]) -> _Sides | None:
    """The file's text at the checkpoint and now, as stored (None: absent); None when either
    side is binary, too large or not a regular file. `unsaved`: the checkpoint's unsaved buffers,
    whose text is the file's there (as the person saw it, not as the disk held it). An open
    buffer's text is the file's now."""
    stored, before = store.stored_file(checkpoint_id, path), unsaved.get(path)
    if stored is not None:
        if stored.kind != "f" or stored.data is None or len(stored.data) > workspace.max_file_bytes:
            return None
        decoded = decode_bytes(stored.data)
        if decoded is None:
            return None
        if before is None:
            before = restore_newlines(decoded[0], decoded[1].newline)
    on_disk = workspace.resolve(path)
    if on_disk.is_symlink() or (on_disk.exists() and not on_disk.is_file()):
        return None
    try:
        now = text_now(workspace, path)
    except WorkspaceError:  # binary, too large
        return None
    current = now
    if workspace.buffer(path) is not None and stored is not None and not on_disk.exists() and now == before:
        now = None  # a buffer left open after a shell deleted the file
    return _Sides(before, now, stored, path in unsaved, current)


def text_now(workspace: Any, path: str) -> str | None:
    """The file's text as stored (its own line breaks): an open buffer's, else the disk's; None
    when there is neither. Raises WorkspaceError for binary and over-large files."""
    buffer = workspace.buffer(path)
    if buffer is not None:
        if len(buffer[0]) > workspace.max_file_bytes:
            raise WorkspaceError(f"{path} is open with more than {workspace.max_file_bytes:,} characters")
        return buffer[0]
    if not workspace.resolve(path).exists():
        return None
    text, fmt = workspace.read_text(path), workspace.text_format(path)
    return restore_newlines(text, fmt.newline if fmt else "\n")


def turn_changes(store: Any, checkpoint_id: str, workspace: Any, also: Iterable[str] = ()) -> list[FileHunks]:
    """Each file that differs from the checkpoint now, with its hunks. `also`: paths to compare
    besides those changed on disk and those unsaved at the checkpoint (the open buffers an editor
    holds the turn's edits in)."""
    changes = store.diff(checkpoint_id)
    unsaved = store.buffers(checkpoint_id)
    on_disk = {*changes.added, *changes.modified, *changes.deleted}
    files = []
    also = {*also, *(set(unsaved) & set(workspace.open_buffers()))}  # a closed one's text was given up
    for path in sorted({p for p in on_disk if not p.endswith("/")} | also):
        sides = checkpoint_sides(store, checkpoint_id, workspace, path, unsaved)
        if sides is None:
            status = "added" if path in changes.added else "deleted" if path in changes.deleted else "modified"
            files.append(FileHunks(path, status, binary=True))
        elif sides.before != sides.now:
            status = "added" if sides.before is None else "deleted" if sides.now is None else "modified"
            whole = (sides.before is None) != (sides.now is None)
            files.append(FileHunks(path, status, _hunks(_lines(sides.before), _lines(sides.now), whole)))
    return files


# ---- undo and keep -----------------------------------------------------------------------------


def plan_review(store: Any, checkpoint_id: str, workspace: Any, undo: Iterable[Pick],
                keep: Iterable[Pick]) -> ReviewPlan:
    """Checks every pick against the file as it is now and works out what undoing writes; a file
    with any pick that does not match (or that cannot be read) is refused whole."""
    plan = ReviewPlan(UndoResult())
    unsaved = store.buffers(checkpoint_id)
    by_path: dict[str, dict[str, dict[int, Pick]]] = {}
    for verdict, picks in (("undo", undo), ("keep", keep)):
        for pick in picks:
            try:
                rel = workspace.relative(pick.path)
            except WorkspaceError as err:
                plan.result.refused[pick.path] = str(err)
                continue
            by_path.setdefault(rel, {"undo": {}, "keep": {}})[verdict][pick.index] = Pick(rel, pick.index, pick.digest)
    for path, chosen in sorted(by_path.items()):
        try:
            write = _plan_file(store, checkpoint_id, workspace, path, chosen, unsaved)
        except (WorkspaceError, OSError) as err:
            plan.result.refused[path] = str(err)
            continue
        if write is not None:
            plan.writes[path] = write
        plan.result.undone += chosen["undo"].values()
        plan.result.kept += chosen["keep"].values()
    return plan


def _plan_file(store: Any, checkpoint_id: str, workspace: Any, path: str,
               chosen: dict[str, dict[int, Pick]], unsaved: dict[str, str]) -> _Write | None:
    sides = checkpoint_sides(store, checkpoint_id, workspace, path, unsaved)
    if sides is None:
        raise WorkspaceError(f"{path} is binary, too large or not a regular file; rewind the turn to restore it")
    old, new = _lines(sides.before), _lines(sides.now)
    hunks = _hunks(old, new, (sides.before is None) != (sides.now is None))
    picks = [*chosen["undo"].values(), *chosen["keep"].values()]
    if any(not (0 <= p.index < len(hunks) and hunks[p.index].digest == p.digest) for p in picks):
        raise WorkspaceError(f"{path} changed since its changes were listed; list them again")
    if not chosen["undo"]:
        return None
    now = sides.current  # what the file must still hold when the undo is written
    for i1, i2, j1, j2 in sorted((op for i in chosen["undo"] for op in hunks[i].ops), reverse=True):
        new[j1:j2] = old[i1:i2]  # from the end, so earlier indices still hold
    if sides.now is None and sides.stored is not None:  # the turn deleted it: its bytes and mode come back
        data = sides.stored.data
        if sides.unsaved:  # with the text the person had unsaved, in the file's encoding if it takes it
            fmt = decode_bytes(data)[1]  # checkpoint_sides decoded it
            with contextlib.suppress(UnicodeEncodeError):
                data = fmt.bom + "".join(new).encode(fmt.encoding)
        return _Write(data=data, mode=sides.stored.mode & 0o7777, now=now)
    return _Write(now=now) if sides.before is None and not new else _Write(text="".join(new), now=now)


async def apply_review(workspace: Any, plan: ReviewPlan) -> UndoResult:
    """Writes the plan's files through the workspace; a file that fails to write is moved from
    undone to refused, with the reason."""
    result = plan.result
    for path, write in plan.writes.items():
        try:
            if text_now(workspace, path) != write.now:
                raise WorkspaceError(f"{path} changed while its changes were undone; list them again")
            if write.data is not None:
                atomic_write(workspace.resolve(path), write.data, mode=write.mode)
            elif write.text is None:
                await workspace.apply_delete(path)
            else:
                await workspace.apply_text(path, write.text)
        except (WorkspaceError, OSError) as err:
            result.refused[path] = str(err)
            result.undone = [p for p in result.undone if p.path != path]
            result.kept = [p for p in result.kept if p.path != path]
    return result
