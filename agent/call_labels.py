"""How a tool call is named for people: the title an editor shows for it, and the label of the
checkpoint taken before a batch of calls (`composer-agent checkpoints --list` shows it).

    tool_title("edit_file", {"path": "stats.py", ...})                 # "edit_file stats.py"
    checkpoint_label([call, ...])                       # "before edit_file stats.py, run_terminal pytest"
"""

from __future__ import annotations

import os
import re
from typing import Any

from model.toolcalls import ToolCall


def tool_title(name: str, arguments: Any) -> str:
    """What an editor shows for a call: the tool and its main argument."""
    args = arguments if isinstance(arguments, dict) else {}
    detail = args.get("path") or args.get("pattern") or args.get("command") or args.get("query") or ""
    return f"{name} {detail}".strip()[:200]


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
