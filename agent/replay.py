"""A logged session brought back: the `session/update` events that replay its history to an
editor (ACP's `session/load`), and the conversation the agent continues from.

    records = read_session(path)
    for update in history_updates(records, registry):   # user and agent messages, tool calls
        await sink.emit(update)
    messages = conversation(records, system_prompt)       # what the model saw, to go on from

Diffs are replayed from what the log kept (tool `data` has the diff text, not the whole files),
so a replayed edit shows as its unified diff in the tool call's text.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from agent import events as ev
from agent.loop import answer_unanswered, tool_title
from agent.tools.base import ToolRegistry


def _absolute(workspace: str, path: Any) -> str | None:
    if not isinstance(path, str) or not path:
        return None
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(workspace, path))


def _tool_updates(record: dict[str, Any], tools: ToolRegistry, workspace: str) -> list[dict[str, Any]]:
    name, args = record["name"], record["arguments"]
    tool = tools.get(name)
    kind = tool.spec.kind if tool is not None else "other"
    path = _absolute(workspace, args.get("path") if isinstance(args, dict) else None)
    status = "completed" if record.get("status", "completed") == "completed" and not record.get("error") else "failed"
    text = record.get("result") or ""
    if record.get("error"):
        text = f"Error: {record['error']}" + (f"\n{text}" if text else "")
    diff = (record.get("data") or {}).get("diff")
    if diff:
        text += f"\n{diff}"
    return [
        ev.tool_call(record["call_id"], tool_title(name, args), kind, args,
                     [ev.location(path)] if path else None, status="pending"),
        ev.tool_call_update(record["call_id"], status, content=[ev.text_content(text[:4000])]),
    ]


def history_updates(records: Iterable[dict[str, Any]], tools: ToolRegistry) -> list[dict[str, Any]]:
    """The session's visible history as ACP session updates, in order."""
    updates: list[dict[str, Any]] = []
    workspace = "/"
    for record in records:
        kind = record.get("type")
        if kind == "session":
            workspace = record.get("workspace", "/")
        elif kind == "user_message":
            updates.append(ev.user_message_chunk(record["text"]))
        elif kind == "model_call" and record.get("text"):
            updates.append(ev.agent_message_chunk(record["text"]))
        elif kind == "tool_call":
            updates.extend(_tool_updates(record, tools, workspace))
    return updates


def conversation(records: Iterable[dict[str, Any]], system: str) -> list[dict[str, Any]]:
    """The chat messages of the logged session, as the loop builds them, to continue from."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for record in records:
        kind = record.get("type")
        if kind == "user_message":
            messages.append({"role": "user", "content": record["text"]})
        elif kind == "model_call":
            message: dict[str, Any] = {"role": "assistant", "content": record.get("text", "")}
            if record.get("tool_calls"):
                message["tool_calls"] = record["tool_calls"]
            messages.append(message)
        elif kind == "tool_call":
            content = record.get("result") or ""
            if record.get("error"):
                content = f"Error: {record['error']}" + (f"\n{content}" if content else "")
            messages.append({"role": "tool", "tool_call_id": record["call_id"], "name": record["name"],
                             "content": content})
    return answer_unanswered(messages)


def session_title(records: Iterable[dict[str, Any]]) -> str | None:
    """The first user message, shortened: what a session list shows."""
    for record in records:
        if record.get("type") == "user_message":
            line = " ".join(str(record["text"]).split())
            return line[:80] + ("..." if len(line) > 80 else "")
    return None



def call_ids(records: Iterable[dict[str, Any]]) -> set[str]:
    """The tool call ids a session used (new calls must not repeat them)."""
    return {r["call_id"] for r in records if r.get("type") == "tool_call" and r.get("call_id")}


def last_turn_checkpoint(records: Iterable[dict[str, Any]]) -> str | None:
    """The checkpoint taken before the last turn's first change (what undoing that turn restores)."""
    found: str | None = None
    for record in records:
        if record.get("type") == "user_message":
            found = None
        elif record.get("type") == "checkpoint" and found is None:
            found = record.get("checkpoint_id")
    return found
