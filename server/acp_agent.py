"""`composer-lsp --acp`: Composer as an ACP agent (Agent Client Protocol v1, newline-delimited
JSON-RPC on stdin/stdout), for Zed, JetBrains IDEs, Neovim's CodeCompanion/avante and any other
ACP client. Built on the `agent-client-protocol` package (`import acp`); the session methods are
`server/hub.py`'s, shared with the language server and the web page.

    composer-lsp --acp --workspace /repo --endpoint http://127.0.0.1:8001/v1
    python -m server.acp_agent --workspace /repo ...        # the same, without server/cli.py

Served: initialize, session/new, session/load (the history is replayed), session/list,
session/prompt, session/cancel, session/set_mode (agent | review), session/close, and the slash
commands of server/slash_commands.py (`/undo`, `/undo forget`), advertised with an
`available_commands_update` after session/new and session/load; asked of the
client: session/request_permission, and fs/read_text_file / fs/write_text_file when it offers
them (tools then read the editor's unsaved buffers, and edits go through the editor).

Only ACP messages reach stdout: logging goes to stderr, and once the transport holds the real
stdout, fd 1 and sys.stdout point at stderr, so a stray print or a child process cannot corrupt
the stream. Tests: .venv/bin/python -m pytest tests/server/test_acp.py
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import acp
from acp.schema import (
    AgentCapabilities,
    ClientCapabilities,
    CloseSessionResponse,
    FileSystemCapabilities,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    RequestPermissionRequest,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionListCapabilities,
    SessionNotification,
    SetSessionModeResponse,
)
from pydantic import ValidationError

from agent.exceptions import EditorRefusedError
from agent.textfile import SNIFF_BYTES, is_binary
from agent.workspace import Workspace
from server import __version__
from server.hub import MODES, RequestError, ServerSettings, SessionHub
from server.slash_commands import COMMANDS

log = logging.getLogger(__name__)

STDIO_LIMIT = 50 * 1024 * 1024
"""Longest message line read from the client (a prompt with embedded files can be large)."""


@contextlib.contextmanager
def _acp_errors() -> Iterator[None]:
    """The hub's RequestError as the package's, so the client gets a JSON-RPC error reply."""
    try:
        yield
    except RequestError as err:
        raise acp.RequestError(err.code, str(err)) from None


def _dump(model: Any) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


class AcpPeer:
    """The hub's Peer on an ACP connection. The hub speaks ACP dicts; they pass through the
    package's models, so whatever leaves is checked against the schema."""

    def __init__(self, conn: acp.Client) -> None:
        self.conn = conn

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        if method != "session/update":
            raise ValueError(f"the ACP peer sends session/update notifications only, not {method!r}")
        try:
            note = SessionNotification.model_validate(params)
        except ValidationError as err:  # a display glitch must not end the turn
            log.error("dropped a session/update that does not fit ACP's schema: %s\n%s", params, err)
            return
        try:
            await self.conn.session_update(note.session_id, note.update, **(note.field_meta or {}))
        except ConnectionError:
            log.debug("client gone; dropped a session/update")

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        if method != "session/request_permission":
            raise ValueError(f"the ACP peer asks session/request_permission only, not {method!r}")
        ask = RequestPermissionRequest.model_validate(params)
        answer = await self.conn.request_permission(ask.session_id, ask.tool_call, ask.options,
                                                    **(ask.field_meta or {}))
        return _dump(answer)


class ClientFiles:
    """The client's view of the files (ACP fs/*). `apply` makes it the workspace's EditSink."""

    def __init__(self, conn: acp.Client, root: Path) -> None:
        self.conn, self.root = conn, root
        self.session_id = ""
        """Set once session/new or session/load knows it; fs requests carry it."""

    async def read(self, path: Path) -> str | None:
        """The client's text of `path` (an unsaved buffer, or the disk as it sees it); None when
        it has none (a missing file) or refuses."""
        try:
            answer = await self.conn.read_text_file(session_id=self.session_id, path=str(path))
        except acp.RequestError as err:
            log.debug("fs/read_text_file %s: %s", path, err)
            return None
        return answer.content

    async def apply(self, path: str, old_text: str | None, new_text: str, version: int | None) -> bool:
        """Writes through the client (fs/write_text_file), so the edit shows in the editor."""
        try:
            await self.conn.write_text_file(session_id=self.session_id, path=str(self.root / path),
                                            content=new_text)
        except acp.RequestError as err:
            log.warning("the client refused to write %s: %s", path, err)
            return False
        return True


