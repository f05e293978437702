"""A test LSP client for composer-lsp: pytest-lsp's client plus what it lacks, namely answering
`workspace/applyEdit` (applying the edits to the documents it holds, as an editor would), and
the session methods' `session/update` and `session/request_permission`.

    client = await start_client(workspace, model_url, log_dir)
    await client.protocol.send_request_async("session/new", {"cwd": str(workspace)})
    client.permission_answer = "reject_once"
    client.documents[uri]            # text after the edits the server sent
    await stop_client(client)
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any, Union

from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities
from pytest_lsp.client import register_lsp_features

from server.editor import position_at
from server.lsp import plain_json_converter


def _offset(text: str, position: types.Position) -> int:
    lines = text.splitlines(keepends=True)
    before = sum(len(line) for line in lines[: position.line])
    line = lines[position.line] if position.line < len(lines) else ""
    units, i = 0, 0
    while i < len(line) and units < position.character:
        units += len(line[i].encode("utf-16-le")) // 2
        i += 1
    return before + i


def apply_text_edits(text: str, edits: list[types.TextEdit]) -> str:
    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        start, end = _offset(text, edit.range.start), _offset(text, edit.range.end)
        text = text[:start] + edit.new_text + text[end:]
    return text


def _client_converter():
    """Our converter, plus a fix for lsprotocol reading every code action that carries a
    command as a bare Command (its hook checks only that the key exists)."""
    converter = plain_json_converter()

    def code_action(obj: Any, _: type) -> types.Command | types.CodeAction:
        bare = isinstance(obj.get("command"), str)
        return converter.structure(obj, types.Command if bare else types.CodeAction)

    converter.register_structure_hook(Union[types.Command, types.CodeAction], code_action)  # noqa: UP007  # noqa: UP007 (a typing.Union key)
    return converter


class ComposerTestClient(LanguageClient):
    def __init__(self) -> None:
        super().__init__(converter_factory=_client_converter)
        self.updates: list[dict[str, Any]] = []
        self.permission_requests: list[dict[str, Any]] = []
        self.permission_answer = "allow_once"
        self.revised_text: str | None = None
        """Sent as `_meta.composer.revisedText` with the answer: the person's text of the edit."""
        self.applied_edits: list[types.ApplyWorkspaceEditParams] = []
        self.documents: dict[str, tuple[str, int]] = {}
        self.refuse_edits = False
        self.change_delay = 0.0
        self.apply_delay = 0.0
        """Seconds the editor takes to answer an applyEdit (a person looking at a prompt)."""
        """Seconds before the didChange that reports an applied edit (Neovim debounces them)."""
        self.update_event = asyncio.Event()

    def open(self, path: Path, text: str, version: int = 1) -> str:
        uri = path.as_uri()
        self.documents[uri] = (text, version)
        self.text_document_did_open(types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)))
        return uri

    def text_of(self, kind: str = "agent_message_chunk") -> str:
        return "".join(u["update"]["content"].get("text", "") for u in self.updates
                       if u["update"]["sessionUpdate"] == kind)


def _register(client: ComposerTestClient) -> None:
    register_lsp_features(client)

    @client.feature("session/update")
    def on_update(params: dict[str, Any]) -> None:
        client.updates.append(params)
        client.update_event.set()

    @client.feature("session/request_permission")
    def on_permission(params: dict[str, Any]) -> dict[str, Any]:
        client.permission_requests.append(params)
        answer: dict[str, Any] = {"outcome": {"outcome": "selected", "optionId": client.permission_answer}}
        if client.revised_text is not None:
            answer["_meta"] = {"composer": {"revisedText": client.revised_text}}
        return answer

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    async def on_apply_edit(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
        if client.apply_delay:
            await asyncio.sleep(client.apply_delay)
        client.applied_edits.append(params)
        if client.refuse_edits:
            return types.ApplyWorkspaceEditResult(applied=False, failure_reason="the user said no")
        for change in params.edit.document_changes or []:
            text, version = client.documents[change.text_document.uri]
            if change.text_document.version not in (None, version):
                return types.ApplyWorkspaceEditResult(applied=False, failure_reason="stale version")
            new = apply_text_edits(text, list(change.edits))
            client.documents[change.text_document.uri] = (new, version + 1)
            # An editor reports its own change back, as didChange with the next version.
            report = types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=change.text_document.uri, version=version + 1),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=new)])
            if client.change_delay:
                asyncio.get_running_loop().call_later(client.change_delay, client.text_document_did_change, report)
            else:
                client.text_document_did_change(report)
        return types.ApplyWorkspaceEditResult(applied=True)


async def start_client(workspace: Path, model_url: str, log_dir: Path, *extra: str,
                       capabilities: str = "neovim") -> ComposerTestClient:
    client = ComposerTestClient()
    _register(client)
    await client.start_io(sys.executable, "-m", "server", "--stdio", "--workspace", str(workspace),
                          "--endpoint", model_url, "--log-dir", str(log_dir), *extra)
    await client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities(capabilities), root_uri=workspace.as_uri(), process_id=None))
    return client


async def stop_client(client: ComposerTestClient) -> None:
    await client.shutdown_session()
    await client.stop()


__all__ = ["ComposerTestClient", "apply_text_edits", "position_at", "start_client", "stop_client"]
