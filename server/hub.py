"""The session methods of one editor connection, whatever carries them: `SessionHub` turns ACP's
`session/*` requests into calls on agent.Session and sends the session's events and permission
questions back through a `Peer` (the LSP connection, a websocket, ACP's stdio).

    hub = SessionHub(peer, settings, workspace)
    result = await hub.new_session({"cwd": "/repo", "mcpServers": []})   # {"sessionId", "modes"}
    await hub.prompt({"sessionId": sid, "prompt": [{"type": "text", "text": "fix it"}]})
    hub.cancel({"sessionId": sid})

A prompt that is a slash command (`/undo`, server/slash_commands.py) acts on the session and
answers without the model. Payloads are ACP v1's (camelCase keys, `_meta` for vendor data). Errors in what the client sent
raise `RequestError` with JSON-RPC's invalid-params code and a message naming the field.

Modes (ACP session modes): `agent` follows the permission files; `review` asks before every
edit, with the diff in the question, and before every terminal command, showing the command
(agent/permissions.py `review_policy`), so nothing reaches a file the person has not accepted.
Questions about terminal commands in review mode, or where the sandbox is weaker than bubblewrap
(agent/isolation.py, whose warning the question carries), offer no "allow always".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any, Protocol

from agent import events as ev
from agent.buffer_rewind import BufferRewind
from agent.checkpoint_records import Changes
from agent.checkpoints import CheckpointError
from agent.permissions import ANSWERS, review_policy
from agent.replay import session_title
from agent.review import Reviewed
from agent.session import Session, SessionConfig
from agent.session_log import SessionLogError, list_sessions, read_session
from agent.turn_review import Pick
from agent.workspace import Workspace
from server.slash_commands import parse_command, run_command

log = logging.getLogger(__name__)

INVALID_PARAMS = -32602
RESOURCE_NOT_FOUND = -32002
"""ACP's code for an unknown session."""
INTERNAL_ERROR = -32603
MAX_PROMPT_CHARS = 1_000_000
"""Longer prompts are refused (no model here reads that much; a 50 MB paste is a mistake)."""

MODES = [
    {"id": "agent", "name": "Agent", "description": "Edits and safe commands run as the permission rules say."},
    {"id": "review", "name": "Review edits",
     "description": "Every edit waits for you to accept its diff, every command for you to allow it."},
]
PERMISSION_OPTIONS = [
    {"optionId": "allow_once", "name": "Allow", "kind": "allow_once"},
    {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
    {"optionId": "reject_always", "name": "Always reject", "kind": "reject_always"},
]


class RequestError(Exception):
    """A request the hub cannot serve: carries the JSON-RPC error code for the reply."""

    def __init__(self, message: str, code: int = INVALID_PARAMS) -> None:
        super().__init__(message)
        self.code = code


class Peer(Protocol):
    """The client end of the connection, as the hub uses it."""

    async def notify(self, method: str, params: dict[str, Any]) -> None: ...

    async def request(self, method: str, params: dict[str, Any]) -> Any: ...


@dataclass(kw_only=True)
class ServerSettings:
    """What every session of this server starts from (composer-lsp's command line)."""

    workspace: Path = field(default_factory=Path.cwd)
    endpoint: str | None = None
    model: str | None = None
    api_key: str | None = None
    quantize: str = "int4"
    log_dir: Path | None = None
    default_mode: str = "agent"
    index: str | None = None
    """The codebase index: "minilm", an embeddings URL, "off"; None: $COMPOSER_INDEX or minilm."""
    allow_unsandboxed: bool = False
    """`--allow-unsandboxed`: commands run without asking where the sandbox is weaker."""

    def session_config(self, cwd: Path, client: str) -> SessionConfig:
        return SessionConfig(workspace=cwd, endpoint=self.endpoint, model=self.model, api_key=self.api_key,
                             quantize=self.quantize, log_dir=self.log_dir, client=client, index=self.index,
                             allow_unsandboxed=self.allow_unsandboxed)


class _Events:
    """A session's event sink: each update goes out as a `session/update` notification."""

    def __init__(self, peer: Peer) -> None:
        self.peer, self.session_id = peer, ""

    async def emit(self, update: dict[str, Any]) -> None:
        await self.peer.notify("session/update", {"sessionId": self.session_id, "update": update})


def _field(params: Any, name: str, kind: type | tuple[type, ...], *, required: bool = True) -> Any:
    if not isinstance(params, dict):
        raise RequestError(f"params must be an object, got {type(params).__name__}")
    value = params.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, kind):
        what = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        got = "nothing" if value is None else type(value).__name__
        raise RequestError(f"params.{name} must be a {what}, got {got}")
    return value


