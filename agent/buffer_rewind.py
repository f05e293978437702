"""A rewind's second half: the agent's edits of files open in the editor live unsaved in their
buffers, where no disk restore reaches, so after the disk is back (agent/checkpoints.py) each
buffer that still holds the agent's last edit gets its text at the checkpoint back, as an editor
edit the person can undo there:

    recorded, unsaved = store.buffers(checkpoint_id), workspace.unsaved()
    before = {path: workspace.buffer(path)[0] for path in workspace.open_buffers()}
    await store.arestore(checkpoint_id, buffers=unsaved)      # the backup records them too
    await rewind_buffers(store, checkpoint_id, workspace, before, unsaved, recorded)

The person's work is never overwritten: a buffer they typed in after the agent's edit (or during
the rewind) is refused with why, one the agent never edited is theirs, and a saved one is the
disk's (the editor reloads it). agent/session.py `Session.restore` runs both halves.

Tests: .venv/bin/python -m pytest tests/agent/test_unsaved_buffers.py tests/server/test_rewind.py
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.exceptions import EditorRefusedError
from agent.turn_review import checkpoint_sides

TYPED_AFTER = ("you changed it after the agent's edit; undo the turn's changes there one by one "
               "(Review changes, :ComposerChanges), which keeps yours")


@dataclass
class BufferRewind:
    reverted: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    """path -> why its buffer was not put back."""

    def to_dict(self) -> dict[str, Any]:
        return {"reverted": self.reverted, "refused": self.refused}


async def rewind_buffers(store: Any, checkpoint_id: str, workspace: Any, before: dict[str, str],
                         unsaved: dict[str, str], recorded: dict[str, str]) -> BufferRewind:
    """After the disk restore. `before`: every open buffer's text just before the rewind;
    `unsaved`: which of them were unsaved then; `recorded`: the checkpoint's unsaved buffers
    (`store.buffers`). Without an editor to edit them, buffers are left alone."""
    result = BufferRewind()
    if workspace.edit_sink is None:
        return result
    for path, text in sorted(before.items()):
        if path not in unsaved and path not in recorded:
            continue  # saved: the disk restore covers it, and the editor reloads it
        try:
            why = await _rewind_one(store, checkpoint_id, workspace, path, text, recorded)
        except Exception as err:  # an editor's failure (a dropped connection too) is reported per buffer
            why = f"{type(err).__name__}: {err}"
        if why == "":
            result.reverted.append(path)
        elif why is not None:
            result.refused[path] = why
    return result


async def _rewind_one(store: Any, checkpoint_id: str, workspace: Any, path: str, text: str,
                      recorded: dict[str, str]) -> str | None:
    """"" when the buffer went back, None when it needed nothing or is the person's, else why not."""
    sides = checkpoint_sides(store, checkpoint_id, workspace, path, recorded)
    if sides is None or sides.now is None or sides.before == sides.now:
        return None  # binary, closed, or already as it was (undone there, reloaded)
    held = workspace.holds_last_edit(path, text)
    if held is None:
        return None  # no edit of the agent's: the person's own unsaved text
    if not held or sides.now != text:
        return TYPED_AFTER
    if sides.before is None:
        return "the turn created this file: close its buffer without saving to drop it"
    try:
        await workspace.apply_text(path, sides.before)
    except EditorRefusedError:
        return "the editor did not take the edit (its text changed meanwhile); rewind again"
    return ""
