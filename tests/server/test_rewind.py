"""Undoing a turn whose shell command rewrote the workspace, through composer-lsp (`composer/rewind`
and `workspace/executeCommand composer.rewind`): afterwards the tree is byte-identical to before
the turn (paths, bytes, permission bits, links). And an editor that refuses an edit: the model is
told, and nothing reaches the disk.

    .venv/bin/python -m pytest -q tests/server/test_rewind.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lsp_client import start_client, stop_client
from lsprotocol import types
from workspace_tree import SHELL_CHANGES, SHELL_TURN, changed_paths, make_tree, snapshot

pytestmark = pytest.mark.slow


async def _turn(client, workspace: Path) -> str:
    session_id = (await client.protocol.send_request_async("session/new", {"cwd": str(workspace)}))["sessionId"]
    result = await client.protocol.send_request_async(
        "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": "reorganise"}]})
    assert result["stopReason"] == "end_turn"
    return session_id


@pytest.mark.parametrize("how", ["composer/rewind", "composer.rewind command"])
async def test_rewind_after_a_shell_turn_restores_the_tree_byte_for_byte(how, workspace, model, tmp_path):
    make_tree(workspace)
    before = snapshot(workspace)
    model.script = SHELL_TURN
    client = await start_client(workspace, model.url, tmp_path / "logs", "--index", "off")
    try:
        session_id = await _turn(client, workspace)
        after = snapshot(workspace)
        assert set(changed_paths(before, after)) >= SHELL_CHANGES, "the shell command made every kind of change"
        assert after["new/deep/raw.bin"] == ("f", 0o644, b"a\0b\xff")
        if how == "composer/rewind":
            result = await client.protocol.send_request_async("composer/rewind", {"sessionId": session_id})
        else:
            result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
                command="composer.rewind", arguments=[session_id]))
        assert changed_paths(before, snapshot(workspace)) == []
        assert "new/" in result["changes"]["deleted"] and "src/lib.py" in result["changes"]["added"]
        # The backup taken before the rewind undoes it: the turn's tree comes back as it was.
        await client.protocol.send_request_async(
            "composer/rewind", {"sessionId": session_id, "checkpointId": result["backupCheckpointId"]})
        assert changed_paths(after, snapshot(workspace)) == []
    finally:
        await stop_client(client)


async def test_an_edit_the_editor_refuses_is_reported_to_the_model_and_not_written(workspace, model, tmp_path):
    edit = {"name": "edit_file", "arguments": {"path": "hello.py", "old_string": "hello", "new_string": "goodbye"}}
    model.script = [[{"text": "", "tool_calls": [edit]}, {"text": "The editor said no."}]]
    before = snapshot(workspace)
    client = await start_client(workspace, model.url, tmp_path / "logs", "--index", "off")
    try:
        uri = client.open(workspace / "hello.py", "print('hello')  # unsaved\n", version=2)
        client.refuse_edits = True
        await _turn(client, workspace)
        (asked,) = client.applied_edits  # the editor was asked, and said no
        assert asked.edit.document_changes[0].text_document.uri == uri
    finally:
        await stop_client(client)
    assert client.documents[uri][0] == "print('hello')  # unsaved\n"
    assert snapshot(workspace) == before, "nothing reached the disk"
    told = model.requests[1]["messages"][-1]
    assert told["role"] == "tool" and "refused the edit to hello.py" in told["content"]
    failed = [u["update"] for u in client.updates if u["update"].get("status") == "failed"]
    assert len(failed) == 1 and "refused" in failed[0]["content"][0]["content"]["text"]
