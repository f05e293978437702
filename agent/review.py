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
from the file as it is; the session log keeps that diff (a human correction, for training).

Tests: .venv/bin/python -m pytest tests/agent/test_review.py
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from agent.exceptions import WorkspaceError
from agent.tools.base import ToolContext, ToolResult
from agent.tools.files import apply_and_report, unified_diff


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

    path: str
    base: str | None
    proposed: str
    revised: str

    @classmethod
    def of(cls, proposal: dict[str, Any], revised: str | None, workspace: Any) -> Revision | None:
        """The revision of the one diff `proposal` (an ACP ToolCallUpdate) showed; None when the
        person changed nothing or the question showed no diff to change."""
        diffs = [c for c in proposal.get("content") or [] if isinstance(c, dict) and c.get("type") == "diff"]
        if revised is None or len(diffs) != 1:
            return None
        diff = diffs[0]
        if "\r" not in diff["newText"]:  # an editor's CRLF document of the proposal's \n text
            revised = revised.replace("\r\n", "\n")
        if revised == diff["newText"]:
            return None
        return cls(workspace.relative(diff["path"]), diff.get("oldText"), diff["newText"], revised)


def _changes(base: list[str], other: list[str]) -> list[tuple[int, int, list[str]]]:
    """The changes from `base` to `other` as (start, end, replacement): base[start:end] becomes
    replacement."""
    matcher = difflib.SequenceMatcher(None, base, other, autojunk=False)
    return [(i1, i2, other[j1:j2]) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def _clash(a: tuple[int, int, list[str]], b: tuple[int, int, list[str]]) -> bool:
    """Whether two changes of the same base touch the same lines (an insertion clashes with a
    change that starts or ends at its point: which goes first is not known)."""
    (a1, a2, _), (b1, b2, _) = a, b
    if a1 == a2 or b1 == b2:
        return b1 <= a1 <= b2 if a1 == a2 else a1 <= b1 <= a2
    return a1 < b2 and b1 < a2


def merge3(base: str, current: str, revised: str) -> str | None:
    """`revised`'s changes of `base` applied to `current` (base with other changes); None when a
    change of each touches the same lines (identical changes agree)."""
    lines = [t.splitlines(keepends=True) for t in (base, current, revised)]
    ours, theirs = _changes(lines[0], lines[1]), _changes(lines[0], lines[2])
    theirs = [c for c in theirs if c not in ours]
    if any(_clash(a, b) for a in ours for b in theirs):
        return None
    out, at = [], 0
    for start, end, replacement in sorted(ours + theirs, key=lambda c: (c[0], c[1])):
        out += lines[0][at:start] + replacement
        at = end
    return "".join(out + lines[0][at:])


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
    elif current is not None and revision.base is not None:
        target = merge3(revision.base, current, revision.revised)
    else:
        target = None
    user_diff = unified_diff(rel, revision.proposed, revision.revised)
    data: dict[str, Any] = {"path": rel, "revised_by_user": True, "user_diff": user_diff}
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
