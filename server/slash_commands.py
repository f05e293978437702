"""Slash commands: what a person types in the prompt box to act on the session instead of asking
the model. ACP clients (Zed, JetBrains, CodeCompanion) have no undo request of their own, so this
is how their users undo a turn; they learn the commands from an `available_commands_update` and
complete them. Every client's prompt passes through here first (server/hub.py).

    /undo           the last turn's changes go back: its edits, what its shell commands changed,
                    and the editor's buffers it left unsaved (as `composer/rewind` does)
    /undo forget    the same, and the turn leaves the conversation: the model forgets it too
                    (a turn that only answered just leaves the conversation)

A prompt that is one of these runs it, answers with a message and ends (`end_turn`) without
calling the model; any other prompt, `/usr/bin/env is missing` included, goes to the model.
`/undo` again says the turn is undone already (it never reverts what the person did since), and
`/undo forget` after `/undo` only takes the turn out of the conversation.

Tests: .venv/bin/python -m pytest tests/server/test_slash_commands.py tests/server/test_acp.py -k undo
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable
from typing import Any

from agent.checkpoints import CheckpointError
from agent.harness_notes import named, restored_paths
from agent.session import Session

COMMANDS: list[dict[str, Any]] = [
    {"name": "undo",
     "description": "Undo the last turn's changes, shell commands' included; `/undo forget` also takes the turn "
                    "out of the conversation",
     "input": {"hint": "forget (optional): the model forgets the turn too"}},
]

Command = Callable[[Session, str], Awaitable[str]]


def parse_command(text: str) -> tuple[str, str] | None:
    """(name, argument) when the prompt is one of COMMANDS, else None."""
    words = text.split(maxsplit=1)
    name = words[0][1:] if words and words[0].startswith("/") else ""
    return (name, words[1].strip() if len(words) > 1 else "") if name in RUN else None


async def run_command(session: Session, name: str, argument: str) -> str:
    """Runs a parsed command; returns what the person is told."""
    return await RUN[name](session, argument)


async def _undo(session: Session, argument: str) -> str:
    if argument not in ("", "forget"):
        return f"`/undo` takes nothing or `forget`, not {argument!r}: nothing was undone."
    forget, checkpoint = argument == "forget", session.agent.turn_checkpoint
    if checkpoint is None and forget:
        try:
            session.forget_turn()
        except RuntimeError as err:
            return f"Nothing was forgotten: {err}."
        return "The last turn changed no file; it is out of the conversation now: the model no longer knows of it."
    if checkpoint is None:
        return "Nothing to undo: the last turn changed no file (`/undo forget` takes it out of the conversation)."
    if session.turn_undone and not forget:
        return "The last turn is undone already; `/undo forget` takes it out of the conversation too."
    undone_before = session.turn_undone
    try:
        result, buffers = await session.restore(checkpoint, forget=forget)
    except (CheckpointError, RuntimeError, OSError) as err:
        return f"Nothing was undone: {err}"
    if undone_before:
        return "The turn is out of the conversation now; its changes were undone already, and nothing changed again."
    return "\n".join(_undo_report(session, result, buffers, forget))


def _undo_report(session: Session, result: Any, buffers: Any, forget: bool) -> list[str]:
    kept = set(result.skipped) | set(buffers.refused)
    files = [p for p in restored_paths(result.changes, buffers.reverted) if p not in kept]
    lines = [f"Undid the last turn: {len(files)} file(s) are back as they were before it: {named(files)}."
             if files else "Undid the last turn: no file differed from before it."]
    if result.skipped:
        lines.append(f"Left as they are, too big for a checkpoint: {', '.join(sorted(result.skipped))}.")
    if buffers.refused:
        typed = "; ".join(f"{path} ({why})" for path, why in sorted(buffers.refused.items()))
        lines.append(f"Left as they are in the editor, since you changed them after the agent: {typed}.")
    if forget:
        lines.append("The turn is out of the conversation too: the model no longer knows of it.")
    if result.backup is not None:
        command = shlex.join(["composer-agent", "checkpoints", "--workspace", str(session.workspace.root),
                              "--restore", result.backup.id])
        lines.append(f"The files as they were before the undo are checkpoint {result.backup.id}: `{command}` "
                     "puts them back on the disk.")
    return lines


RUN: dict[str, Command] = {"undo": _undo}
