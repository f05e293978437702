"""A logged session brought back: the `session/update` events that replay its history to an
editor (ACP's `session/load`), and the conversation the agent continues from.

    records = read_session(path)
    for update in history_updates(records, registry):   # user and agent messages, tool calls
        await sink.emit(update)
    messages = conversation(records, system_prompt)       # what the model saw, to go on from
    tokens = token_state(records, policy.model_id)        # the ids to go on from, token-natively

Diffs are replayed from what the log kept (tool `data` has the diff text, not the whole files),
so a replayed edit shows as its unified diff in the tool call's text.

A loaded session continues from the logged ids of its last model call (its parent chain rebuilt
from the deltas) wherever the log holds them; where it does not (a version 1 log, a text-only
call, ids withheld, another model), the next prompt is rendered from the conversation's text and
says so (`prefix_break: rebuilt_from_text` or `model_changed`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agent import events as ev
from agent.call_labels import tool_title
from agent.harness_notes import answer_unanswered
from agent.tools.base import ToolRegistry


def _absolute(workspace: str, path: Any) -> str | None:
    if not isinstance(path, str) or not path:
        return None
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(workspace, path))


def _tool_updates(record: dict[str, Any], tools: ToolRegistry, workspace: str) -> list[dict[str, Any]]:
    name, args = record["name"], record["arguments"]
    kind = tools.kind(name)
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
    for record in remembered(records):  # a turn taken back out of the conversation is not shown either
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
    """The chat messages of the logged session, as the loop builds them, to continue from: a
    call's tool results in the order of its calls (the log has them in the order they ended),
    then the harness's corrective message, what the model was told of a rewind or of changes
    undone between turns, and without the turns a rewind took out of the conversation."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    harness: str | None = None
    results: dict[str, dict[str, Any]] = {}
    order: list[str] = []

    def settle() -> None:
        nonlocal harness
        messages.extend(results.pop(call_id) for call_id in order if call_id in results)
        messages.extend(results.values())
        results.clear()
        if harness:
            messages.append({"role": "user", "content": harness})
            harness = None

    for record in remembered(records):
        kind = record.get("type")
        told = record.get("harness_message") if kind in ("restore", "edit_review") else None  # agent/harness_notes.py
        if told or kind in ("user_message", "model_call"):
            settle()
        if told:
            messages.append({"role": "user", "content": told})
        elif kind == "user_message":
            messages.append({"role": "user", "content": record["text"]})
        elif kind == "model_call":
            message: dict[str, Any] = {"role": "assistant", "content": record.get("text", "")}
            if record.get("tool_calls"):
                message["tool_calls"] = record["tool_calls"]
            messages.append(message)
            harness = record.get("harness_message")
            order = [call.get("id") for call in record.get("tool_calls") or []]
        elif kind == "tool_call":
            content = record.get("result") or ""
            if record.get("error"):
                content = f"Error: {record['error']}" + (f"\n{content}" if content else "")
            results[record["call_id"]] = {"role": "tool", "tool_call_id": record["call_id"], "name": record["name"],
                                          "content": content}
    settle()
    return answer_unanswered(messages)


@dataclass
class TokenState:
    """Where a logged session's token stream stands (agent/trajectory.py TokenStream.restore)."""

    calls: int
    """Model calls logged: new ones are numbered after them."""
    call_id: str | None
    """The last call whose prompt and completion ids the log holds whole (None: none)."""
    ids: list[int]
    routing_known: int
    tools: list[dict[str, Any]] | None
    pending: str | None
    """The break the next prompt carries: rebuilt_from_text, model_changed, redaction, or None."""


def token_state(records: list[dict[str, Any]], model_id: str | None) -> TokenState:
    """The ids a loaded session goes on from: its last model call's prompt and completion, each
    call's prompt rebuilt from its parent's ids and its own delta (`_chain_ids`)."""
    header = next((r for r in records if r.get("type") == "session"), {})
    calls = [r for r in records if r.get("type") == "model_call"]
    numbers = [int(m.group(1)) for r in calls if (m := re.fullmatch(r"m(\d+)", str(r.get("call_id", ""))))]
    count = max([len(calls), *numbers])
    tools = header.get("tools")
    if not calls:
        return TokenState(count, None, [], 0, tools, None)
    ids, routing = _chain_ids(calls)
    last = calls[-1]
    model = header.get("model", {}).get("id") if isinstance(header.get("model"), dict) else None
    if ids is None or last.get("text_only"):
        pending = "rebuilt_from_text"
    elif model_id is not None and model not in (None, model_id):
        pending = "model_changed"
    elif any(r.get("forgot_turn") for r in records[max(i for i, r in enumerate(records) if r is last):]):
        return TokenState(count, None, [], 0, tools, "rewound")  # a forgotten turn's ids: rendered from text
    else:
        pending = "redaction" if last.get("redactions") else None
    return TokenState(count, last.get("call_id") if ids is not None else None, ids or [], routing if ids else 0,
                      tools, pending)



def _chain_ids(calls: list[dict[str, Any]]) -> tuple[list[int] | None, int]:
    """The last call's prompt and completion ids and how many positions' routing the log holds,
    rebuilt along its chain of parents (a call after a forgotten turn extends an older call than
    the one before it); None when a link is missing or holds no ids. Linear in the session."""
    by_id = {r.get("call_id"): r for r in calls}
    chain, record = [], calls[-1]
    while record is not None and len(chain) <= len(calls):
        chain.append(record)
        parent = record.get("parent")
        record = None if parent is None else by_id.get(parent, {})
    if chain[-1] == {} or chain[-1].get("parent") is not None:
        return None, 0  # a parent the log does not hold
    ids: list[int] = []
    routing = 0
    for record in reversed(chain):
        prompt, completion = record.get("prompt_token_ids") or [], record.get("completion_token_ids") or []
        if record.get("version", 1) < 2 or not (prompt or completion):
            return None, 0
        del ids[(record.get("prefix_len") or 0) if record.get("parent") is not None else 0:]
        start = record.get("routed_experts_start", len(ids))
        ids += prompt + completion
        rows = record.get("routed_experts")
        routing = start + len(rows) if rows is not None else min(routing, start)
    return ids, routing


def last_rewind(records: Iterable[dict[str, Any]]) -> str | None:
    """The checkpoint the session was last rewound to, when neither a request nor an undo of
    changes came after that rewind."""
    found = None
    for record in records:
        if record.get("type") == "user_message" or (record.get("type") == "edit_review" and not record.get("accepted")):
            found = None
        elif record.get("type") == "restore":
            found = record.get("checkpoint_id")
    return found


def remembered(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records without the turns a rewind took out of the conversation (`forgot_turn`): from
    the turn's request to the rewind that forgot it."""
    kept: list[dict[str, Any]] = []
    turn_start: int | None = None
    for record in records:
        if record.get("type") == "user_message":
            turn_start = len(kept)
        elif record.get("forgot_turn") and turn_start is not None:
            del kept[turn_start:]
            turn_start = None
        kept.append(record)
    return kept


def last_request(records: Iterable[dict[str, Any]]) -> str | None:
    """The text of the session's last request, the turn a forget would take out of the
    conversation; None when that turn is forgotten already (a forget never reaches further back)."""
    last = None
    for record in records:
        if record.get("type") == "user_message":
            last = record["text"]
        elif record.get("forgot_turn"):
            last = None
    return last


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
        if record.get("type") == "user_message" or record.get("forgot_turn"):
            found = None
        elif record.get("type") == "checkpoint" and found is None:
            found = record.get("checkpoint_id")
    return found
