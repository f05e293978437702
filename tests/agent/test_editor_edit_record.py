"""The record of which buffers hold the agent's last editor edit (agent/editor_edits.py): it
outlives the server that wrote it, merges with another server's of the same workspace, and a
damaged record means "no edit known", never an error. The rewind it serves:
tests/agent/test_unsaved_buffers.py and tests/server/test_rewind.py."""

from __future__ import annotations

import json
import logging

from agent.editor_edits import RECORD_NAME, EditorEdits


def test_an_edit_is_known_to_the_next_server_until_its_buffer_closes(tmp_path):
    EditorEdits(tmp_path).record("src/a.py", "the agent's\r\ntext\r\n")
    after_restart = EditorEdits(tmp_path)
    assert after_restart.holds_last_edit("src/a.py", "the agent's\r\ntext\r\n") is True
    assert after_restart.holds_last_edit("src/a.py", "the agent's\ntext\n") is False, "typed (or reloaded) since"
    assert after_restart.holds_last_edit("src/b.py", "the agent's\r\ntext\r\n") is None
    after_restart.forget("src/a.py")
    assert EditorEdits(tmp_path).holds_last_edit("src/a.py", "the agent's\r\ntext\r\n") is None
    assert (tmp_path / ".composer" / ".gitignore").read_text() == "*\n", "git never lists the record"


def test_two_servers_of_one_workspace_keep_each_other_s_edits(tmp_path):
    first, second = EditorEdits(tmp_path), EditorEdits(tmp_path)
    first.record("a.py", "first's")
    second.record("b.py", "second's")  # second read the record before first wrote it
    second.forget("a.py")
    first.record("c.py", "first's again")
    merged = EditorEdits(tmp_path)
    assert merged.holds_last_edit("a.py", "first's") is None
    assert merged.holds_last_edit("b.py", "second's") and merged.holds_last_edit("c.py", "first's again")


def test_a_damaged_record_knows_no_edit_and_is_replaced_by_the_next(tmp_path, caplog):
    record = tmp_path / ".composer" / RECORD_NAME
    record.parent.mkdir()
    for damage in ('{"version": 1, "buffers": {"a.py": "abc"', '["a.py"]', '{"version": 9, "buffers": {}}'):
        record.write_text(damage)
        with caplog.at_level(logging.WARNING):
            assert EditorEdits(tmp_path).holds_last_edit("a.py", "text") is None
        assert "ignoring" in caplog.text and str(record) in caplog.text
        caplog.clear()
    edits = EditorEdits(tmp_path)
    edits.record("b.py", "text")
    assert json.loads(record.read_text())["buffers"].keys() == {"b.py"}
    assert EditorEdits(tmp_path).holds_last_edit("b.py", "text")
