"""The editor's side of the workspace over LSP: edits the agent makes to open documents go to the
editor as `workspace/applyEdit` with a versioned `TextDocumentEdit` (so the editor owns its buffer
and its undo), and positions are counted in the encoding the client negotiated.

    sink = EditorEdits(server, root)          # the Workspace's edit_sink
    await sink.apply("a.py", old_text, new_text, version)   # True when the editor applied it

One edit replaces only the changed span (common prefix and suffix kept), so cursors, folds and
marks outside it stay where they were.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from lsprotocol import types

log = logging.getLogger(__name__)


def _units(text: str, encoding: str) -> int:
    """Length of `text` in the client's position units."""
    if encoding == types.PositionEncodingKind.Utf8:
        return len(text.encode("utf-8"))
    if encoding == types.PositionEncodingKind.Utf32:
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def position_at(text: str, offset: int, encoding: str = types.PositionEncodingKind.Utf16) -> types.Position:
    """The LSP position of character `offset` of `text` (lines split at \\n, \\r\\n and \\r)."""
    line_start, line = 0, 0
    i = 0
    while True:
        nl = min((p for p in (text.find("\n", i), text.find("\r", i)) if p != -1), default=-1)
        if nl == -1 or nl >= offset:
            break
        width = 2 if text.startswith("\r\n", nl) else 1
        if nl + width > offset:  # offset inside a \r\n pair: count it on this line
            break
        line += 1
        i = line_start = nl + width
    return types.Position(line=line, character=_units(text[line_start:offset], encoding))


def changed_span(old: str, new: str) -> tuple[int, int, str]:
    """(start, end in old, replacement) of the smallest single edit turning old into new."""
    limit = min(len(old), len(new))
    start = 0
    while start < limit and old[start] == new[start]:
        start += 1
    end_old, end_new = len(old), len(new)
    while end_old > start and end_new > start and old[end_old - 1] == new[end_new - 1]:
        end_old -= 1
        end_new -= 1
    return start, end_old, new[start:end_new]


def text_edit(old: str, new: str, encoding: str = types.PositionEncodingKind.Utf16) -> types.TextEdit:
    start, end, replacement = changed_span(old, new)
    return types.TextEdit(range=types.Range(start=position_at(old, start, encoding), end=position_at(old, end, encoding)),
                          new_text=replacement)


SETTLE_S = 2.0
"""How long an edit waits for the editor to report the previous edit of the same document."""


class EditorEdits:
    """The Workspace's edit sink on an LSP connection (agent/workspace.py `EditSink`).

    An edit names the document version it applies to, and the editor refuses it when its buffer
    has moved on. Its own previous edit moves the buffer too, and the editor reports that with a
    didChange that may come late (Neovim debounces them), so a second edit of one document waits
    for it (at most SETTLE_S) instead of naming the old version and being refused as stale."""

    def __init__(self, server: Any, root: Path) -> None:
        self.server, self.root = server, root
        self._sent: dict[str, int] = {}
        """uri -> the version our last applied edit named, until the editor reports a newer one."""

    @property
    def encoding(self) -> str:
        return getattr(self.server.workspace, "position_encoding", None) or types.PositionEncodingKind.Utf16

    async def apply(self, path: str, old_text: str | None, new_text: str, version: int | None) -> bool:
        uri = (self.root / path).as_uri()
        doc = await self._settled(uri)
        current = doc.source if old_text is None else old_text
        if doc.version is not None and version is not None and doc.version != version:
            return False  # the buffer moved on since the agent read it
        if doc.source != current:
            return False  # the edit's positions are counted in `old_text`, and the buffer holds more (typing)
        named = doc.version  # pygls moves `doc` on in place when a didChange comes during the request
        edit = types.TextDocumentEdit(
            text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=named),
            edits=[text_edit(current, new_text, self.encoding)],
        )
        params = types.ApplyWorkspaceEditParams(edit=types.WorkspaceEdit(document_changes=[edit]),
                                                label=f"Composer: edit {path}")
        result = await self.server.workspace_apply_edit_async(params)
        if not result.applied:
            log.info("editor refused the edit to %s: %s", path, result.failure_reason)
        elif named is not None:
            self._sent[uri] = named
        return bool(result.applied)

    async def _settled(self, uri: str) -> Any:
        """The document, once the editor has reported our last edit of it (or SETTLE_S passed)."""
        doc, sent = self.server.workspace.get_text_document(uri), self._sent.pop(uri, None)
        deadline = time.monotonic() + SETTLE_S
        while sent is not None and doc.version == sent and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
            doc = self.server.workspace.get_text_document(uri)
        return doc
