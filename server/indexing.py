"""The codebase index seen from the language server: its background build shown as LSP work-done
progress, and the editor's document events keeping it fresh (saves at once, unsaved edits after
a pause in typing, closes back to the disk).

    indexing = Indexing(server, spec)      # spec: "minilm", an embeddings URL, or "off"
    await indexing.start(root)             # after `initialized`; returns at once
    indexing.saved(uri); indexing.changed(uri, text); indexing.closed(uri)
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.uris import to_fs_path

from agent.retrieval.service import LiveIndex, live_index

log = logging.getLogger(__name__)


class Indexing:
    def __init__(self, server: Any, spec: str | None) -> None:
        self.server, self.spec = server, spec
        self.live: LiveIndex | None = None
        self.root: Path | None = None
        self._events: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self._listener: Any = None

    async def start(self, root: Path) -> None:
        loop = asyncio.get_running_loop()

        def from_thread(done: int, total: int) -> None:
            loop.call_soon_threadsafe(self._events.put_nowait, (done, total))

        self._listener = from_thread
        try:
            self.live = live_index(root, self.spec, on_progress=from_thread)
        except ValueError as err:
            self._log(types.MessageType.Error, f"codebase index off: {err}")
            return
        if self.live is None:
            return
        self.root = root
        self._task = asyncio.ensure_future(self._show_progress())

    def _supports_progress(self) -> bool:
        caps = self.server.client_capabilities
        return bool(caps and caps.window and caps.window.work_done_progress)

    async def _show_progress(self) -> None:
        """Begin at the first batch, report percentages, end when every file is indexed."""
        token = None
        while True:
            done, total = await self._events.get()
            if not self._supports_progress():
                continue
            if token is None:
                token = str(uuid.uuid4())
                await self.server.work_done_progress.create_async(token)
                self.server.work_done_progress.begin(token, types.WorkDoneProgressBegin(
                    title="Composer: indexing the codebase", percentage=0, cancellable=False))
            percent = int(100 * done / total) if total else 100
            if done >= total:
                self.server.work_done_progress.end(token, types.WorkDoneProgressEnd(message=f"{total} files indexed"))
                token = None
            else:
                self.server.work_done_progress.report(token, types.WorkDoneProgressReport(
                    message=f"{done}/{total} files", percentage=percent))

    def _rel(self, uri: str) -> str | None:
        if self.live is None or self.root is None or not uri.startswith("file://"):
            return None
        try:
            return Path(to_fs_path(uri)).resolve().relative_to(self.root).as_posix()
        except ValueError:
            return None

    def saved(self, uri: str) -> None:
        rel = self._rel(uri)
        if rel is not None:
            self.live.touch([rel])

    closed = saved  # the disk's text again

    def changed(self, uri: str, text: str) -> None:
        rel = self._rel(uri)
        if rel is not None:
            self.live.touch([rel], texts={rel: text})

    def _log(self, kind: types.MessageType, message: str) -> None:
        log.warning(message)
        self.server.window_log_message(types.LogMessageParams(type=kind, message=message))

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self.live is not None and self._listener in self.live.listeners:
            self.live.listeners.remove(self._listener)
