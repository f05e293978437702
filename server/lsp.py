"""composer-lsp's language server: LSP (pygls + lsprotocol) plus ACP's session methods on the
same connection. One `ComposerServer` serves one client; the websocket front end makes one per
connection.

What it speaks:
- document sync (didOpen/didChange/didClose) feeds the agent's Workspace overlay, so tools read
  unsaved buffers; the agent's edits to open documents go back as `workspace/applyEdit`;
- `session/new|load|list|prompt|cancel|set_mode|close` with ACP's payloads, `session/update`
  notifications, and `session/request_permission` requests to the client;
- code actions "Ask Composer to fix this" on diagnostics, `workspace/executeCommand` for
  `composer.fixDiagnostic`, `composer.prompt`, `composer.rewind`; work-done progress while a turn
  runs (cancellable from the editor); `window/logMessage` for what the server does;
- the sandbox's isolation level: `composer/isolation` (a request; agent/isolation.py's
  IsolationStatus.to_dict: level, weaker, restricted, letsThrough, optIn, message), also logged
  while answering `initialize`, with a `window/showMessage` warning when it is weaker than
  bubblewrap (both allowed before the initialize response).

Run it with `composer-lsp --stdio` (server/cli.py); nothing but protocol goes to stdout.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import uuid
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.exceptions import FeatureNotificationError, FeatureRequestError, JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    default_converter,
)
from pygls.uris import to_fs_path

from agent.exceptions import WorkspaceError
from agent.sandbox import isolation_status
from agent.workspace import Workspace
from server import __version__
from server.editor import EditorEdits
from server.hub import RequestError, ServerSettings, SessionHub
from server.indexing import Indexing

log = logging.getLogger(__name__)

SESSION_METHODS = ("session/new", "session/load", "session/list", "session/prompt", "session/set_mode",
                   "session/close", "composer/rewind", "composer/turnChanges", "composer/reviewHunks")
COMMANDS = ("composer.prompt", "composer.fixDiagnostic", "composer.rewind")
PARSE_ERROR = -32700


def _plain(obj: dict[str, Any], cls: type) -> Any:
    """Custom messages keep their params and results as plain JSON (pygls would make
    namedtuples); a missing field reads as null and unknown ones are dropped."""
    return cls(**{f.name: obj.get(f.name) for f in cls.__attrs_attrs__})


@functools.cache
def plain_json_converter():
    """One converter for every connection of the process: a fresh cattrs converter costs ~10 ms
    to build and warm, per websocket client."""
    converter = default_converter()
    for cls in (JsonRPCRequestMessage, JsonRPCResponseMessage, JsonRPCNotification):
        converter.register_structure_hook(cls, _plain)
    return converter


class _Peer:
    """The hub's view of the LSP client."""

    def __init__(self, server: ComposerServer) -> None:
        self.server = server

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        self.server.protocol.notify(method, params)

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        msg_id = str(uuid.uuid4())
        try:
            return await self.server.protocol.send_request_async(method, params, msg_id=msg_id)
        except asyncio.CancelledError:
            # The turn was cancelled while the client was still deciding: forget the request,
            # so its late answer is dropped instead of landing on a cancelled future.
            self.server.protocol._request_futures.pop(msg_id, None)
            raise


