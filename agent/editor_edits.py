"""Which open buffers still hold the agent's last edit, known across server restarts.

An agent's edit of a file open in the editor lives unsaved in its buffer (agent/workspace.py
`apply_text`). A rewind puts such a buffer back only while it holds exactly the text that edit
left (agent/buffer_rewind.py), so the person's typing is never overwritten. Kept in memory alone,
that knowledge died with the server: after a restart (a crash, an editor reload) the editor
re-opens the same unsaved buffers, but nothing knew them as the agent's, and a rewind left them
as they were. So each edit's text is also recorded as a digest in the workspace's state directory:

    .composer/editor-edits.json     {"version": 1, "buffers": {path: sha256 of the text}}

rewritten atomically on each change and merged with what another server of the same workspace
wrote meanwhile. The record is a hint that can only make a rewind do more of what the person asked;
a damaged or missing one means "no edit known", which leaves a buffer alone, as before.

Tests: .venv/bin/python -m pytest tests/agent/test_editor_edit_record.py tests/server/test_rewind.py -k restart
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from agent.textfile import atomic_write, make_state_dir

log = logging.getLogger(__name__)

RECORD_NAME = "editor-edits.json"
FORMAT_VERSION = 1


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class EditorEdits:
    """Path -> digest of the text the agent's last editor edit left in that path's buffer."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._path = self.root / ".composer" / RECORD_NAME
        self._known: dict[str, str] | None = None

    def holds_last_edit(self, rel: str, text: str) -> bool | None:
        """None: no edit of the agent's is known in this buffer (since it was opened); True: `text`
        is what the last one left; False: the buffer changed since."""
        known = self._load().get(rel)
        return None if known is None else known == digest(text)

    def record(self, rel: str, text: str) -> None:
        self._change(rel, digest(text))

    def forget(self, rel: str) -> None:
        """The buffer closed: its unsaved text, the agent's edit with it, is gone."""
        if rel in self._load():
            self._change(rel, None)

    def _change(self, rel: str, value: str | None) -> None:
        on_disk = self._read()  # another server of this workspace may have written since
        for known in (self._load(), on_disk):
            if value is None:
                known.pop(rel, None)
            else:
                known[rel] = value
        try:
            make_state_dir(self.root)
            data = json.dumps({"version": FORMAT_VERSION, "buffers": on_disk}, sort_keys=True)
            atomic_write(self._path, data.encode(), durable=False)
        except OSError as err:  # a read-only workspace: known for this server's life only
            log.warning("could not record the agent's editor edit in %s: %s", self._path, err)

    def _load(self) -> dict[str, str]:
        if self._known is None:
            self._known = self._read()
        return self._known

    def _read(self) -> dict[str, str]:
        try:
            record = json.loads(self._path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            log.warning("ignoring %s (%s): buffers edited before it was damaged are the person's now",
                        self._path, err)
            return {}
        buffers = record.get("buffers") if isinstance(record, dict) else None
        if not isinstance(buffers, dict) or record.get("version") != FORMAT_VERSION:
            log.warning("ignoring %s: not a version %d record", self._path, FORMAT_VERSION)
            return {}
        return {k: v for k, v in buffers.items() if isinstance(k, str) and isinstance(v, str)}
