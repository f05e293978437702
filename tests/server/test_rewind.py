"""Undoing a turn whose shell command rewrote the workspace, through composer-lsp (`composer/rewind`
and `workspace/executeCommand composer.rewind`): afterwards the tree is byte-identical to before
the turn (paths, bytes, permission bits, links). And an editor that refuses an edit: the model is
told, and nothing reaches the disk.

    .venv/bin/python -m pytest -q tests/server/test_rewind.py
"""

from __future__ import annotations

import json
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


async def test_one_change_of_a_turn_is_undone_and_the_other_kept(workspace, model, tmp_path):
    lines = "".join(f"value_{i} = {i}\n" for i in range(20))
    (workspace / "config.py").write_text(lines)
    edits = [{"name": "edit_file", "arguments": {"path": "config.py", "old_string": f"value_{i} = {i}",
                                                   "new_string": f"value_{i} = {i * 100}"}} for i in (1, 17)]
    model.script = [[{"text": "", "tool_calls": edits}, {"text": "Done."}]]
    client = await start_client(workspace, model.url, tmp_path / "logs", "--index", "off")
    try:
        session_id = await _turn(client, workspace)
        listed = await client.protocol.send_request_async("composer/turnChanges", {"sessionId": session_id})
        [config] = [f for f in listed["files"] if f["path"] == "config.py"]
        first, second = config["hunks"]
        assert "+value_1 = 100" in first["lines"] and "+value_17 = 1700" in second["lines"]
        answer = await client.protocol.send_request_async("composer/reviewHunks", {
            "sessionId": session_id, "undo": [{"path": "config.py", "index": 1, "digest": second["digest"]}],
            "keep": [{"path": "config.py", "index": 0, "digest": first["digest"]}]})
        assert answer["undone"] == [{"path": "config.py", "index": 1}] and answer["refused"] == {}
        assert (workspace / "config.py").read_text() == lines.replace("value_1 = 1\n", "value_1 = 100\n")
        again = await client.protocol.send_request_async("composer/reviewHunks", {
            "sessionId": session_id, "undo": [{"path": "config.py", "index": 1, "digest": second["digest"]}]})
        assert "list them again" in again["refused"]["config.py"]  # that hunk is gone
        with pytest.raises(Exception, match="undo"):
            await client.protocol.send_request_async("composer/reviewHunks", {"sessionId": session_id, "undo": [{"path": 1}]})
    finally:
        await stop_client(client)
    records = [json.loads(line) for f in (tmp_path / "logs").rglob("*.jsonl") for line in f.read_text().splitlines()]
    verdicts = [(r["path"], r["hunk"], r["accepted"]) for r in records if r.get("type") == "edit_review"]
    assert sorted(verdicts) == [("config.py", 0, True), ("config.py", 1, False)]
    rewards = [r["reward"] for r in records if r.get("type") == "outcome" and r.get("detail", {}).get("hunk") is not None]
    assert sorted(rewards) == [-1.0, 1.0]


def _edit_of_an_unsaved_buffer(workspace: Path, model) -> tuple[str, str, str]:
    """config.py on the disk, the person's unsaved text of it, and that text after the scripted
    model's edit of another line."""
    lines = "".join(f"value_{i} = {i}\n" for i in range(20))
    (workspace / "config.py").write_text(lines)
    mine = lines.replace("value_3 = 3\n", "value_3 = 'mine, unsaved'\n")
    edit = {"name": "edit_file", "arguments": {"path": "config.py", "old_string": "value_15 = 15",
                                               "new_string": "value_15 = 1500"}}
    model.script = [[{"text": "", "tool_calls": [edit]}, {"text": "Done."}]]
    return lines, mine, mine.replace("value_15 = 15\n", "value_15 = 1500\n")


async def test_rewind_and_review_reach_the_unsaved_buffer_the_agent_edited(workspace, model, tmp_path):
    """The person typed in config.py without saving; the agent's edit goes to that buffer through
    the editor, so the disk never holds it. The turn's changes are the agent's alone, and a rewind
    gives the buffer back as the person left it (their unsaved line kept), then its backup the
    agent's edit again; the disk is never written."""
    lines, mine, agents = _edit_of_an_unsaved_buffer(workspace, model)
    on_disk = (workspace / "config.py").stat()
    client = await start_client(workspace, model.url, tmp_path / "logs", "--index", "off")
    try:
        uri = client.open(workspace / "config.py", mine, version=2)
        session_id = await _turn(client, workspace)
        assert client.documents[uri][0] == agents and (workspace / "config.py").read_text() == lines
        listed = await client.protocol.send_request_async("composer/turnChanges", {"sessionId": session_id})
        [config] = listed["files"]
        assert [[line for line in h["lines"] if line[0] in "+-"] for h in config["hunks"]] == [
            ["-value_15 = 15", "+value_15 = 1500"]], "the person's unsaved line is not the turn's"
        result = await client.protocol.send_request_async("composer/rewind", {"sessionId": session_id})
        assert result["buffers"] == {"reverted": ["config.py"], "refused": {}}
        assert client.documents[uri][0] == mine, "the agent's edit left the buffer, the person's stayed"
        again = await client.protocol.send_request_async(
            "composer/rewind", {"sessionId": session_id, "checkpointId": result["backupCheckpointId"]})
        assert again["buffers"]["reverted"] == ["config.py"] and client.documents[uri][0] == agents
    finally:
        await stop_client(client)
    now = (workspace / "config.py").stat()
    assert (now.st_ino, now.st_mtime_ns) == (on_disk.st_ino, on_disk.st_mtime_ns), "the disk was never written"


