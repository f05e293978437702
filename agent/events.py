"""Session events in ACP's vocabulary: builders for `session/update` payloads (the `update`
object of ACP v1's `session/update` notification, field names exactly as ACP spells them), and
the sinks that carry them: an editor connection, `composer-agent --json`, or a test's Recorder.

    await sink.emit(agent_message_chunk("Looking at the test..."))
    await sink.emit(tool_call("c1", "Read a.py", "read", raw_input={"path": "a.py"},
                              locations=[location("/ws/a.py", 3)]))
    await sink.emit(tool_call_update("c1", "completed", content=[text_content("...")]))
    await sink.emit(tool_call_update("c2", "completed",
                                     content=[diff_content("/ws/a.py", old, new)]))
    await sink.emit(plan([{"content": "fix", "priority": "high", "status": "in_progress"}]))
    await sink.emit(usage_update(used=5123, size=32768))

Vendor data (token ids, logprobs, timings) goes under `_meta`, namespaced: `meta=vendor_meta(...)`
gives `{"_meta": {"composer": {...}}}`; ACP forbids new root fields. Paths are absolute and lines
1-based, as ACP requires. `validate_update` checks a payload against UPDATE_SCHEMA, the shapes
of ACP v1's session updates (agentclientprotocol schema/v1), and the Recorder runs it on every
event, so tests of the loop check what editors would receive.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any, Literal, Protocol, TextIO

import jsonschema

VENDOR = "composer"
"""The `_meta` namespace of Composer's vendor data."""

ToolKind = Literal["read", "edit", "delete", "move", "search", "execute", "think", "fetch",
                   "switch_mode", "other"]
ToolStatus = Literal["pending", "in_progress", "completed", "failed"]
TOOL_KINDS = ("read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other")
TOOL_STATUSES = ("pending", "in_progress", "completed", "failed")
PLAN_PRIORITIES = ("high", "medium", "low")
PLAN_STATUSES = ("pending", "in_progress", "completed")

_META = {"type": "object"}
_CONTENT_BLOCK = {
    "type": "object",
    "required": ["type"],
    "properties": {"type": {"enum": ["text", "image", "audio", "resource_link", "resource"]}, "_meta": _META},
    "allOf": [
        {"if": {"properties": {"type": {"const": "text"}}},
         "then": {"required": ["text"], "properties": {"text": {"type": "string"}}}},
        {"if": {"properties": {"type": {"enum": ["image", "audio"]}}},
         "then": {"required": ["data", "mimeType"]}},
        {"if": {"properties": {"type": {"const": "resource_link"}}}, "then": {"required": ["uri", "name"]}},
        {"if": {"properties": {"type": {"const": "resource"}}}, "then": {"required": ["resource"]}},
    ],
}
_TOOL_CONTENT = {
    "type": "object",
    "required": ["type"],
    "oneOf": [
        {"properties": {"type": {"const": "content"}, "content": _CONTENT_BLOCK, "_meta": _META},
         "required": ["content"], "additionalProperties": False},
        {"properties": {"type": {"const": "diff"}, "path": {"type": "string", "pattern": "^/"},
                        "oldText": {"type": ["string", "null"]}, "newText": {"type": "string"}, "_meta": _META},
         "required": ["path", "newText"], "additionalProperties": False},
        {"properties": {"type": {"const": "terminal"}, "terminalId": {"type": "string"}, "_meta": _META},
         "required": ["terminalId"], "additionalProperties": False},
    ],
}
_TOOL_FIELDS = {
    "sessionUpdate": {}, "_meta": _META, "toolCallId": {"type": "string", "minLength": 1},
    "title": {"type": "string"}, "kind": {"enum": list(TOOL_KINDS)}, "status": {"enum": list(TOOL_STATUSES)},
    "content": {"type": "array", "items": _TOOL_CONTENT},
    "locations": {"type": "array", "items": {
        "type": "object", "required": ["path"], "additionalProperties": False,
        "properties": {"path": {"type": "string", "pattern": "^/"}, "line": {"type": "integer", "minimum": 1},
                       "_meta": _META}}},
    "rawInput": {}, "rawOutput": {},
}


def _variant(name: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"if": {"properties": {"sessionUpdate": {"const": name}}},
            "then": {"properties": {"sessionUpdate": {}, "_meta": _META, **properties},
                     "required": required, "additionalProperties": False}}