def prompt_text(blocks: Any) -> str:
    """The request as the model reads it: text blocks, and embedded or linked resources."""
    if not isinstance(blocks, list) or not blocks:
        raise RequestError("params.prompt must be a non-empty list of content blocks")
    parts = []
    for i, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "resource" and isinstance(block.get("resource"), dict):
            res = block["resource"]
            if "text" in res:
                parts.append(f"<file uri=\"{res.get('uri', '')}\">\n{res['text']}\n</file>")
        elif kind == "resource_link" and isinstance(block.get("uri"), str):
            parts.append(f"[{block.get('name') or block['uri']}]({block['uri']})")
        elif kind not in ("image", "audio"):
            raise RequestError(f"params.prompt[{i}] is not a content block (type {kind!r})")
    text = "\n\n".join(p for p in parts if p)
    if len(text) > MAX_PROMPT_CHARS:
        raise RequestError(f"params.prompt is too long ({len(text):,} characters; the limit is "
                           f"{MAX_PROMPT_CHARS:,}): attach large files as resource links instead")
    if not text.strip():
        raise RequestError("params.prompt has no text")
    return text


class SessionHub:
    """The sessions of one connection. `workspace_for(root)` gives the Workspace its sessions
    read and edit through (the LSP connection's, with the editor's buffers and edit sink)."""

    def __init__(self, peer: Peer, settings: ServerSettings, *, client: str = "lsp",
                 workspace_for: Callable[[Path], Workspace] | None = None) -> None:
        self.peer, self.settings, self.client = peer, settings, client
        self.workspace_for = workspace_for or Workspace
        self.sessions: dict[str, Session] = {}
        self._loading: set[str] = set()
        self.modes: dict[str, str] = {}
        self._base_permissions: dict[str, Any] = {}
        self._turns: dict[str, asyncio.Task] = {}

    # ---- lifecycle ------------------------------------------------------------------------------

    def _cwd(self, params: Any) -> Path:
        cwd = _field(params, "cwd", str, required=False)
        root = Path(cwd) if cwd else self.settings.workspace
        if not root.is_absolute():
            raise RequestError(f"params.cwd must be an absolute path, got {cwd!r}")
        if not root.is_dir():
            raise RequestError(f"params.cwd {str(root)!r} is not a directory")
        return root.resolve()

    async def _open(self, params: Any, session_id: str | None = None) -> tuple[Session, list[dict]]:
        cwd = self._cwd(params)
        events = _Events(self.peer)
        config = self.settings.session_config(cwd, self.client)
        common = {"events": events, "ask": None, "workspace": self.workspace_for(cwd)}
        try:
            if session_id is None:
                session, history = await Session.create(config, **common), []
            else:
                session, history = await Session.load(config, session_id, **common)
        except SessionLogError as err:
            raise RequestError(str(err), RESOURCE_NOT_FOUND) from None
        except CheckpointError as err:  # the workspace's store cannot open (a linked `.composer`)
            raise RequestError(str(err)) from None
        events.session_id = session.id
        session.agent.ask = self._asker(session.id)
        self.sessions[session.id] = session
        self._base_permissions[session.id] = session.agent.permissions
        self._set_mode(session.id, self.settings.default_mode)
        return session, history

    def _modes(self, session_id: str) -> dict[str, Any]:
        return {"currentModeId": self.modes[session_id], "availableModes": MODES}

    async def new_session(self, params: Any) -> dict[str, Any]:
        session, _ = await self._open(params)
        return {"sessionId": session.id, "modes": self._modes(session.id)}

    async def load_session(self, params: Any) -> dict[str, Any]:
        """Reopens a logged session: replays its history as session/update, then answers."""
        session_id = _field(params, "sessionId", str)
        if session_id in self.sessions or session_id in self._loading:
            raise RequestError(f"session {session_id} is already open on this connection")
        self._loading.add(session_id)  # a second load while this one reads the log is refused too
        try:
            session, history = await self._open(params, session_id)
        finally:
            self._loading.discard(session_id)
        for update in history:
            await self.peer.notify("session/update", {"sessionId": session.id, "update": update})
        return {"modes": self._modes(session.id)}

    def list_sessions(self, params: Any) -> dict[str, Any]:
        cwd = self._cwd(params or {})
        sessions = []
        for info in reversed(list_sessions(cwd, self.settings.log_dir)):
            records = read_session(info.path, limit=200)
            sessions.append({"sessionId": info.session_id, "cwd": info.workspace or str(cwd),
                             "title": session_title(records), "updatedAt": _iso(info.path.stat().st_mtime)})
        return {"sessions": sessions}

    def session(self, params: Any) -> Session:
        session_id = _field(params, "sessionId", str)
        if session_id not in self.sessions:
            raise RequestError(f"unknown sessionId {session_id!r}; call session/new or session/load first",
                               RESOURCE_NOT_FOUND)
        return self.sessions[session_id]

    async def close_session(self, params: Any) -> dict[str, Any]:
        await self._forget(self.session(params).id)
        return {}

    async def close(self) -> None:
        """The connection ended: running turns stop, logs are closed (nothing is lost)."""
        for session_id in list(self.sessions):
            await self._forget(session_id)

    async def _forget(self, session_id: str) -> None:
        await self._stop(session_id)
        session = self.sessions.pop(session_id)
        self.modes.pop(session_id, None)
        self._base_permissions.pop(session_id, None)
        await session.aclose()

    # ---- turns ----------------------------------------------------------------------------------

    async def prompt(self, params: Any) -> dict[str, Any]:
        session = self.session(params)
        text = prompt_text(params.get("prompt"))
        running = self._turns.get(session.id)
        if running is not None and not running.done():
            raise RequestError(f"session {session.id} is already answering a prompt; cancel it first")
        if session.changing:
            raise RequestError(f"session {session.id} is busy with {session.changing}; prompt again when it is done")
        command = parse_command(text)
        if command is not None:  # server/slash_commands.py: acts on the session, no model call
            answer = await run_command(session, *command)
            await self.peer.notify("session/update", {"sessionId": session.id, "update": ev.agent_message_chunk(answer)})
            return {"stopReason": "end_turn", "_meta": {"composer": {"command": command[0]}}}
        task = asyncio.ensure_future(session.prompt(text))
        self._turns[session.id] = task
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:  # the request itself was cancelled ($/cancelRequest)
            session.cancel()
            result = await task
        except Exception as err:  # the endpoint died, the disk filled: this turn, not the session
            log.warning("session %s: the turn failed: %s", session.id, err, exc_info=err)
            raise RequestError(f"the turn failed: {err}", INTERNAL_ERROR) from err
        return {"stopReason": result.stop_reason,
                "_meta": {"composer": {"steps": result.steps, "toolCalls": result.tool_calls,
                                       "checkpoint": session.agent.turn_checkpoint}}}

    def cancel(self, params: Any) -> None:
        self.session(params).cancel()

    async def _stop(self, session_id: str) -> None:
        task = self._turns.pop(session_id, None)
        if task is not None and not task.done():
            self.sessions[session_id].cancel()
            await asyncio.wait({task}, timeout=10)

    async def rewind(self, params: Any) -> dict[str, Any]:
        """Restores the workspace to a checkpoint (default: before the last turn's first
        change), shell-made changes and the editor's unsaved buffers included; with
        `conversation: true` the last turn leaves the conversation too (a turn that changed no
        file only leaves the conversation)."""
        session = self.session(params)
        checkpoint = _field(params, "checkpointId", str, required=False) or session.agent.turn_checkpoint
        forget = bool(_field(params, "conversation", bool, required=False))
        if checkpoint is None and forget:  # a turn that changed no file leaves the conversation only
            try:
                session.forget_turn()
            except RuntimeError as err:
                raise RequestError(str(err)) from None
            return {"checkpointId": None, "changes": Changes().to_dict(), "buffers": BufferRewind().to_dict(),
                    "forgotTurn": True, "backupCheckpointId": None}
        if checkpoint is None:
            raise RequestError(f"session {session.id} has no checkpoint to go back to")
        try:
            result, buffers = await session.restore(checkpoint, forget=forget)
        except (CheckpointError, RuntimeError, OSError) as err:
            raise RequestError(str(err)) from None
        return {"checkpointId": checkpoint, "changes": result.changes.to_dict(), "buffers": buffers.to_dict(),
                "forgotTurn": forget, "backupCheckpointId": result.backup.id if result.backup else None}

    async def turn_changes(self, params: Any) -> dict[str, Any]:
        """The changes since a checkpoint (default: before the last turn's first change), hunk by
        hunk, to keep or undo one at a time (agent/turn_review.py)."""
        session = self.session(params)
        try:
            checkpoint, files = await session.turn_changes(_field(params, "checkpointId", str, required=False))
        except (CheckpointError, RuntimeError, OSError) as err:
            raise RequestError(str(err)) from None
        return {"checkpointId": checkpoint, "files": [f.to_dict() for f in files]}

    async def review_hunks(self, params: Any) -> dict[str, Any]:
        """Undoes the hunks in `undo` and records the person's verdicts on them and on `keep`
        (each {path, index, digest} from composer/turnChanges)."""
        session = self.session(params)
        undo, keep = (_picks(_field(params, name, list, required=False) or [], name) for name in ("undo", "keep"))
        try:
            result, backup = await session.review_hunks(undo, keep, _field(params, "checkpointId", str, required=False))
        except (CheckpointError, RuntimeError, OSError) as err:
            raise RequestError(str(err)) from None
        return {**result.to_dict(), "backupCheckpointId": backup}

    # ---- modes and permissions ------------------------------------------------------------------

    def set_mode(self, params: Any) -> dict[str, Any]:
        session = self.session(params)
        self._set_mode(session.id, _field(params, "modeId", str))
        return {}

    def _set_mode(self, session_id: str, mode: str) -> None:
        if mode not in {m["id"] for m in MODES}:
            raise RequestError(f"unknown modeId {mode!r}; choose one of {[m['id'] for m in MODES]}")
        base = self._base_permissions[session_id]
        agent = self.sessions[session_id].agent
        for rule in getattr(agent.permissions, "learned", []):  # "always" answers outlive the mode
            if rule not in base.rules:
                base.rules.append(rule)
        if mode == "review":
            agent.permissions = review_policy(base)
        else:
            agent.permissions = base
        self.modes[session_id] = mode

    def _asker(self, session_id: str) -> Callable[[dict, Any], Awaitable[str]]:
        async def ask(tool_call: dict[str, Any], decision: Any) -> str | Reviewed:
            parts = [{"kind": p.kind, "text": p.text} for p in getattr(decision, "asked", [])]
            options = PERMISSION_OPTIONS
            if getattr(decision, "once_only", False):
                options = [o for o in options if o["kind"] != "allow_always"]
            params = {"sessionId": session_id, "toolCall": _shown(tool_call, decision), "options": options}
            meta: dict[str, Any] = {"asked": parts} if parts else {}
            if [c.get("type") for c in tool_call.get("content", [])] == ["diff"]:
                meta["revisable"] = True  # the person may change the edit before accepting it
            if meta:
                params["_meta"] = {"composer": meta}
            try:
                answer = await self.peer.request("session/request_permission", params)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the client failed to answer: treat as a refusal
                log.warning("permission request failed: %s", err)
                return "reject_once"
            return _answer(answer)

        return ask


