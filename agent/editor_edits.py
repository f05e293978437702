"""Which open buffers still hold the agent's last edit, known across server restarts.

An agent's edit of a file open in the editor lives unsaved in its buffer (agent/workspace.py
`apply_text`). A rewind puts such a buffer back only while it holds exactly the text that edit
left (agent/buffer_rewind.py), so the person's typing is never overwritten. Kept in memory alone,
that knowledge died with the server: after a restart (a crash, an editor reload) the editor
re-opens the same unsaved buffers, but nothing knew them as the agent's, and a rewind left them
as they were. So each edit's text is also recorded as a digest in the workspace's state directory:

    .composer/editor-edits.json     {"version": 1, "buffers": {path: sha256 of the text}}

A buffer that opens clean with other text than its entry's drops the entry (closed while no
server ran, the edit left with its unsaved text), and so does a closed one; the newest MAX_ENTRIES
are kept. Each change re-reads the record under a lock (.composer/editor-edits.lock) and replaces
it atomically, so servers of one workspace keep each other's entries. The record can only make a
rewind do more of what the person asked: a damaged or missing one means "no edit known", which
leaves a buffer alone, as before.

Tests: .venv/bin/python -m pytest tests/agent/test_editor_edit_record.py tests/server/test_rewind.py -k restart
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from agent.exceptions import WorkspaceError
from agent.store_lock import StoreLock
from agent.textfile import atomic_write, make_state_dir

log = logging.getLogger(__name__)

RECORD_NAME = "editor-edits.json"
FORMAT_VERSION = 1
MAX_ENTRIES = 1000
"""Buffers never re-opened keep their entries until newer ones push them out."""


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class BufferEditRecord:
    """Path -> digest of the text the agent's last editor edit left in that path's buffer."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._path = self.root / ".composer" / RECORD_NAME
        self._known: dict[str, str] | None = None
        self._read_at: tuple[int, int] | None = None
        """The record's (mtime in ns, inode) when last read or written here: a close reads it only
        if it changed (each write is a new file, so the inode tells even within one mtime tick)."""
        self._warned = False

    def holds_last_edit(self, rel: str, text: str) -> bool | None:
        """None: no edit of the agent's is known in this buffer; True: `text` is what the last
        one left; False: the buffer changed since."""
        known = self._load().get(rel)
        return None if known is None else known == digest(text)

    def record(self, rel: str, text: str) -> None:
        self._change(rel, digest(text))

    def opened(self, rel: str, text: str, *, clean: bool) -> None:
        """The editor opened a buffer (a restarted server learns of those still open). One that
        opens clean (the file's text) holds no unsaved edit, unless the edit was its text: an
        entry of other text is dropped. An unsaved one the editor kept through the restart keeps
        its entry: typed in since, it is refused by a rewind with that reason."""
        if clean and self.holds_last_edit(rel, text) is False:
            self._change(rel, None)

    def forget(self, rel: str) -> None:
        """The buffer closed: its unsaved text, the agent's edit with it, is gone. Most closes
        cost a stat: the record is read again only when another server wrote it since."""
        if rel in self._load() or self._stamp() != self._read_at:
            self._change(rel, None)

    def _change(self, rel: str, value: str | None) -> None:
        known = self._load()
        known.pop(rel, None)
        if value is not None:
            known[rel] = value  # the newest last
        try:
            make_state_dir(self.root)
            with StoreLock(self._path.with_suffix(".lock")).exclusive():
                on_disk = self._read()  # another server of this workspace may have written since
                if on_disk.get(rel) != value:
                    on_disk.pop(rel, None)
                    if value is not None:
                        on_disk[rel] = value
                    on_disk = dict(list(on_disk.items())[-MAX_ENTRIES:])
                    data = json.dumps({"version": FORMAT_VERSION, "buffers": on_disk})
                    atomic_write(self._path, data.encode(), durable=False)
                    self._read_at = self._stamp()
                self._known = on_disk  # what every server of the workspace knows now
        except (OSError, WorkspaceError) as err:  # read-only, or `.composer` a link: known for this server's life
            self._warn(f"could not record the agent's editor edit in {self._path}: {err}")

    def _load(self) -> dict[str, str]:
        if self._known is None:
            self._known = self._read()
        return self._known

    def _stamp(self) -> tuple[int, int] | None:
        try:
            stat = self._path.stat()
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_ino

    def _read(self) -> dict[str, str]:
        self._read_at = self._stamp()
        try:
            record = json.loads(self._path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            self._warn(f"ignoring {self._path} ({err}): buffers edited before it was damaged are the person's now")
            return {}
        buffers = record.get("buffers") if isinstance(record, dict) else None
        if not isinstance(buffers, dict) or record.get("version") != FORMAT_VERSION:
            self._warn(f"ignoring {self._path}: not a version {FORMAT_VERSION} record")
            return {}
        return {k: v for k, v in buffers.items() if isinstance(k, str) and isinstance(v, str)}

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("%s", message)
