"""What the harness tells the model, as `[harness]` user messages: the calls of its reply that
did not run (`calls_note`, after the call's tool results), and the work the person undid between
turns (`rewind_note`, `undo_note`); and a result for each call a cut-off turn left unanswered
(`answer_unanswered`). Without the last, the conversation still says the edits were
made, and the next turn builds on files that are no longer there (a top complaint about rewinds
that restore code but not what the agent believes, openai/codex#11626).

Each note is logged as a record's `harness_message` (the model call's; the restore's; the last
edit_review's of a review), which agent/replay.py `conversation` puts back when a session is
resumed.

Tests: .venv/bin/python -m pytest tests/agent/test_harness_notes.py tests/agent/test_loop.py
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

MAX_PATHS = 12
"""Paths named in a note; the rest are counted."""
MAX_ERRORS_SHOWN = 5
"""Malformed tool calls of one reply described to the model; the rest are counted."""
MAX_ERROR_CHARS = 300
"""Each description is cut to this (it may quote what the model sent)."""

READ_AGAIN = "Read a file again before you edit it."
NOT_RUN = "the turn ended before this call ran"
"""The result of a call a cut-off turn never started."""
STOPPED_RUNNING = "the turn was stopped while this call ran; it may have done part of its work"
"""The result of a call stopped part way (a command killed by a cancel)."""


def calls_note(errors: list, dropped: int, max_calls: int) -> str:
    """What the model is told about calls of its reply that did not run: malformed ones (the
    first few, each cut short: a flood of them costs one bounded message) and the `dropped`
    ones past the per-reply limit. "" when every call ran."""
    notes = []
    if errors:
        shown = "; ".join(e.message[:MAX_ERROR_CHARS] for e in errors[:MAX_ERRORS_SHOWN])
        more = f" (and {len(errors) - MAX_ERRORS_SHOWN} more)" if len(errors) > MAX_ERRORS_SHOWN else ""
        notes.append(f"{len(errors)} tool call(s) could not be read: {shown}{more}. Nothing was run for "
                     "them; send them again as valid JSON.")
    if dropped:
        notes.append(f"{dropped} tool call(s) past the first {max_calls} of one message were not "
                     f"run; send at most {max_calls} at a time.")
    return "[harness] " + " ".join(notes) if notes else ""


def named(paths: list[str]) -> str:
    """The first MAX_PATHS of `paths`, and how many more."""
    shown = ", ".join(paths[:MAX_PATHS])
    return shown + (f", and {len(paths) - MAX_PATHS} more" if len(paths) > MAX_PATHS else "")


def restored_paths(changes: Any, reverted_buffers: Iterable[str]) -> list[str]:
    """The files a rewind put back, sorted: on disk (a RestoreResult's changes, folders left
    out) and in the editor's open buffers."""
    return sorted({p for p in (*changes.added, *changes.modified, *changes.deleted) if not p.endswith("/")}
                  | set(reverted_buffers))


def rewind_note(checkpoint_id: str, label: str, changes: Any, reverted_buffers: Iterable[str]) -> str:
    """After a rewind: the checkpoint, and the paths put back (on disk, and open buffers)."""
    paths = restored_paths(changes, reverted_buffers)
    where = f"checkpoint {checkpoint_id}" + (f" ({label})" if label else "")
    if not paths:
        return f"[harness] The user restored the workspace to {where}; no file differed from it."
    return (f"[harness] The user restored the workspace to {where}: {len(paths)} file(s) are back as "
            f"they were then ({named(paths)}). What you changed in them after that is gone. {READ_AGAIN}")


def undo_note(undone: Iterable[Any]) -> str:
    """After changes were undone hunk by hunk: how many, in which files ("" when none was)."""
    per_file = Counter(pick.path for pick in undone)
    if not per_file:
        return ""
    files = [f"{path} ({n} change{'s' if n > 1 else ''})" for path, n in sorted(per_file.items())]
    return (f"[harness] The user undid {sum(per_file.values())} of your last turn's changes, which are back "
            f"to how they were before it: {named(files)}. Your other changes stay. {READ_AGAIN}")


def answer_unanswered(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A turn cut off (a crash, a cancel, a failure) can leave calls with no result; chat formats
    need a result per call (strict servers refuse the conversation otherwise), so those get one
    saying what happened."""
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] != "tool" and pending:
            out.extend({"role": "tool", "tool_call_id": c.get("id", ""), "name": c["function"]["name"],
                        "content": f"Error: {NOT_RUN}"} for c in pending)
            pending = []
        out.append(message)
        if message["role"] == "assistant":
            pending = list(message.get("tool_calls") or [])
        elif message["role"] == "tool":
            pending = [c for c in pending if c.get("id") != message["tool_call_id"]]
    if pending:
        out.extend({"role": "tool", "tool_call_id": c.get("id", ""), "name": c["function"]["name"],
                    "content": f"Error: {NOT_RUN}"} for c in pending)
    return out
