"""Editable diff review: the person changes an edit the model proposed before accepting it, and
their text, not the model's, reaches the file.

A permission question about edit_file or write_file shows the edit as a diff (agent/loop.py
`_proposal`). A client that lets the person edit that diff's new side answers with the text they
left (ACP `_meta.composer.revisedText`, server/hub.py); the asker returns it as a `Reviewed`:

    reply = Reviewed("allow_once", revised=text_the_person_left)
    revision = Revision.of(proposal, reply.revised, workspace)    # None: nothing to revise
    result = await apply_revision(ctx, revision)                  # instead of the model's call

The file may have changed while the person reviewed (they typed elsewhere in it, a formatter
ran): their revision is then merged into the file as it is now, line by line (`merge3`), and a
revision that overlaps such a change is refused with the file untouched, never written over it.
The model is told what the person changed, as a diff from its proposal, so its next step starts
from the file as it is; the session log keeps that diff and the call that would have written the
person's version (`corrected_call`): a human correction, which training/data.py turns into a
demonstration.

Tests: .venv/bin/python -m pytest tests/agent/test_review.py
"""

from __future__ import annotations

import asyncio
import difflib
from dataclasses import dataclass
from typing import Any

from agent.exceptions import WorkspaceError
from agent.tools.base import ToolContext, ToolResult
from agent.tools.files import apply_and_report, unified_diff
from agent.unidiff import equal_ends


@dataclass(frozen=True)
class Reviewed:
    """A permission answer (agent/permissions.py ANSWERS) and, with an allow, the whole text the
    person changed the proposed edit's file to (None: accepted as proposed)."""

    answer: str
    revised: str | None = None


def unpack(reply: str | Reviewed) -> tuple[str, str | None]:
    """(answer, revised text) of an asker's reply; a refusal never carries a revision."""
    if isinstance(reply, Reviewed):
        return reply.answer, reply.revised if reply.answer.startswith("allow") else None
    return reply, None


@dataclass(frozen=True)
class Revision:
    """An accepted edit the person changed: the file's text when they were asked (None: a new
    file), the model's proposal, and theirs."""

    tool: str
    path: str
    base: str | None
    proposed: str
    revised: str

    @classmethod
    def of(cls, tool: str, proposal: dict[str, Any], revised: str | None, workspace: Any) -> Revision | None:
        """The revision of the one diff `proposal` (an ACP ToolCallUpdate) showed; None when the
        person changed nothing or the question showed no diff to change."""
        diffs = [c for c in proposal.get("content") or [] if isinstance(c, dict) and c.get("type") == "diff"]
        if revised is None or len(diffs) != 1:
            return None
        diff = diffs[0]
        revised = _line_endings_kept(diff["newText"], revised)
        if revised == diff["newText"]:
            return None
        try:
            path = workspace.relative(diff["path"])
        except WorkspaceError:  # the path changed meaning since it was asked (a swapped link):
            return None         # the model's call then fails on it and writes nothing
        return cls(tool, path, diff.get("oldText"), diff["newText"], revised)


def _line_endings_kept(proposed: str, revised: str) -> str:
    """The person's text with the proposal's line breaks on the lines they did not change: an
    editor that shows the file with one kind of break (VS Code, a textarea) must not rewrite
    every line of a CRLF or mixed file."""
    if "\r" not in proposed:
        return revised.replace("\r\n", "\n")
    if "\n" not in proposed.replace("\r\n", ""):
        return revised.replace("\r\n", "\n").replace("\n", "\r\n")
    mine, theirs = proposed.splitlines(keepends=True), revised.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, [t.rstrip("\r\n") for t in mine], [t.rstrip("\r\n") for t in theirs],
                                      autojunk=False)
    out = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            out += theirs[j1:j2]
            continue  # an unchanged line keeps its break; one that gained or lost it follows the person
        out += [m if m.rstrip("\r\n") != m and t.rstrip("\r\n") != t else t for m, t in zip(mine[i1:i2], theirs[j1:j2])]
    return "".join(out)


def _changes(base: list[str], other: list[str]) -> list[tuple[int, int, list[str]]]:
    """The changes from `base` to `other` as (start, end, replacement): base[start:end] becomes
    replacement. The equal head and tail are cut first and difflib's heuristic for frequent
    lines is on, so a big file with a few changes diffs in well under a second (any valid diff
    merges correctly; a less tight one only clashes more often)."""
    head, tail = equal_ends(base, other)
    a, b = base[head:len(base) - tail], other[head:len(other) - tail]
    return [(head + i1, head + i2, b[j1:j2])
            for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b).get_opcodes() if tag != "equal"]


def _extent(base: list[str], change: tuple[int, int, list[str]]) -> tuple[int, int]:
    """The lines of `base` a change could stand at: an insertion or a deletion beside equal
    lines slides over them (inserting a blank line after a blank line is inserting it before)."""
    start, end, new = change
    lo, hi = start, end
    if start == end:  # an insertion: rotate it left and right over lines equal to its ends
        ring = list(new)
        while lo > 0 and base[lo - 1] == ring[-1]:
            lo, ring = lo - 1, [ring[-1], *ring[:-1]]
        ring = list(new)
        while hi < len(base) and base[hi] == ring[0]:
            hi, ring = hi + 1, [*ring[1:], ring[0]]
    elif not new:  # a deletion: shift the deleted run over equal lines
        while lo > 0 and base[lo - 1] == base[lo - 1 + end - start]:
            lo -= 1
        while hi < len(base) and base[hi] == base[hi - (end - start)]:
            hi += 1
    return lo, hi