_CHUNK = {"content": _CONTENT_BLOCK, "messageId": {"type": "string"}}
UPDATE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "ACP v1 session/update `update` payload",
    "type": "object",
    "required": ["sessionUpdate"],
    "properties": {"sessionUpdate": {"enum": [
        "user_message_chunk", "agent_message_chunk", "agent_thought_chunk", "tool_call",
        "tool_call_update", "plan", "available_commands_update", "current_mode_update",
        "config_option_update", "session_info_update", "usage_update"]}},
    "allOf": [
        _variant("user_message_chunk", _CHUNK, ["content"]),
        _variant("agent_message_chunk", _CHUNK, ["content"]),
        _variant("agent_thought_chunk", _CHUNK, ["content"]),
        _variant("tool_call", _TOOL_FIELDS, ["toolCallId", "title"]),
        _variant("tool_call_update", _TOOL_FIELDS, ["toolCallId"]),
        _variant("plan", {"entries": {"type": "array", "items": {
            "type": "object", "required": ["content", "priority", "status"], "additionalProperties": False,
            "properties": {"content": {"type": "string"}, "priority": {"enum": list(PLAN_PRIORITIES)},
                           "status": {"enum": list(PLAN_STATUSES)}, "_meta": _META}}}}, ["entries"]),
        _variant("usage_update", {
            "used": {"type": "integer", "minimum": 0}, "size": {"type": "integer", "minimum": 0},
            "cost": {"type": "object", "required": ["amount", "currency"], "additionalProperties": False,
                     "properties": {"amount": {"type": "number"}, "currency": {"type": "string"}}}},
            ["used", "size"]),
        _variant("session_info_update", {"title": {"type": ["string", "null"]},
                                         "updatedAt": {"type": ["string", "null"]}}, []),
        _variant("current_mode_update", {"currentModeId": {"type": "string"}}, ["currentModeId"]),
        _variant("available_commands_update", {"availableCommands": {"type": "array"}}, ["availableCommands"]),
        _variant("config_option_update", {"configOptions": {"type": "array"}}, ["configOptions"]),
    ],
}
_VALIDATOR = jsonschema.Draft202012Validator(UPDATE_SCHEMA)


def validate_update(update: dict[str, Any]) -> None:
    """Raises ValueError when `update` is not a valid ACP v1 session update."""
    error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(update))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(update)"
        raise ValueError(f"invalid {update.get('sessionUpdate')!r} session update at {where}: {error.message}")


def _with_meta(update: dict[str, Any], meta: dict[str, Any] | None) -> dict[str, Any]:
    if meta:
        update["_meta"] = meta
    return update


