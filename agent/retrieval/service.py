"""The codebase index of a workspace as a running service: built in a background thread (at a
lower CPU priority than the model), kept fresh from the editor's saves and edits, shared by all
the sessions of a process, and never in the way of a prompt.

    live = live_index("/repo", "minilm", on_progress=lambda done, total: ...)   # starts building
    live.index()              # the CodebaseIndex once it is open (None before): codebase_search
    live.touch(["a.py"])                      # didSave / didClose: re-read from the disk
    live.touch(["a.py"], texts={"a.py": t})   # didChange: the unsaved text (debounced)

`spec` names the embedder: "minilm" (the bundled all-MiniLM-L6-v2 with its code adapter), an
OpenAI-compatible base URL ("http://host:8000/v1", model from $COMPOSER_EMBEDDING_MODEL), or "off".
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from agent.retrieval.embedder import Embedder, EndpointEmbedder, MiniLMEmbedder
from agent.retrieval.index import CodebaseIndex

log = logging.getLogger(__name__)

DEBOUNCE_S = 1.5
"""Unsaved edits wait this long for more typing before they are re-indexed."""
BACKGROUND_NICENESS = 10


def make_embedder(spec: str) -> Embedder | None:
    if spec == "off":
        return None
    if spec == "minilm":
        return MiniLMEmbedder()
    if spec.startswith(("http://", "https://")):
        return EndpointEmbedder(spec, os.environ.get("COMPOSER_EMBEDDING_MODEL", "embedding"),
                                os.environ.get("COMPOSER_API_KEY"))
    raise ValueError(f"index spec {spec!r} is not 'off', 'minilm' or an http(s) embeddings URL")


def default_spec() -> str:
    """$COMPOSER_INDEX, else the bundled MiniLM."""
    return os.environ.get("COMPOSER_INDEX", "minilm")


class LiveIndex:
    def __init__(self, root: Path, embedder: Embedder) -> None:
        self.root, self.embedder = root, embedder
        self.listeners: list[Callable[[int, int], None]] = []
        self.error: str | None = None
        self._index: CodebaseIndex | None = None
        self._jobs: queue.Queue[tuple[float, dict[str, str | None]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=f"composer-index:{root.name}", daemon=True)
        self._thread.start()

    def index(self) -> CodebaseIndex | None:
        return self._index

    def touch(self, paths: list[str], texts: Mapping[str, str] | None = None) -> None:
        """Re-index `paths` (with `texts`: the editor's unsaved text, after a pause in typing)."""
        due = time.monotonic() + (DEBOUNCE_S if texts else 0.0)
        self._jobs.put((due, {p: (texts or {}).get(p) for p in paths}))

    def close(self) -> None:
        self._jobs.put(None)

    def _progress(self, done: int, total: int) -> None:
        for listener in list(self.listeners):
            try:
                listener(done, total)
            except Exception:  # a listener's failure must not stop indexing
                log.exception("index progress listener failed")

    def _run(self) -> None:
        # Linux: the priority of this thread only; the model's threads keep theirs.
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICENESS)
        try:
            index = CodebaseIndex(self.root, self.embedder, on_progress=self._progress)
            self._index = index
            index.update()
        except Exception as err:  # reported to whoever asks; sessions go on without the index
            self.error = f"{type(err).__name__}: {err}"
            log.warning("codebase index of %s failed: %s", self.root, self.error)
            return
        while (job := self._jobs.get()) is not None:
            pending = dict(job[1])
            due = job[0]
            while True:  # coalesce what arrives before the debounce ends
                wait = due - time.monotonic()
                try:
                    more = self._jobs.get(timeout=max(wait, 0.0)) if wait > 0 else self._jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    return
                pending.update(more[1])
                due = max(due, more[0])
            self._update(index, pending)

    @staticmethod
    def _update(index: CodebaseIndex, pending: dict[str, str | None]) -> None:
        texts = {p: t for p, t in pending.items() if t is not None}
        try:
            index.update_files(list(pending), texts=texts or None)
        except Exception:
            log.exception("re-indexing %s failed", sorted(pending))


_LIVE: dict[tuple[Path, str], LiveIndex] = {}
_LOCK = threading.Lock()


def live_index(root: str | os.PathLike[str], spec: str | None = None,
               on_progress: Callable[[int, int], None] | None = None) -> LiveIndex | None:
    """The process's live index of `root` (started on first use), or None when `spec` is off."""
    spec = spec or default_spec()
    key = (Path(root).resolve(), spec)
    with _LOCK:
        if key not in _LIVE:
            embedder = make_embedder(spec)
            if embedder is None:
                return None
            _LIVE[key] = LiveIndex(key[0], embedder)
        live = _LIVE[key]
    if on_progress is not None and on_progress not in live.listeners:
        live.listeners.append(on_progress)
    return live
