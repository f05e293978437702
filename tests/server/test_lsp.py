"""composer-lsp over stdio, end to end: a real server process, a test client that behaves like an
editor (applies edits, answers permission requests), and a scripted model endpoint."""

from __future__ import annotations

import asyncio

import pytest
from lsp_client import start_client, stop_client
from lsprotocol import types
from pygls.exceptions import JsonRpcException

pytestmark = pytest.mark.slow

EDIT = {"name": "edit_file", "arguments": {"path": "hello.py", "old_string": "hello", "new_string": "goodbye"}}


@pytest.fixture
async def client(workspace, model, tmp_path):
    c = await start_client(workspace, model.url, tmp_path / "logs")
    yield c
    await stop_client(c)


async def _new(client, workspace) -> str:
    result = await client.protocol.send_request_async("session/new", {"cwd": str(workspace), "mcpServers": []})
    assert result["modes"]["currentModeId"] == "agent"
    return result["sessionId"]


async def _prompt(client, session_id: str, text: str) -> dict:
    return await client.protocol.send_request_async(
        "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]})


async def test_a_prompt_streams_and_its_edit_lands_in_the_editor_buffer(client, workspace, model):
    model.script = [[{"text": "I will change the greeting.", "tool_calls": [EDIT]}, {"text": "Changed it."}]]
    uri = client.open(workspace / "hello.py", "print('hello')  # unsaved\n", version=3)
    session_id = await _new(client, workspace)
    result = await _prompt(client, session_id, "say goodbye")
    assert result["stopReason"] == "end_turn"
    assert client.text_of() == "I will change the greeting.Changed it."
    kinds = [u["update"]["sessionUpdate"] for u in client.updates]
    assert "tool_call" in kinds and "tool_call_update" in kinds
    # The edit went to the editor, versioned, and was applied to the unsaved buffer; disk is untouched.
    (edit,) = client.applied_edits
    assert edit.edit.document_changes[0].text_document.version == 3
    assert client.documents[uri][0] == "print('goodbye')  # unsaved\n"
    assert (workspace / "hello.py").read_text() == "print('hello')\n"
    # The model read the unsaved buffer, not the disk.
    done = [u["update"] for u in client.updates if u["update"].get("status") == "completed"]
    assert any(c["type"] == "diff" and "# unsaved" in c["newText"] for u in done for c in u.get("content", []))


async def test_edits_to_files_not_open_in_the_editor_go_to_disk(client, workspace, model):
    model.script = [[{"text": "", "tool_calls": [EDIT]}]]
    session_id = await _new(client, workspace)
    await _prompt(client, session_id, "say goodbye")
    assert client.applied_edits == []
    assert (workspace / "hello.py").read_text() == "print('goodbye')\n"


async def test_review_mode_asks_with_the_diff_and_a_rejection_changes_nothing(client, workspace, model):
    model.script = [[{"text": "", "tool_calls": [EDIT]}, {"text": "OK, leaving it."}]]
    session_id = await _new(client, workspace)
    await client.protocol.send_request_async("session/set_mode", {"sessionId": session_id, "modeId": "review"})
    client.permission_answer = "reject_once"
    result = await _prompt(client, session_id, "say goodbye")
    assert result["stopReason"] == "end_turn"
    (asked,) = client.permission_requests
    assert asked["sessionId"] == session_id
    (diff,) = asked["toolCall"]["content"]
    assert diff["type"] == "diff" and diff["oldText"] == "print('hello')\n" and diff["newText"] == "print('goodbye')\n"
    assert {o["kind"] for o in asked["options"]} == {"allow_once", "allow_always", "reject_once", "reject_always"}
    assert (workspace / "hello.py").read_text() == "print('hello')\n"
    failed = [u["update"] for u in client.updates if u["update"].get("status") == "failed"]
    assert failed, "the refused call is reported as failed"


async def test_in_review_the_person_changes_the_edit_and_their_text_reaches_the_buffer(client, workspace, model):
    model.script = [[{"text": "", "tool_calls": [EDIT]}, {"text": "Done."}]]
    uri = client.open(workspace / "hello.py", "print('hello')\n", version=2)
    session_id = await _new(client, workspace)
    await client.protocol.send_request_async("session/set_mode", {"sessionId": session_id, "modeId": "review"})
    client.revised_text = "print('goodbye, world')\n"
    await _prompt(client, session_id, "say goodbye")
    (asked,) = client.permission_requests
    assert asked["_meta"]["composer"]["revisable"] is True
    assert client.documents[uri][0] == "print('goodbye, world')\n"  # applied in the editor, undoable there
    assert (workspace / "hello.py").read_text() == "print('hello')\n"  # unsaved: the person saves
    told = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"][-1]["content"]
    assert "-print('goodbye')" in told and "+print('goodbye, world')" in told
    done = [u["update"] for u in client.updates if u["update"].get("status") == "completed"]
    diffs = [c for u in done for c in u.get("content", []) if c["type"] == "diff"]
    assert [d["newText"] for d in diffs] == ["print('goodbye, world')\n"]


async def test_two_edits_of_one_open_buffer_in_one_step_wait_for_the_editor_s_report(client, workspace, model):
    lines = "".join(f"v{i} = {i}\n" for i in range(10))
    edits = [{"name": "edit_file", "arguments": {"path": "far.py", "old_string": f"v{i} = {i}\n",
                                                   "new_string": f"v{i} = {i * 10}\n"}} for i in (1, 8)]
    model.script = [[{"text": "", "tool_calls": edits}, {"text": "Both."}]]
    (workspace / "far.py").write_text(lines)
    uri = client.open(workspace / "far.py", lines, version=1)
    client.change_delay = 0.3  # the editor reports each applied edit late, as Neovim does
    session_id = await _new(client, workspace)
    await _prompt(client, session_id, "scale them")
    assert client.documents[uri][0] == lines.replace("v1 = 1\n", "v1 = 10\n").replace("v8 = 8\n", "v8 = 80\n")
    told = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert len(told) == 2 and not any("refused" in t for t in told)


async def test_cancel_stops_a_running_turn(client, workspace, model):
    model.script = [[{"text": " ".join(["word"] * 200), "delay": 0.05}]]
    session_id = await _new(client, workspace)
    turn = asyncio.ensure_future(_prompt(client, session_id, "talk"))
    await asyncio.wait_for(client.update_event.wait(), 10)
    client.protocol.notify("session/cancel", {"sessionId": session_id})
    result = await asyncio.wait_for(turn, 5)
    assert result["stopReason"] == "cancelled"
    assert len(client.text_of().split()) < 200


async def test_a_cancel_while_the_editor_applies_an_edit_reports_the_edit_it_made(client, workspace, model):
    """The stop waits for the editor's answer, so the card shows the edit done (not running for
    good) and the model's next turn knows the file changed."""
    model.script = [[{"text": "", "tool_calls": [EDIT]}, {"text": "never asked"}], [{"text": "ok"}]]
    uri = client.open(workspace / "hello.py", "print('hello')\n", version=1)
    client.apply_delay = 0.6
    session_id = await _new(client, workspace)
    turn = asyncio.ensure_future(_prompt(client, session_id, "say goodbye"))
    await until(lambda: any(u["update"].get("status") == "in_progress" for u in client.updates), "the edit to start")
    client.protocol.notify("session/cancel", {"sessionId": session_id})
    assert (await asyncio.wait_for(turn, 10))["stopReason"] == "cancelled"
    assert client.documents[uri][0] == "print('goodbye')\n"
    last = [u["update"]["status"] for u in client.updates if u["update"].get("sessionUpdate") == "tool_call_update"]
    assert last[-1] == "completed"
    await _prompt(client, session_id, "what changed?")
    told = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert told and not told[-1].startswith("Error")


async def test_cancel_request_of_the_prompt_also_stops_the_turn(client, workspace, model):
    model.script = [[{"text": " ".join(["word"] * 200), "delay": 0.05}]]
    session_id = await _new(client, workspace)
    client.protocol.send_request("session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": "talk"}]},
                                 msg_id="prompt-1")
    await asyncio.wait_for(client.update_event.wait(), 10)
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="prompt-1"))
    results = []

    async def taken() -> bool:  # a session takes a new prompt once its turn has stopped
        try:
            results.append(await _prompt(client, session_id, "again"))
        except JsonRpcException as err:
            assert "already answering" in str(err)
        return bool(results)

    await until(taken, "the cancelled turn to stop")
    assert results[0]["stopReason"] == "end_turn"  # the session is usable afterwards
    # The first turn's words stopped coming early, and all of them came before the second turn's.
    streamed = client.text_of()
    assert streamed.endswith("Done.")
    words = streamed[: -len("Done.")].split()
    assert set(words) == {"word"} and len(words) < 200