async def test_a_restarted_server_rewinds_the_agent_s_edit_still_in_the_buffer(workspace, model, tmp_path):
    """The server stops with the agent's edit unsaved in an open buffer; the editor starts a new
    one and opens the buffer there again. The session, loaded, rewinds it: the buffer gets the
    person's text back, and the disk is never written."""
    lines, mine, agents = _edit_of_an_unsaved_buffer(workspace, model)
    client = await start_client(workspace, model.url, tmp_path / "logs", "--index", "off")
    try:
        client.open(workspace / "config.py", mine, version=2)
        session_id = await _turn(client, workspace)
    finally:
        await stop_client(client)
    restarted = await start_client(workspace, model.url, tmp_path / "logs", "--index", "off")
    try:
        uri = restarted.open(workspace / "config.py", agents, version=5)
        await restarted.protocol.send_request_async(
            "session/load", {"sessionId": session_id, "cwd": str(workspace), "mcpServers": []})
        result = await restarted.protocol.send_request_async("composer/rewind", {"sessionId": session_id})
        assert result["buffers"] == {"reverted": ["config.py"], "refused": {}}
        assert restarted.documents[uri][0] == mine
    finally:
        await stop_client(restarted)
    assert (workspace / "config.py").read_text() == lines


async def test_a_rewind_can_take_the_turn_out_of_the_conversation(workspace, model, tmp_path):
    edit = {"name": "edit_file", "arguments": {"path": "hello.py", "old_string": "hello", "new_string": "goodbye"}}
    model.script = [[{"text": "", "tool_calls": [edit]}, {"text": "Done."}]]
    client = await start_client(workspace, model.url, tmp_path / "logs", "--index", "off")
    try:
        session_id = await _turn(client, workspace)  # "reorganise": the edit
        with pytest.raises(Exception, match="conversation must be a bool"):
            await client.protocol.send_request_async("composer/rewind", {"sessionId": session_id, "conversation": "yes"})
        told = await client.protocol.send_request_async("composer/rewind", {"sessionId": session_id})
        assert told["forgotTurn"] is False and (workspace / "hello.py").read_text() == "print('hello')\n"
        asked = len(model.requests)
        await client.protocol.send_request_async("session/prompt", {"sessionId": session_id,
                                                                    "prompt": [{"type": "text", "text": "next"}]})
        seen = json.dumps(model.requests[asked]["messages"])
        assert "reorganise" in seen and "restored the workspace" in seen, "the model is told of the rewind"

        session_id = await _turn(client, workspace)
        forgot = await client.protocol.send_request_async("composer/rewind", {"sessionId": session_id,
                                                                              "conversation": True})
        assert forgot["forgotTurn"] is True and (workspace / "hello.py").read_text() == "print('hello')\n"
        asked = len(model.requests)
        await client.protocol.send_request_async("session/prompt", {"sessionId": session_id,
                                                                    "prompt": [{"type": "text", "text": "next"}]})
        assert [m["role"] for m in model.requests[asked]["messages"]] == ["system", "user"], \
            "the model goes on as if the turn never was"
    finally:
        await stop_client(client)


async def test_a_turn_that_changed_no_file_can_leave_the_conversation(workspace, model, tmp_path):
    """An answer the person does not want built on: `conversation: true` with nothing to rewind
    forgets the turn alone, for the live session and for one loaded from its log."""
    from agent.replay import conversation
    from agent.session_log import read_session

    model.script = [[{"text": "It prints hello."}]]
    client = await start_client(workspace, model.url, tmp_path / "logs", "--index", "off")
    try:
        session_id = await _turn(client, workspace)  # "reorganise", answered without a change
        with pytest.raises(Exception, match="no checkpoint"):
            await client.protocol.send_request_async("composer/rewind", {"sessionId": session_id})
        forgot = await client.protocol.send_request_async("composer/rewind", {"sessionId": session_id, "conversation": True})
        assert forgot["forgotTurn"] is True and forgot["checkpointId"] is None and forgot["changes"]["modified"] == []
        with pytest.raises(Exception, match="no turn to forget"):
            await client.protocol.send_request_async("composer/rewind", {"sessionId": session_id, "conversation": True})
        asked = len(model.requests)
        await client.protocol.send_request_async("session/prompt", {"sessionId": session_id,
                                                                    "prompt": [{"type": "text", "text": "next"}]})
        assert [m["content"] for m in model.requests[asked]["messages"][1:]] == ["next"]
    finally:
        await stop_client(client)
    (log,) = (tmp_path / "logs").rglob(f"*{session_id}*.jsonl")
    records = read_session(log)
    assert [m["content"] for m in conversation(records, "sys")[1:]] == ["next", "It prints hello."]
    assert [r["signal"] for r in records if r["type"] == "outcome"] == ["turn_forgotten"]