class ClientWorkspace(Workspace):
    """A Workspace whose files the ACP client serves. Before a tool call the files it touches are
    taken from the client when it offers fs.readTextFile (the loop calls `refresh`); edits go out
    through fs/write_text_file when it offers fs.writeTextFile, new files included."""

    def __init__(self, root: Path, files: ClientFiles, fs: FileSystemCapabilities) -> None:
        super().__init__(root, edit_sink=files if fs.write_text_file else None)
        self.files, self.can_read = files, bool(fs.read_text_file)

    async def refresh(self, paths: list[str]) -> None:
        """Overlays `paths` with the client's text (unsaved edits included); without one (or a
        client that cannot read), reads go to the disk."""
        for path in paths:
            target = self.resolve(path)
            text = await self.files.read(target) if self.can_read and self._worth_asking(target) else None
            if text is None:
                self.clear_buffer(path)
            else:
                self.set_buffer(path, text, None)

    def _worth_asking(self, target: Path) -> bool:
        """Files the tools could read whole as text, or that only the client may have; not
        directories, binaries or files over max_file_bytes (which tools stream from the disk)."""
        try:
            if target.is_dir() or target.stat().st_size > self.max_file_bytes:
                return False
            with target.open("rb") as f:
                return not is_binary(f.read(SNIFF_BYTES))
        except FileNotFoundError:
            return True
        except OSError:
            return False

    async def apply_text(self, path: str, new_text: str) -> str:
        """Like Workspace.apply_text, but with a writing client a file it has not shown us (a new
        one, or any file when it cannot read) goes through the client too."""
        if self.edit_sink is None or self.buffer(path) is not None:
            return await super().apply_text(path, new_text)
        rel, fmt = self.relative(path), self.text_format(path)
        raw = re.sub(r"\r?\n", "\r\n", new_text) if fmt is not None and fmt.newline == "\r\n" else new_text
        if not await self.edit_sink.apply(rel, None, raw, None):
            raise EditorRefusedError(f"the editor refused to write {rel}; read it again, then retry or ask the user")
        self.set_buffer(rel, raw, None)  # until the next refresh asks the client again
        return "editor"