async def test_list_and_load_replay_a_logged_session(client, workspace, model, tmp_path):
    model.script = [[{"text": "", "tool_calls": [EDIT]}, {"text": "Changed it."}]]
    session_id = await _new(client, workspace)
    await _prompt(client, session_id, "say goodbye")
    await client.protocol.send_request_async("session/close", {"sessionId": session_id})
    listed = await client.protocol.send_request_async("session/list", {"cwd": str(workspace)})
    assert listed["sessions"][0]["sessionId"] == session_id and listed["sessions"][0]["title"] == "say goodbye"

    other = await start_client(workspace, model.url, tmp_path / "logs")
    try:
        params = {"sessionId": session_id, "cwd": str(workspace), "mcpServers": []}
        loads = await asyncio.gather(*(other.protocol.send_request_async("session/load", params) for _ in range(2)),
                                     return_exceptions=True)  # an editor asking twice while it loads
        [refused] = [r for r in loads if isinstance(r, JsonRpcException)]
        assert "already open" in str(refused)
        kinds = [u["update"]["sessionUpdate"] for u in other.updates]
        assert kinds[0] == "user_message_chunk" and other.text_of("user_message_chunk") == "say goodbye"
        assert "tool_call" in kinds and other.text_of() == "Changed it."
        model.script = [[], [{"text": "Second turn."}]]  # the loaded conversation goes on: turn 2
        result = await _prompt(other, session_id, "and now?")
        assert result["stopReason"] == "end_turn" and other.text_of().endswith("Second turn.")
    finally:
        await stop_client(other)