def _absolute(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError(f"ACP paths are absolute, got {path!r}: resolve it against the workspace root")
    return path


def _check(value: str, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def vendor_meta(**data: Any) -> dict[str, Any]:
    """`_meta` contents for Composer's vendor data: {"composer": {...}}."""
    return {VENDOR: data}


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _chunk(kind: str, text: str, message_id: str | None, meta: dict[str, Any] | None) -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": kind, "content": text_block(text)}
    if message_id is not None:
        update["messageId"] = message_id
    return _with_meta(update, meta)


def agent_message_chunk(text: str, *, message_id: str | None = None,
                        meta: dict[str, Any] | None = None) -> dict[str, Any]:
    return _chunk("agent_message_chunk", text, message_id, meta)


def agent_thought_chunk(text: str, *, message_id: str | None = None,
                        meta: dict[str, Any] | None = None) -> dict[str, Any]:
    return _chunk("agent_thought_chunk", text, message_id, meta)


def user_message_chunk(text: str, *, message_id: str | None = None,
                       meta: dict[str, Any] | None = None) -> dict[str, Any]:
    return _chunk("user_message_chunk", text, message_id, meta)


def location(path: str, line: int | None = None) -> dict[str, Any]:
    """A place a tool call touches (editors follow along); `line` is 1-based."""
    loc: dict[str, Any] = {"path": _absolute(path)}
    if line is not None:
        if line < 1:
            raise ValueError(f"ACP lines are 1-based, got {line}")
        loc["line"] = line
    return loc


def text_content(text: str) -> dict[str, Any]:
    """Tool call content showing text (Markdown)."""
    return {"type": "content", "content": text_block(text)}


def diff_content(path: str, old_text: str | None, new_text: str) -> dict[str, Any]:
    """Tool call content showing an edit; `old_text` None means a new file."""
    return {"type": "diff", "path": _absolute(path), "oldText": old_text, "newText": new_text}


def terminal_content(terminal_id: str) -> dict[str, Any]:
    """Tool call content embedding a client terminal's live output."""
    return {"type": "terminal", "terminalId": terminal_id}


def _tool_fields(update: dict[str, Any], *, title: str | None, kind: str | None, status: str | None,
                 content: Iterable[dict[str, Any]] | None, locations: Iterable[dict[str, Any]] | None,
                 raw_input: Any, raw_output: Any) -> dict[str, Any]:
    if title is not None:
        update["title"] = title
    if kind is not None:
        update["kind"] = _check(kind, TOOL_KINDS, "tool kind")
    if status is not None:
        update["status"] = _check(status, TOOL_STATUSES, "tool call status")
    if content is not None:
        update["content"] = list(content)
    if locations is not None:
        update["locations"] = list(locations)
    if raw_input is not None:
        update["rawInput"] = raw_input
    if raw_output is not None:
        update["rawOutput"] = raw_output
    return update


def tool_call(call_id: str, title: str, kind: ToolKind = "other", raw_input: Any = None,
              locations: Iterable[dict[str, Any]] | None = None, *, status: ToolStatus = "pending",
              content: Iterable[dict[str, Any]] | None = None,
              meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """A new tool call (status pending while it waits for input or permission)."""
    update = {"sessionUpdate": "tool_call", "toolCallId": call_id}
    return _with_meta(_tool_fields(update, title=title, kind=kind, status=status, content=content,
                                   locations=locations, raw_input=raw_input, raw_output=None), meta)


def tool_call_update(call_id: str, status: ToolStatus | None = None, *,
                     content: Iterable[dict[str, Any]] | None = None, raw_output: Any = None,
                     title: str | None = None, kind: ToolKind | None = None,
                     locations: Iterable[dict[str, Any]] | None = None, raw_input: Any = None,
                     meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Changes to a tool call: only the given fields (`content`, `locations` replace the arrays)."""
    update = {"sessionUpdate": "tool_call_update", "toolCallId": call_id}
    return _with_meta(_tool_fields(update, title=title, kind=kind, status=status, content=content,
                                   locations=locations, raw_input=raw_input, raw_output=raw_output), meta)


def plan(entries: Iterable[dict[str, Any]], *, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole plan (clients replace theirs): entries of content, priority, status."""
    out = []
    for entry in entries:
        out.append({"content": str(entry["content"]),
                    "priority": _check(entry.get("priority", "medium"), PLAN_PRIORITIES, "plan priority"),
                    "status": _check(entry.get("status", "pending"), PLAN_STATUSES, "plan status")})
    return _with_meta({"sessionUpdate": "plan", "entries": out}, meta)


def usage_update(used: int, size: int, *, cost: float | None = None, currency: str = "USD",
                 meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Context window use: `used` tokens of `size`, and what the session cost so far."""
    if used < 0 or size < 0:
        raise ValueError(f"usage must be non-negative, got used={used} size={size}")
    update: dict[str, Any] = {"sessionUpdate": "usage_update", "used": used, "size": size}
    if cost is not None:
        update["cost"] = {"amount": cost, "currency": currency}
    return _with_meta(update, meta)


def session_info_update(title: str | None = None, updated_at: str | None = None) -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": "session_info_update"}
    if title is not None:
        update["title"] = title
    if updated_at is not None:
        update["updatedAt"] = updated_at
    return update


def notification(session_id: str, update: dict[str, Any]) -> dict[str, Any]:
    """The JSON-RPC `session/update` notification carrying `update`."""
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": update}}


class EventSink(Protocol):
    async def emit(self, update: dict[str, Any]) -> None: ...


class Recorder:
    """Collects events (for tests); validates each against UPDATE_SCHEMA unless told not to."""

    def __init__(self, validate: bool = True) -> None:
        self.events: list[dict[str, Any]] = []
        self.validate = validate

    async def emit(self, update: dict[str, Any]) -> None:
        if self.validate:
            validate_update(update)
        self.events.append(update)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["sessionUpdate"] == kind]

    def text(self, kind: str = "agent_message_chunk") -> str:
        """The concatenated text of the chunks of `kind`."""
        return "".join(e["content"].get("text", "") for e in self.of(kind))

    def tool_calls(self) -> dict[str, dict[str, Any]]:
        """Each tool call's state after all its updates, as a client would hold it."""
        calls: dict[str, dict[str, Any]] = {}
        for event in self.events:
            if event["sessionUpdate"] in ("tool_call", "tool_call_update"):
                state = calls.setdefault(event["toolCallId"], {})
                state.update({k: v for k, v in event.items() if k != "sessionUpdate"})
        return calls


class JsonLinesSink:
    """Writes one JSON object per line (`composer-agent --json`): the update itself, or with a
    `session_id` the `session/update` params `{"sessionId", "update"}`."""

    def __init__(self, stream: TextIO | None = None, session_id: str | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.session_id = session_id

    async def emit(self, update: dict[str, Any]) -> None:
        payload = update if self.session_id is None else {"sessionId": self.session_id, "update": update}
        self.stream.write(json.dumps(payload, separators=(",", ":")) + "\n")
        self.stream.flush()


class Broadcast:
    """Sends each event to several sinks, in order (an editor and a --json stream)."""

    def __init__(self, *sinks: EventSink) -> None:
        self.sinks = list(sinks)

    async def emit(self, update: dict[str, Any]) -> None:
        for sink in self.sinks:
            await sink.emit(update)
