"""The record of which buffers hold the agent's last editor edit (agent/editor_edits.py): it
outlives the server that wrote it, merges with another server's of the same workspace, forgets
a buffer re-opened with other text, stays bounded, and a damaged record means "no edit known",
never an error. The rewind it serves: tests/agent/test_unsaved_buffers.py and
tests/server/test_rewind.py."""

from __future__ import annotations

import json
import logging

from agent import editor_edits
from agent.editor_edits import RECORD_NAME, BufferEditRecord


def test_an_edit_is_known_to_the_next_server_until_its_buffer_closes(tmp_path):
    BufferEditRecord(tmp_path).record("src/a.py", "the agent's\r\ntext\r\n")
    after_restart = BufferEditRecord(tmp_path)
    assert after_restart.holds_last_edit("src/a.py", "the agent's\r\ntext\r\n") is True
    assert after_restart.holds_last_edit("src/a.py", "the agent's\ntext\n") is False, "typed (or reloaded) since"
    assert after_restart.holds_last_edit("src/b.py", "the agent's\r\ntext\r\n") is None
    after_restart.forget("src/a.py")
    assert BufferEditRecord(tmp_path).holds_last_edit("src/a.py", "the agent's\r\ntext\r\n") is None
    assert (tmp_path / ".composer" / ".gitignore").read_text() == "*\n", "git never lists the record"


def test_a_buffer_that_opens_clean_with_other_text_drops_its_entry(tmp_path):
    # Closed while no server ran, the buffer lost the agent's unsaved text: re-opened clean, it is
    # the person's, however they type in it later. An unsaved buffer the editor kept is the agent's
    # edit, or the agent's edit typed in since.
    first = BufferEditRecord(tmp_path)
    for name in ("kept.py", "typed.py", "closed.py"):
        first.record(name, "the agent's")
    restarted = BufferEditRecord(tmp_path)
    restarted.opened("kept.py", "the agent's", clean=False)
    restarted.opened("typed.py", "the agent's, then typed", clean=False)
    restarted.opened("closed.py", "the disk's", clean=True)
    assert restarted.holds_last_edit("closed.py", "the disk's, then typed") is None
    again = BufferEditRecord(tmp_path)
    assert again.holds_last_edit("closed.py", "the agent's") is None
    assert again.holds_last_edit("kept.py", "the agent's") is True
    assert again.holds_last_edit("typed.py", "the agent's, then typed") is False


def test_two_servers_of_one_workspace_keep_each_other_s_edits(tmp_path):
    first, second = BufferEditRecord(tmp_path), BufferEditRecord(tmp_path)
    assert second.holds_last_edit("a.py", "first's") is None  # second reads the record before first writes
    first.record("a.py", "first's")
    second.record("b.py", "second's")
    second.forget("a.py")  # closed in second's editor: gone for both
    first.record("c.py", "first's again")
    merged = BufferEditRecord(tmp_path)
    assert merged.holds_last_edit("a.py", "first's") is None
    assert merged.holds_last_edit("b.py", "second's") and merged.holds_last_edit("c.py", "first's again")


def test_the_record_keeps_the_newest_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(editor_edits, "MAX_ENTRIES", 3)
    edits = BufferEditRecord(tmp_path)
    for name in ("a", "b", "c", "d"):
        edits.record(f"{name}.py", name)
    edits.record("b.py", "b again")  # the newest now
    on_disk = BufferEditRecord(tmp_path)
    assert [on_disk.holds_last_edit(f"{n}.py", t) for n, t in [("a", "a"), ("c", "c"), ("d", "d"), ("b", "b again")]] == [
        None, True, True, True]


def test_a_damaged_record_knows_no_edit_and_is_replaced_by_the_next(tmp_path, caplog):
    record = tmp_path / ".composer" / RECORD_NAME
    record.parent.mkdir()
    for damage in ('{"version": 1, "buffers": {"a.py": "abc"', '["a.py"]', '{"version": 9, "buffers": {}}'):
        record.write_text(damage)
        with caplog.at_level(logging.WARNING):
            assert BufferEditRecord(tmp_path).holds_last_edit("a.py", "text") is None
        assert "ignoring" in caplog.text and str(record) in caplog.text
        caplog.clear()
    edits = BufferEditRecord(tmp_path)
    edits.record("b.py", "text")
    assert json.loads(record.read_text())["buffers"].keys() == {"b.py"}
    assert BufferEditRecord(tmp_path).holds_last_edit("b.py", "text")