def merge3(base: str, current: str, revised: str) -> str | None:
    """`revised`'s changes of `base` applied to `current` (base with other changes); None when
    changes of each side touch or adjoin the same lines, as git's merge would call a conflict
    (identical changes at one place agree)."""
    lines = [t.splitlines(keepends=True) for t in (base, current, revised)]
    ours, theirs = _changes(lines[0], lines[1]), _changes(lines[0], lines[2])
    theirs = [c for c in theirs if c not in ours]
    spans = [[_extent(lines[0], c) for c in side] for side in (ours, theirs)]
    if any(a1 <= b2 and b1 <= a2 for a1, a2 in spans[0] for b1, b2 in spans[1]):
        return None
    out, at = [], 0
    for start, end, replacement in sorted(ours + theirs, key=lambda c: (c[0], c[1])):
        out += lines[0][at:start] + replacement
        at = end
    return "".join(out + lines[0][at:])


QUOTE_LINES = 40
"""A corrected edit quotes at most this many lines; past that (lines that repeat) it writes the file."""


def corrected_call(revision: Revision) -> dict[str, Any]:
    """The call that writes the person's version from the text the model was asked about: the
    demonstration training takes from a correction (training/data.py). For an edit, the lines
    between the equal head and tail, widened by a line below, then above, until the quote is
    unique in the file, as the warm start's demonstrations quote (training/demos.py)."""
    path, base, revised = revision.path, revision.base, revision.revised
    if revision.tool == "write_file":
        return {"name": "write_file", "arguments": {"path": path, "content": revised}}
    if base is None:  # a new file; emptied by the person, it is written empty
        if not revised:
            return {"name": "write_file", "arguments": {"path": path, "content": ""}}
        return {"name": "edit_file", "arguments": {"path": path, "old_string": "", "new_string": revised}}
    old, new = base.splitlines(keepends=True), revised.splitlines(keepends=True)
    lo, tail = equal_ends(old, new)
    end_old, end_new = len(old) - tail, len(new) - tail
    while True:
        quote, replacement = "".join(old[lo:end_old]), "".join(new[lo:end_new])
        if quote.endswith("\n") and replacement.endswith("\n"):  # whole lines, quoted as read: no last break
            quote, replacement = quote[:-1], replacement[:-1]
        if quote.strip() and base.find(quote) == base.rfind(quote):  # once, overlaps counted
            return {"name": "edit_file", "arguments": {"path": path, "old_string": quote, "new_string": replacement}}
        if (lo == 0 and end_old == len(old)) or end_old - lo > QUOTE_LINES:  # no short unique quote
            return {"name": "write_file", "arguments": {"path": path, "content": revised}}
        if end_old < len(old) and (end_old - lo <= 1 or lo == 0):
            end_old, end_new = end_old + 1, end_new + 1
        else:
            lo -= 1


async def apply_revision(ctx: ToolContext, revision: Revision) -> ToolResult:
    """Writes the person's revision of an accepted edit (merged with what changed meanwhile) and
    tells the model how it differs from its proposal. Refuses, writing nothing, when the file
    changed under the revision's lines."""
    ws, rel = ctx.workspace, revision.path
    try:
        current = ws.read_text(rel) if ws.exists(rel) else None
    except WorkspaceError as err:
        return ToolResult(error=f"the user revised this edit, but {rel} cannot be read now: {err}")
    if current == revision.base:
        target = revision.revised
    elif current is not None and revision.base is not None:  # quadratic at worst: off the event loop
        target = await asyncio.to_thread(merge3, revision.base, current, revision.revised)
    else:
        target = None
    user_diff = unified_diff(rel, revision.proposed, revision.revised)
    data: dict[str, Any] = {"path": rel, "revised_by_user": True, "user_diff": user_diff,
                            "corrected_call": await asyncio.to_thread(corrected_call, revision)}
    if target is None:
        return ToolResult(
            error=f"the user accepted this edit with changes of their own, but {rel} changed in the same "
                  f"lines while they reviewed it, so nothing was written. Read {rel} again; their "
                  f"changes to your proposal were:\n{user_diff}", data=data)
    if target == current:
        return ToolResult(output=f"The user accepted this call but undid your change: {rel} is unchanged.",
                          data={**data, "diff": ""})
    via, fresh, lint_text = await apply_and_report(ctx, rel, current, target, 1)
    merged = " (merged with changes made to the file while they reviewed it)" if current != revision.base else ""
    output = (f"The user changed your proposed edit before accepting it; {rel} now holds their version"
              f"{merged}, {'applied in the editor' if via == 'editor' else 'written to disk'}. How it differs "
              f"from what you proposed:\n{user_diff}Build on their version; do not undo their changes.{lint_text}")
    return ToolResult(output=output, data={**data, "diff": unified_diff(rel, current or "", target),
                                           "old_text": current, "new_text": target, "applied_via": via,
                                           "new_diagnostics": fresh})