class ComposerAcpAgent:
    """The ACP Agent interface (acp.Agent) over a SessionHub: one per connection."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.conn: acp.Client | None = None
        self.hub: SessionHub | None = None
        self.fs = FileSystemCapabilities()
        self._background: set[asyncio.Task] = set()

    def on_connect(self, conn: acp.Client) -> None:
        self.conn = conn
        self.hub = SessionHub(AcpPeer(conn), self.settings, client="acp", workspace_for=self._workspace)

    def _workspace(self, root: Path) -> Workspace:
        if not (self.fs.read_text_file or self.fs.write_text_file):
            return Workspace(root)
        assert self.conn is not None, "on_connect comes before any session"
        return ClientWorkspace(root, ClientFiles(self.conn, root), self.fs)

    def _bind(self, session_id: str) -> None:
        """The session's client files learn its id (the workspace is made before the id is)."""
        workspace = self.hub.sessions[session_id].workspace
        if isinstance(workspace, ClientWorkspace):
            workspace.files.session_id = session_id

    def _advertise(self, session_id: str) -> None:
        """Tells the client the session's slash commands (server/slash_commands.py), once the
        answer that names the session has gone out: the task runs after this handler returns."""
        update = {"sessionUpdate": "available_commands_update", "availableCommands": COMMANDS}
        task = asyncio.ensure_future(self.hub.peer.notify("session/update", {"sessionId": session_id, "update": update}))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def initialize(self, protocol_version: int, client_capabilities: ClientCapabilities | None = None,
                         client_info: Implementation | None = None, **kwargs: Any) -> InitializeResponse:
        if client_capabilities is not None and client_capabilities.fs is not None:
            self.fs = client_capabilities.fs
        log.info("client %s offers fs %s", client_info.name if client_info else "?", _dump(self.fs))
        capabilities = AgentCapabilities(
            load_session=True, prompt_capabilities=PromptCapabilities(embedded_context=True),
            session_capabilities=SessionCapabilities(list=SessionListCapabilities(), close=SessionCloseCapabilities()),
        )
        return InitializeResponse(protocol_version=min(protocol_version, acp.PROTOCOL_VERSION),
                                  agent_capabilities=capabilities, auth_methods=[],
                                  agent_info=Implementation(name="composer", title="Composer", version=__version__))

    async def new_session(self, cwd: str, additional_directories: list[str] | None = None,
                          mcp_servers: list[Any] | None = None, **kwargs: Any) -> NewSessionResponse:
        _unsupported(additional_directories, mcp_servers)
        with _acp_errors():
            result = await self.hub.new_session({"cwd": cwd, "mcpServers": []})
        self._bind(result["sessionId"])
        self._advertise(result["sessionId"])
        return NewSessionResponse.model_validate(result)

    async def load_session(self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None,
                           additional_directories: list[str] | None = None, **kwargs: Any) -> LoadSessionResponse:
        _unsupported(additional_directories, mcp_servers)
        with _acp_errors():
            result = await self.hub.load_session({"cwd": cwd, "sessionId": session_id, "mcpServers": []})
        self._bind(session_id)
        self._advertise(session_id)
        return LoadSessionResponse.model_validate(result)

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None,
                            **kwargs: Any) -> ListSessionsResponse:
        with _acp_errors():  # one page: the cursor is never needed
            return ListSessionsResponse.model_validate(self.hub.list_sessions({"cwd": cwd} if cwd else {}))

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> SetSessionModeResponse:
        with _acp_errors():
            self.hub.set_mode({"sessionId": session_id, "modeId": mode_id})
        return SetSessionModeResponse()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        blocks = [_dump(block) for block in prompt]
        with _acp_errors():
            return PromptResponse.model_validate(await self.hub.prompt({"sessionId": session_id, "prompt": blocks}))

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        try:
            self.hub.cancel({"sessionId": session_id})
        except RequestError as err:  # a notification has no reply to carry the error
            log.warning("session/cancel: %s", err)

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse:
        with _acp_errors():
            await self.hub.close_session({"sessionId": session_id})
        return CloseSessionResponse()


def _unsupported(additional_directories: list[str] | None, mcp_servers: list[Any] | None) -> None:
    if mcp_servers:
        log.warning("MCP servers are not supported yet; ignoring %d", len(mcp_servers))
    if additional_directories:
        log.warning("additional directories are not supported; ignoring %s", additional_directories)


async def _stdio_streams() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The transport's streams on the real stdin and stdout; afterwards fd 1 and sys.stdout are
    stderr, so nothing else (a print, a child process inheriting fd 1) can write into the stream."""
    sys.stdout.flush()
    protocol_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = protocol_out  # acp.stdio_streams connects whatever sys.stdout is then
    try:
        return await acp.stdio_streams(limit=STDIO_LIMIT)
    finally:
        sys.stdout = sys.stderr


async def serve_acp(settings: ServerSettings) -> int:
    """Serves one ACP client on stdin/stdout until it closes the stream."""
    reader, writer = await _stdio_streams()
    agent = ComposerAcpAgent(settings)
    try:
        # session/close is "unstable" in the package (0.12); the flag routes it.
        await acp.run_agent(agent, writer, reader, use_unstable_protocol=True)
    finally:
        if agent.hub is not None:
            await agent.hub.close()
    return 0


def main_acp(settings: ServerSettings) -> int:
    """`composer-lsp --acp` (server/cli.py calls this)."""
    try:
        return asyncio.run(serve_acp(settings))
    except KeyboardInterrupt:
        return 0


def main(argv: list[str] | None = None) -> int:
    """Runs the ACP agent without server/cli.py (the same flags as `composer-lsp --acp`)."""
    parser = argparse.ArgumentParser(prog="python -m server.acp_agent", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspace", type=Path, default=Path.cwd())
    parser.add_argument("--endpoint", default=None)
    parser.add_argument("--model", default=None)
    parser.add_argument("--log-dir", type=Path, default=None)
    parser.add_argument("--mode", choices=[m["id"] for m in MODES], default="agent")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=os.environ.get("COMPOSER_LOG_LEVEL", "WARNING").upper())
    return main_acp(ServerSettings(workspace=args.workspace.resolve(), endpoint=args.endpoint, model=args.model,
                                   log_dir=args.log_dir, default_mode=args.mode))


if __name__ == "__main__":
    sys.exit(main())