def _picks(items: list[Any], name: str) -> list[Pick]:
    picks = []
    for i, item in enumerate(items):
        where = f"params.{name}[{i}]"
        try:
            index = _field(item, "index", int)
            if isinstance(index, bool):
                raise RequestError("params.index must be an integer, got bool")
            picks.append(Pick(_field(item, "path", str), index, _field(item, "digest", str)))
        except RequestError as err:
            raise RequestError(f"{where}: {err}") from None
    return picks


def _shown(tool_call: dict[str, Any], decision: Any) -> dict[str, Any]:
    """The call as asked about: a terminal command is shown whole (the title cuts it), and a
    weaker sandbox's warning comes with it."""
    raw = tool_call.get("rawInput")
    command = raw.get("command") if tool_call.get("kind") == "execute" and isinstance(raw, dict) else None
    texts = [f"$ {command}"] if isinstance(command, str) else []
    if getattr(decision, "notice", None):
        texts.append(f"Warning: {decision.notice}")
    blocks = [{"type": "content", "content": {"type": "text", "text": text}} for text in texts]
    return {**tool_call, "content": [*tool_call.get("content", []), *blocks]} if blocks else tool_call


def _answer(response: Any) -> str | Reviewed:
    """The option chosen, with the person's text of the edit when they changed it
    (`_meta.composer.revisedText`, docs/contracts.md); "reject_once" when cancelled or unreadable."""
    outcome = response.get("outcome") if isinstance(response, dict) else None
    if not (isinstance(outcome, dict) and outcome.get("outcome") == "selected" and outcome.get("optionId") in ANSWERS):
        return "reject_once"  # cancelled, or an answer we cannot read: do nothing
    meta = response.get("_meta")
    composer = meta.get("composer") if isinstance(meta, dict) else None
    revised = composer.get("revisedText") if isinstance(composer, dict) else None
    return Reviewed(outcome["optionId"], revised) if isinstance(revised, str) else outcome["optionId"]


def _iso(timestamp: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(timestamp, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
