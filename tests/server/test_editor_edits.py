"""server/editor.py `EditorEdits` against a stand-in editor: an edit after the editor's own edit
names the version the editor reports for it, whether the report (didChange) comes before the
editor answers the edit or late, and is refused when that report brought the person's typing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from lsp_client import apply_text_edits

from server import editor
from server.editor import EditorEdits

TEXT = "".join(f"v{i} = {i}\n" for i in range(10))


class StandInEditor:
    """One open document; applies edits that name its version, and reports each change at once
    (before answering) or `delay` seconds later with `typed` put before the text."""

    def __init__(self, delay: float = 0.0, typed: str = "") -> None:
        self.doc = SimpleNamespace(version=1, source=TEXT)
        self.workspace = SimpleNamespace(get_text_document=lambda uri: self.doc, position_encoding=None)
        self.delay, self.typed, self.named = delay, typed, []

    def _report(self, text: str) -> None:
        self.doc.version, self.doc.source = self.doc.version + 1, text

    async def workspace_apply_edit_async(self, params):
        [change] = params.edit.document_changes
        self.named.append(change.text_document.version)
        if change.text_document.version != self.doc.version:
            return SimpleNamespace(applied=False, failure_reason="stale")
        new = apply_text_edits(self.doc.source, list(change.edits))
        if self.delay:
            asyncio.get_running_loop().call_later(self.delay, self._report, self.typed + new)
        else:
            self._report(new)
        return SimpleNamespace(applied=True, failure_reason=None)


async def test_a_report_that_came_before_the_answer_is_not_waited_for(monkeypatch):
    monkeypatch.setattr(editor, "SETTLE_S", 60.0)  # a wait for a report that already came would hang
    stand_in = StandInEditor()
    sink = EditorEdits(stand_in, Path("/ws"))
    first = TEXT.replace("v1 = 1", "v1 = 10")
    assert await sink.apply("far.py", TEXT, first, 1)
    assert await asyncio.wait_for(sink.apply("far.py", first, first.replace("v8 = 8", "v8 = 80"), None), 5)
    assert stand_in.named == [1, 2] and "v8 = 80" in stand_in.doc.source


async def test_a_late_report_is_waited_for_and_typing_in_it_refuses_the_edit():
    stand_in = StandInEditor(delay=0.1)
    sink = EditorEdits(stand_in, Path("/ws"))
    first = TEXT.replace("v1 = 1", "v1 = 10")
    assert await sink.apply("far.py", TEXT, first, 1)
    assert await sink.apply("far.py", first, first.replace("v8 = 8", "v8 = 80"), None)
    assert stand_in.named == [1, 2]  # not refused as stale

    typing = StandInEditor(delay=0.1, typed="# typed\n")
    sink = EditorEdits(typing, Path("/ws"))
    assert await sink.apply("far.py", TEXT, first, 1)
    assert not await sink.apply("far.py", first, first.replace("v8 = 8", "v8 = 80"), None)
    await asyncio.sleep(0.15)
    assert typing.doc.source == "# typed\n" + first  # nothing landed on the wrong line


async def test_typing_reported_before_the_answer_is_what_the_agent_reads_and_edits(tmp_path):
    from agent.workspace import Workspace

    stand_in = StandInEditor()
    (tmp_path / "far.py").write_text(TEXT)
    workspace = Workspace(tmp_path, edit_sink=EditorEdits(stand_in, tmp_path))
    workspace.set_buffer("far.py", TEXT, 1)

    def report(text: str) -> None:  # the person typed a line; the didChange reaches the workspace
        stand_in.doc.version, stand_in.doc.source = stand_in.doc.version + 1, "# typed\n" + text
        workspace.set_buffer("far.py", stand_in.doc.source, stand_in.doc.version)

    stand_in._report = report
    await workspace.apply_text("far.py", TEXT.replace("v1 = 1\n", "v1 = 10\n"))
    seen = workspace.read_text("far.py")
    assert seen.startswith("# typed\n")  # not the agent's own expectation without the typing
    stand_in._report = lambda text: StandInEditor._report(stand_in, text)
    await workspace.apply_text("far.py", seen.replace("v8 = 8\n", "v8 = 80\n"))
    assert stand_in.doc.source == "# typed\n" + TEXT.replace("v1 = 1\n", "v1 = 10\n").replace("v8 = 8\n", "v8 = 80\n")