async def test_diagnostics_offer_a_fix_that_prompts_the_agent(client, workspace, model):
    uri = client.open(workspace / "hello.py", "print('hello'\n")
    diagnostic = types.Diagnostic(range=types.Range(types.Position(0, 0), types.Position(0, 5)),
                                  message="'(' was never closed", source="ruff")
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri), range=diagnostic.range,
        context=types.CodeActionContext(diagnostics=[diagnostic])))
    (action,) = actions
    assert action.command.command == "composer.fixDiagnostic"
    model.script = [[{"text": "Fixed."}]]
    result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command=action.command.command, arguments=action.command.arguments))
    assert result["stopReason"] == "end_turn" and result["sessionId"]
    asked = model.requests[-1]["messages"][-1]["content"]
    assert "'(' was never closed" in asked and "hello.py at line 1" in asked and "print('hello'" in asked
    assert client.progress_reports, "the turn showed work-done progress"
    model.script = [[{"text": "Fixed again."}]]  # an optional last argument: continue that session
    again = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="composer.fixDiagnostic", arguments=[*action.command.arguments, result["sessionId"]]))
    assert again["sessionId"] == result["sessionId"]


async def test_bad_session_requests_get_errors_that_name_the_problem(client, workspace):
    with pytest.raises(JsonRpcException, match="unknown sessionId"):
        await _prompt(client, "nope", "hi")
    with pytest.raises(JsonRpcException, match=r"params\.prompt"):
        await client.protocol.send_request_async("session/prompt", {"sessionId": await _new(client, workspace)})
    with pytest.raises(JsonRpcException, match="not a directory"):
        await client.protocol.send_request_async("session/new", {"cwd": str(workspace / "hello.py")})
    with pytest.raises(JsonRpcException, match="modeId"):
        await client.protocol.send_request_async("session/set_mode", {"sessionId": await _new(client, workspace)})
    planted = workspace / "cloned"  # a repository that ships its `.composer` as a link out of it
    planted.mkdir()
    (planted / ".composer").symlink_to(workspace.parent)
    with pytest.raises(JsonRpcException, match=r"\.composer is a symbolic link"):
        await client.protocol.send_request_async("session/new", {"cwd": str(planted)})
    assert await _new(client, workspace)  # still serving


async def test_the_codebase_index_builds_with_progress_and_follows_saves(workspace, model, tmp_path):
    (workspace / "retry.py").write_text("def backoff_delay(attempt):\n    return min(60, 2 ** attempt)\n")
    client = await start_client(workspace, model.url, tmp_path / "logs", "--index", model.url)
    try:
        # The build runs in the background; progress shows it ending.
        await until(lambda: any(isinstance(r, types.WorkDoneProgressEnd)
                                for rs in client.progress_reports.values() for r in rs), "the index build to end")
        begins = [r for rs in client.progress_reports.values() for r in rs if isinstance(r, types.WorkDoneProgressBegin)]
        assert any("indexing" in b.title for b in begins)
        # A file saved after the build becomes searchable: asked again until it is found.
        (workspace / "parse.py").write_text("def parse_config_file(path):\n    return open(path).read()\n")
        client.text_document_did_save(types.DidSaveTextDocumentParams(
            text_document=types.TextDocumentIdentifier((workspace / "parse.py").as_uri())))
        search = {"name": "codebase_search", "arguments": {"query": "parse config file"}}
        model.script = [[{"text": "", "tool_calls": [search]}, {"text": "Found it."}]]

        async def found() -> bool:
            client.updates.clear()
            session_id = await _new(client, workspace)
            await _prompt(client, session_id, "where is the config parsed?")
            done = [u["update"] for u in client.updates if u["update"].get("status") == "completed"]
            results = [u["rawOutput"]["results"] for u in done if "results" in (u.get("rawOutput") or {})]
            assert results, "codebase_search answered"
            return results[0][0]["path"] == "parse.py"

        await until(found, "the saved file to be found")
        system = model.requests[0]["messages"][0]["content"]
        assert "codebase_search" in system and "backoff_delay" in system  # the repo map
    finally:
        await stop_client(client)


async def until(condition, what: str, timeout: float = 60.0) -> None:
    """Polls `condition` (a function, or one returning an awaitable) until it holds; the timeout
    only bounds a failure, a busy machine takes what it needs below it."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        held = condition()
        if asyncio.iscoroutine(held):
            held = await held
        if held:
            return
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)