class ComposerServer(LanguageServer):
    def __init__(self, settings: ServerSettings, *, client: str = "lsp") -> None:
        super().__init__("composer-lsp", __version__, converter_factory=plain_json_converter,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.settings = settings
        self.root = settings.workspace.resolve()
        self.hub = SessionHub(_Peer(self), settings, client=client, workspace_for=self.workspace_for)
        self._workspaces: dict[Path, Workspace] = {}
        self.indexing = Indexing(self, settings.index)
        self._register()

    # ---- the agent's workspace ------------------------------------------------------------------

    def _can_apply_edits(self) -> bool:
        caps = self.client_capabilities
        return bool(caps and caps.workspace and caps.workspace.apply_edit)

    def workspace_for(self, root: Path) -> Workspace:
        """One Workspace per root for this connection, holding the editor's open buffers."""
        root = root.resolve()
        if root not in self._workspaces:
            sink = EditorEdits(self, root) if self._can_apply_edits() else None
            workspace = Workspace(root, edit_sink=sink)
            for doc in list(self.workspace.text_documents.values()):
                self._mirror_into(workspace, doc.uri, doc.source, doc.version)
            self._workspaces[root] = workspace
        return self._workspaces[root]

    @staticmethod
    def _mirror_into(workspace: Workspace, uri: str, text: str | None, version: int | None) -> None:
        if not uri.startswith("file://"):
            return
        path = Path(to_fs_path(uri))
        try:
            workspace.relative(str(path))
        except WorkspaceError:
            return  # outside this workspace (or through a link leaving it)
        if text is None:
            workspace.clear_buffer(str(path))
        else:
            workspace.set_buffer(str(path), text, version)

    def _saved(self, params: types.DidSaveTextDocumentParams) -> None:
        """The buffer is the file now (the workspace's `saved`, which keeps it out of the unsaved
        buffers a checkpoint records), and the index reads it."""
        self._mirror(params.text_document.uri)
        self.indexing.saved(params.text_document.uri)

    def _mirror(self, uri: str, closed: bool = False) -> None:
        doc = None if closed else self.workspace.get_text_document(uri)
        for workspace in self._workspaces.values():
            self._mirror_into(workspace, uri, None if doc is None else doc.source, None if doc is None else doc.version)

    # ---- features -------------------------------------------------------------------------------

    def _register(self) -> None:
        self.feature(types.INITIALIZE)(_handler(self._initialize))
        self.feature(types.INITIALIZED)(_handler(self._initialized))
        self.feature(types.TEXT_DOCUMENT_DID_OPEN)(lambda p: self._mirror(p.text_document.uri))
        self.feature(types.TEXT_DOCUMENT_DID_CHANGE)(_handler(self._changed))
        self.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False))(_handler(self._saved))
        self.feature(types.TEXT_DOCUMENT_DID_CLOSE)(_handler(self._closed))
        self.feature(types.SHUTDOWN)(_handler(self._shutdown))
        self.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
            code_action_kinds=[types.CodeActionKind.QuickFix]))(_handler(self._code_actions))
        for method in SESSION_METHODS:
            self.feature(method)(self._session_method(method))
        self.feature("session/cancel")(lambda params: self._guard(self.hub.cancel, params))
        self.feature("composer/isolation")(_handler(self._isolation))
        self._register_commands()

    def _initialize(self, params: types.InitializeParams) -> None:
        folders = params.workspace_folders or []
        uri = folders[0].uri if folders else params.root_uri
        if uri and uri.startswith("file://"):
            self.root = Path(to_fs_path(uri)).resolve()
            self.settings.workspace = self.root
        options = params.initialization_options
        if isinstance(options, dict) and options.get("mode") in ("agent", "review"):
            self.settings.default_mode = options["mode"]
        status = isolation_status(self.settings.allow_unsandboxed)  # probed once per process
        self.window_log_message(types.LogMessageParams(
            type=types.MessageType.Info, message=f"composer-lsp {__version__} serving {self.root}; {status.describe()}"))
        if status.weaker:
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning,
                                                             message=f"Composer: {status.describe()}"))

    async def _initialized(self, params: Any) -> None:
        await self.indexing.start(self.root)

    async def _isolation(self, params: Any) -> dict[str, Any]:
        status = await asyncio.to_thread(isolation_status, self.settings.allow_unsandboxed)
        return status.to_dict()

    def _changed(self, params: types.DidChangeTextDocumentParams) -> None:
        self._mirror(params.text_document.uri)
        self.indexing.changed(params.text_document.uri, self.workspace.get_text_document(params.text_document.uri).source)

    def _closed(self, params: types.DidCloseTextDocumentParams) -> None:
        self._mirror(params.text_document.uri, closed=True)
        self.indexing.closed(params.text_document.uri)

    async def _shutdown(self, params: Any) -> None:
        self.indexing.stop()
        await self.hub.close()

    @staticmethod
    def _guard(fn, params: Any) -> Any:
        try:
            return fn(params)
        except RequestError as err:
            raise JsonRpcException(str(err), code=err.code) from None

    def _session_method(self, method: str):
        handler = {
            "session/new": self.hub.new_session, "session/load": self.hub.load_session,
            "session/list": self.hub.list_sessions, "session/prompt": self._prompt,
            "session/set_mode": self.hub.set_mode, "session/close": self.hub.close_session,
            "composer/rewind": self.hub.rewind, "composer/turnChanges": self.hub.turn_changes,
            "composer/reviewHunks": self.hub.review_hunks,
        }[method]

        async def run(params: Any) -> Any:
            try:
                result = handler(params)
                return await result if asyncio.iscoroutine(result) else result
            except RequestError as err:
                raise JsonRpcException(str(err), code=err.code) from None

        return run

    async def _prompt(self, params: Any) -> dict[str, Any]:
        """A turn, with work-done progress in editors that show it (cancelling it cancels the turn)."""
        session = self.hub.session(params)
        caps = self.client_capabilities
        if not (caps and caps.window and caps.window.work_done_progress):
            return await self.hub.prompt(params)
        token = str(uuid.uuid4())
        await self.work_done_progress.create_async(token)
        self.work_done_progress.begin(token, types.WorkDoneProgressBegin(title="Composer", cancellable=True))
        watch = asyncio.ensure_future(self._watch_progress(token, session))
        try:
            result = await self.hub.prompt(params)
        finally:
            watch.cancel()
        self.work_done_progress.end(token, types.WorkDoneProgressEnd(message=result["stopReason"]))
        return result

    async def _watch_progress(self, token: str, session: Any) -> None:
        cancelled = self.work_done_progress.tokens[token]
        await asyncio.wrap_future(cancelled) if not isinstance(cancelled, asyncio.Future) else await cancelled
        session.cancel()

    def _code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        actions = []
        for diagnostic in params.context.diagnostics:
            args = [params.text_document.uri, self.converter.unstructure(diagnostic)]
            actions.append(types.CodeAction(
                title=f"Ask Composer to fix this: {diagnostic.message[:60]}", kind=types.CodeActionKind.QuickFix,
                diagnostics=[diagnostic], command=types.Command(title="Ask Composer to fix this", command="composer.fixDiagnostic", arguments=args)))
        return actions

    def _register_commands(self) -> None:
        """`workspace/executeCommand` targets (pygls lists them in the server's capabilities)."""

        # pygls passes every argument positionally and ignores defaults: optional trailing
        # arguments (an existing session's id) are therefore *varargs.
        async def prompt(text: str, *session_id: str) -> dict[str, Any]:
            return await self._command_prompt(text, *session_id[:1])

        async def fix_diagnostic(uri: str, diagnostic: dict, *session_id: str) -> dict[str, Any]:
            return await self._command_prompt(fix_request(self, uri, diagnostic), *session_id[:1])

        async def rewind(session_id: str) -> dict[str, Any]:
            return await self.hub.rewind({"sessionId": session_id})

        for name, fn in zip(COMMANDS, (prompt, fix_diagnostic, rewind)):
            self.command(name)(_errors_as_rpc(fn))

    async def _command_prompt(self, text: str, session_id: str | None = None) -> dict[str, Any]:
        if session_id is None:
            session_id = (await self.hub.new_session({}))["sessionId"]
        result = await self._prompt({"sessionId": session_id, "prompt": [{"type": "text", "text": text}]})
        return {"sessionId": session_id, **result}

    # ---- errors ---------------------------------------------------------------------------------

    @property
    def converter(self):
        return self.protocol._converter

    def report_server_error(self, error: Exception, source: Any) -> None:
        """A message that is not JSON (or not JSON-RPC) gets a JSON-RPC error reply with a null
        id, as the spec says; failed requests were already answered; the rest is logged to the
        client."""
        if source is FeatureRequestError:
            return
        if isinstance(error, json.JSONDecodeError | UnicodeDecodeError):
            self.protocol._send_data({"jsonrpc": "2.0", "id": None,
                                      "error": {"code": PARSE_ERROR, "message": f"parse error: {error}"}})
        elif isinstance(error, JsonRpcException) and source is not FeatureNotificationError:
            self.protocol._send_data({"jsonrpc": "2.0", "id": None,
                                      "error": {"code": error.code, "message": error.message or str(error)}})
        else:
            log.error("server error: %s", error)
            self.window_log_message(types.LogMessageParams(type=types.MessageType.Error,
                                                           message=f"composer-lsp: {error}"))


