"""How a tool call is named and shown to people: the title an editor shows for it, the file it
points at, what its result shows (text and the diff of an edit), and the label of the checkpoint
taken before a batch of calls (`composer-agent checkpoints --list` shows it).

    tool_title("edit_file", {"path": "stats.py", ...})                 # "edit_file stats.py"
    call_locations(workspace, call)                                    # [{"path": "/ws/stats.py"}]
    result_content(workspace, result)                                  # [text, diff] for the editor
    permission_proposal(call, "edit", workspace, (path, old, new))     # what a permission question shows
    checkpoint_label([call, ...])                       # "before edit_file stats.py, run_terminal pytest"
"""

from __future__ import annotations

import os
import re
from typing import Any

from agent import events as ev
from agent.tools.base import ToolResult
from model.toolcalls import ToolCall

SHOWN_CHARS = 4000
"""What a card in the editor shows of a call's text: a result's head, a running command's tail
(agent/live_output.py); the model and the log get theirs in full."""


def tool_title(name: str, arguments: Any) -> str:
    """What an editor shows for a call: the tool and its main argument."""
    args = arguments if isinstance(arguments, dict) else {}
    detail = args.get("path") or args.get("pattern") or args.get("command") or args.get("query") or ""
    return f"{name} {detail}".strip()[:200]


def absolute_path(workspace: Any, path: Any) -> str | None:
    """The workspace path as the editor names it; None for a path the tool itself will refuse."""
    if not isinstance(path, str):
        return None
    try:
        return str(workspace.resolve(path))
    except Exception:
        return None


def call_locations(workspace: Any, call: ToolCall) -> list[dict[str, Any]]:
    """The file a call is about, for the editor to follow (ACP's `locations`)."""
    path = call.arguments.get("path") if isinstance(call.arguments, dict) else None
    absolute = absolute_path(workspace, path)
    return [ev.location(absolute)] if absolute else []


def result_content(workspace: Any, result: ToolResult) -> list[dict[str, Any]]:
    """What the editor shows for a finished call: the head of its text and an edit's diff."""
    content = [ev.text_content(result.for_model()[:SHOWN_CHARS])]
    absolute = absolute_path(workspace, result.data.get("path"))
    if absolute and "new_text" in result.data:
        content.append(ev.diff_content(absolute, result.data.get("old_text"), result.data["new_text"]))
    return content


def permission_proposal(call: ToolCall, kind: str, workspace: Any,
                        proposed: tuple[str, str | None, str] | None) -> dict[str, Any]:
    """The call as the person is asked about it: ACP's ToolCallUpdate, with the diff an edit
    would make (`proposed`: path, old text, new text, from the tool's preview) so they review
    the change, not its JSON."""
    update: dict[str, Any] = {"toolCallId": call.id, "title": tool_title(call.name, call.arguments), "kind": kind,
                              "status": "pending", "rawInput": call.arguments,
                              "locations": call_locations(workspace, call)}
    absolute = absolute_path(workspace, proposed[0]) if proposed else None
    if absolute:
        update["content"] = [ev.diff_content(absolute, proposed[1], proposed[2])]
    return update


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def checkpoint_label(calls: list[ToolCall]) -> str:
    """What a checkpoint comes before: each call's tool and path, or its command's program (never
    the command's arguments or `NAME=value` prefixes, which may hold a secret), printable
    characters only, as `composer-agent checkpoints --list` shows it."""
    def one(call: ToolCall) -> str:
        args = call.arguments if isinstance(call.arguments, dict) else {}
        path, command = args.get("path"), args.get("command")
        if isinstance(path, str) and path:
            return f"{call.name} {path}"
        words = command.split() if isinstance(command, str) else []
        program = next((w for w in words if w != "env" and not _ASSIGNMENT.match(w)), None)
        return f"{call.name} {os.path.basename(program)}" if program else call.name

    label = "before " + ", ".join(one(c) for c in calls)
    return "".join(ch if ch.isprintable() else "?" for ch in label)[:200]
