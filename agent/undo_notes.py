"""What the model is told when the person undoes its work between turns: a rewind to a checkpoint,
or some of a turn's changes undone hunk by hunk. Without it the conversation still says the
edits were made, and the next turn builds on files that are no longer there (a top complaint
about rewinds that restore code but not what the agent believes, openai/codex#11626).

The note is a `[harness]` user message the session appends to the conversation at once (so the
next turn's prompt holds it, before the person's next request) and logs as the record's
`harness_message`, which agent/replay.py `conversation` puts back when a session is resumed.

Tests: .venv/bin/python -m pytest tests/agent/test_undo_notes.py
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

MAX_PATHS = 12
"""Paths named in a note; the rest are counted."""

READ_AGAIN = "Read a file again before you edit it."


def _named(paths: list[str]) -> str:
    shown = ", ".join(paths[:MAX_PATHS])
    return shown + (f", and {len(paths) - MAX_PATHS} more" if len(paths) > MAX_PATHS else "")


def rewind_note(checkpoint_id: str, label: str, changes: Any, reverted_buffers: Iterable[str]) -> str:
    """After a rewind: the checkpoint, and the paths put back (on disk, and open buffers)."""
    paths = sorted({p for p in (*changes.added, *changes.modified, *changes.deleted) if not p.endswith("/")}
                   | set(reverted_buffers))
    where = f"checkpoint {checkpoint_id}" + (f" ({label})" if label else "")
    if not paths:
        return f"[harness] The user restored the workspace to {where}; no file differed from it."
    return (f"[harness] The user restored the workspace to {where}: {len(paths)} file(s) are back as "
            f"they were then ({_named(paths)}). What you changed in them after that is gone. {READ_AGAIN}")


def undo_note(undone: Iterable[Any]) -> str:
    """After changes were undone hunk by hunk: how many, in which files ("" when none was)."""
    per_file = Counter(pick.path for pick in undone)
    if not per_file:
        return ""
    files = [f"{path} ({n} change{'s' if n > 1 else ''})" for path, n in sorted(per_file.items())]
    return (f"[harness] The user undid {sum(per_file.values())} of your last turn's changes, which are back "
            f"to how they were before it: {_named(files)}. Your other changes stay. {READ_AGAIN}")