def _handler(method: Any) -> Any:
    """A plain function calling `method` (pygls marks handlers with attributes, which bound
    methods cannot carry), async when the method is."""
    if asyncio.iscoroutinefunction(method):
        async def run_async(params: Any) -> Any:
            return await method(params)

        return run_async

    def run(params: Any) -> Any:
        return method(params)

    return run


def _errors_as_rpc(fn: Any) -> Any:
    """The command with RequestError turned into a JSON-RPC error reply."""
    @functools.wraps(fn)
    async def run(*args: Any) -> Any:
        try:
            result = fn(*args)
            return await result if asyncio.iscoroutine(result) else result
        except RequestError as err:
            raise JsonRpcException(str(err), code=err.code) from None

    return run


def fix_request(server: ComposerServer, uri: str, diagnostic: dict[str, Any]) -> str:
    """The prompt behind "Ask Composer to fix this": the problem, where, and the lines around it."""
    path = Path(to_fs_path(uri))
    start = int(diagnostic.get("range", {}).get("start", {}).get("line", 0))
    doc = server.workspace.get_text_document(uri)
    lines = doc.lines[max(0, start - 3): start + 4]
    try:
        shown = str(path.resolve().relative_to(server.root))
    except ValueError:
        shown = str(path)
    source = f" ({diagnostic['source']})" if diagnostic.get("source") else ""
    return (f"Fix this problem in {shown} at line {start + 1}{source}: {diagnostic.get('message', '')}\n\n"
            f"The lines around it:\n```\n{''.join(lines)}```")
