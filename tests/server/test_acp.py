"""`composer-lsp --acp` end to end: a real agent process spoken to by the `acp` package's client
side (as Zed would), with a scripted model endpoint (tests/server/scripted_model.py).

Run: nice -n 19 .venv/bin/python -m pytest tests/server/test_acp.py
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import acp
import pytest
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    ReadTextFileResponse,
    RequestPermissionResponse,
    WriteTextFileResponse,
)
from scripted_model import ScriptedModel

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EDIT = {"name": "edit_file", "arguments": {"path": "app.py", "old_string": "x = 1", "new_string": "x = 2"}}


class RecordingClient:
    """An ACP client that records what the agent sends, answers permission requests with
    `answer`, and (when offered) serves fs/* from `buffers`, its unsaved editor texts."""

    def __init__(self, answer: str = "allow_once", buffers: dict[str, str] | None = None) -> None:
        self.answer = answer
        self.buffers = buffers or {}
        self.revised_text: str | None = None
        """Sent as `_meta.composer.revisedText` with the answer: the person's text of the edit."""
        self.permission_meta: list[dict[str, Any]] = []
        self.updates: list[dict[str, Any]] = []
        self.permission_requests: list[dict[str, Any]] = []
        self.reads: list[str] = []
        self.writes: list[tuple[str, str]] = []
        self.initialized: Any = None
        self.turn_cancelled = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update.model_dump(mode="json", by_alias=True, exclude_none=True))

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any],
                                 **kwargs: Any) -> RequestPermissionResponse:
        self.permission_requests.append(tool_call.model_dump(mode="json", by_alias=True, exclude_none=True))
        self.permission_meta.append(kwargs)
        if self.answer == "cancelled":  # as a client must once the turn is cancelled
            await self.turn_cancelled.wait()
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        meta = {"composer": {"revisedText": self.revised_text}} if self.revised_text is not None else None
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.answer), field_meta=meta)

    async def read_text_file(self, session_id: str, path: str, line: int | None = None,
                             limit: int | None = None, **kwargs: Any) -> ReadTextFileResponse:
        self.reads.append(path)
        if path in self.buffers:
            return ReadTextFileResponse(content=self.buffers[path])
        if Path(path).is_file():
            return ReadTextFileResponse(content=Path(path).read_text())
        raise acp.RequestError.resource_not_found(path)

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> WriteTextFileResponse:
        self.writes.append((path, content))
        self.buffers[path] = content  # an editor changes its buffer; saving is up to the user
        return WriteTextFileResponse()

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [u for u in self.updates if u["sessionUpdate"] == kind]

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(u["content"]["text"] for u in self.of(kind))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    (root / "app.py").write_text("x = 1\n")
    return root


@pytest.fixture
def model() -> Any:
    with ScriptedModel([]) as m:
        yield m


@pytest.fixture
def connect(workspace: Path, model: ScriptedModel, tmp_path: Path) -> Callable:
    """connect(client, fs=None) -> an initialized connection to a fresh agent process."""

    @contextlib.asynccontextmanager
    async def start(client: RecordingClient, fs: FileSystemCapabilities | None = None
                    ) -> AsyncIterator[acp.core.ClientSideConnection]:
        env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data"),
               "PYTHONPATH": str(REPO), "COMPOSER_LOG_LEVEL": "INFO"}
        argv = ["-m", "server", "--acp", "--workspace", str(workspace), "--endpoint", model.url,
                "--log-dir", str(tmp_path / "logs")]
        with open(tmp_path / "agent-stderr.log", "ab") as stderr:
            async with acp.spawn_agent_process(client, sys.executable, *argv, env=env, cwd=REPO,
                                               transport_kwargs={"stderr": stderr}) as (conn, _process):
                capabilities = ClientCapabilities(fs=fs or FileSystemCapabilities())
                client.initialized = await asyncio.wait_for(
                    conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=capabilities), 20)
                yield conn

    return start


async def until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    """Polls `condition`; the timeout only bounds a failure (a busy machine takes what it needs)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


async def prompt(conn: Any, session_id: str, text: str) -> Any:
    return await asyncio.wait_for(conn.prompt(session_id=session_id, prompt=[acp.text_block(text)]), 15)


async def test_initialize_shows_capabilities(connect):
    client = RecordingClient()
    async with connect(client):
        pass
    shown = client.initialized.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert shown["protocolVersion"] == acp.PROTOCOL_VERSION
    assert shown["agentInfo"]["name"] == "composer"
    capabilities = shown["agentCapabilities"]
    assert capabilities["loadSession"] is True
    assert capabilities["promptCapabilities"]["embeddedContext"] is True
    assert {"list", "close"} <= set(capabilities["sessionCapabilities"])


async def test_prompt_streams_the_answer(connect, workspace, model):
    model.script = [[{"text": "Hello from the scripted model."}]]
    client = RecordingClient()
    async with connect(client) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        assert session.modes.current_mode_id == "agent"
        result = await prompt(conn, session.session_id, "say hello")
    assert result.stop_reason == "end_turn"
    assert client.text() == "Hello from the scripted model."


async def test_edit_shows_a_diff_and_changes_the_file(connect, workspace, model):
    model.script = [[{"text": "Editing.", "tool_calls": [EDIT]}, {"text": "Done."}]]
    client = RecordingClient()
    async with connect(client) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        result = await prompt(conn, session.session_id, "set x to 2")
    assert result.stop_reason == "end_turn"
    assert (workspace / "app.py").read_text() == "x = 2\n"
    assert not client.permission_requests  # the default rules allow edits inside the workspace
    [start] = client.of("tool_call")
    assert start["kind"] == "edit" and start["locations"][0]["path"] == str(workspace / "app.py")
    done = [u for u in client.of("tool_call_update") if u.get("status") == "completed"]
    diffs = [c for u in done for c in u.get("content", []) if c["type"] == "diff"]
    assert diffs == [{"type": "diff", "path": str(workspace / "app.py"), "oldText": "x = 1\n", "newText": "x = 2\n"}]


async def test_review_mode_asks_with_the_diff(connect, workspace, model):
    model.script = [[{"tool_calls": [EDIT]}], [{"tool_calls": [EDIT]}]]
    client = RecordingClient(answer="reject_once")
    async with connect(client) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        await conn.set_session_mode(session_id=session.session_id, mode_id="review")
        assert (await prompt(conn, session.session_id, "set x to 2")).stop_reason == "end_turn"
        [asked] = client.permission_requests
        assert asked["kind"] == "edit"
        assert asked["content"][0] == {"type": "diff", "path": str(workspace / "app.py"),
                                       "oldText": "x = 1\n", "newText": "x = 2\n"}
        assert (workspace / "app.py").read_text() == "x = 1\n"
        client.answer = "allow_once"
        assert (await prompt(conn, session.session_id, "do it after all")).stop_reason == "end_turn"
    assert len(client.permission_requests) == 2
    assert (workspace / "app.py").read_text() == "x = 2\n"


async def test_review_mode_writes_the_edit_as_the_person_changed_it(connect, workspace, model):
    model.script = [[{"tool_calls": [EDIT]}, {"text": "Done."}]]
    client = RecordingClient(answer="allow_once")
    client.revised_text = "x = 3  # the person's value\n"
    async with connect(client) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        await conn.set_session_mode(session_id=session.session_id, mode_id="review")
        await prompt(conn, session.session_id, "set x to 2")
    assert client.permission_meta[0]["composer"]["revisable"] is True
    assert (workspace / "app.py").read_text() == "x = 3  # the person's value\n"
    told = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"][-1]["content"]
    assert "-x = 2" in told and "+x = 3  # the person's value" in told


async def test_cancel_stops_a_slow_reply(connect, workspace, model):
    model.script = [[{"text": " ".join(["word"] * 40), "delay": 0.2}]]
    client = RecordingClient()
    async with connect(client) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        turn = asyncio.ensure_future(prompt(conn, session.session_id, "talk slowly"))
        await until(lambda: client.of("agent_message_chunk"))
        await conn.cancel(session_id=session.session_id)
        result = await turn
    assert result.stop_reason == "cancelled"
    assert len(client.text().split()) < 40  # stopped early: the reply takes 8 s in full


async def test_cancel_while_asking_permission(connect, workspace, model):
    model.script = [[{"tool_calls": [EDIT]}]]
    client = RecordingClient(answer="cancelled")
    async with connect(client) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        await conn.set_session_mode(session_id=session.session_id, mode_id="review")
        turn = asyncio.ensure_future(prompt(conn, session.session_id, "set x to 2"))
        await until(lambda: client.permission_requests)
        await conn.cancel(session_id=session.session_id)
        client.turn_cancelled.set()
        assert (await turn).stop_reason == "cancelled"
    assert (workspace / "app.py").read_text() == "x = 1\n"
    # The client is told the call ended: none is left showing as waiting or running.
    [call] = client.of("tool_call")
    statuses = [u["status"] for u in client.of("tool_call_update") if u["toolCallId"] == call["toolCallId"] and "status" in u]
    assert statuses[-1] == "failed"


async def test_list_then_load_replays_the_history(connect, workspace, model):
    model.script = [[{"text": "Hi there."}]]
    first = RecordingClient()
    async with connect(first) as conn:
        session_id = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
        await prompt(conn, session_id, "hello agent")
    second = RecordingClient()
    async with connect(second) as conn:
        listed = await conn.list_sessions(cwd=str(workspace))
        [info] = [s for s in listed.sessions if s.session_id == session_id]
        assert info.title == "hello agent" and info.cwd == str(workspace)
        loaded = await conn.load_session(cwd=str(workspace), session_id=session_id, mcp_servers=[])
        assert loaded.modes.current_mode_id == "agent"
        await until(lambda: second.of("agent_message_chunk"))
        assert second.text("user_message_chunk") == "hello agent"
        assert second.text() == "Hi there."
        model.script = [[{"text": "Hi there."}], [{"text": "Still here."}]]
        assert (await prompt(conn, session_id, "again")).stop_reason == "end_turn"
    assert second.text().endswith("Still here.")
    assert [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "user"] == ["hello agent", "again"]


async def test_reads_see_the_clients_unsaved_buffer(connect, workspace, model):
    path = str(workspace / "app.py")
    model.script = [[{"tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}]}, {"text": "Read it."}]]
    client = RecordingClient(buffers={path: "x = 'unsaved'\n"})
    async with connect(client, FileSystemCapabilities(read_text_file=True)) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        await prompt(conn, session.session_id, "read app.py")
    assert path in client.reads
    [result] = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert "x = 'unsaved'" in result["content"]
    done = [u for u in client.of("tool_call_update") if u.get("status") == "completed"]
    assert "x = 'unsaved'" in done[0]["content"][0]["content"]["text"]
    assert (workspace / "app.py").read_text() == "x = 1\n"


async def test_edits_go_through_a_writing_client(connect, workspace, model):
    path = str(workspace / "app.py")
    create = {"name": "write_file", "arguments": {"path": "new.py", "content": "y = 3\n"}}
    model.script = [[{"tool_calls": [EDIT, create]}, {"text": "Done."}]]
    client = RecordingClient(buffers={path: "x = 1  # unsaved\n"})
    fs = FileSystemCapabilities(read_text_file=True, write_text_file=True)
    async with connect(client, fs) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        assert (await prompt(conn, session.session_id, "edit and create")).stop_reason == "end_turn"
    assert sorted(client.writes) == [(path, "x = 2  # unsaved\n"), (str(workspace / "new.py"), "y = 3\n")]
    assert (workspace / "app.py").read_text() == "x = 1\n"  # the editor holds the edit, unsaved
    assert not (workspace / "new.py").exists()


async def test_unknown_session_is_an_error_not_a_crash(connect, workspace, model):
    client = RecordingClient()
    async with connect(client) as conn:
        with pytest.raises(acp.RequestError) as caught:
            await prompt(conn, "no-such-session", "hello")
        assert caught.value.code == -32002 and "no-such-session" in str(caught.value)  # ACP: resource not found
        with pytest.raises(acp.RequestError):
            await conn.load_session(cwd=str(workspace), session_id="no-such-session", mcp_servers=[])
        with pytest.raises(acp.RequestError):
            await conn.set_session_mode(session_id="no-such-session", mode_id="review")
        await conn.cancel(session_id="no-such-session")  # a notification: logged, no reply
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])  # still serving
        with pytest.raises(acp.RequestError):
            await conn.set_session_mode(session_id=session.session_id, mode_id="yolo")
        await conn.close_session(session_id=session.session_id)
        with pytest.raises(acp.RequestError):
            await prompt(conn, session.session_id, "hello")


def test_only_protocol_reaches_stdout():
    """A stray print, or a child process writing to its inherited stdout, lands on stderr."""
    code = (
        "import asyncio, os\n"
        "from server.acp_agent import _stdio_streams\n"
        "async def main():\n"
        "    reader, writer = await _stdio_streams()\n"
        "    print('stray print', flush=True)\n"
        "    os.system('echo from a child')\n"
        "    writer.write(b'{}\\n')\n"
        "    await writer.drain()\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, input=b"", capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"{}\n"
    assert b"stray print" in done.stderr and b"from a child" in done.stderr


async def test_undo_slash_command_takes_the_turn_back_shell_changes_included(connect, workspace, model):
    """ACP has no rewind request: `/undo` is how a Zed user undoes a turn. It restores every
    kind of change a shell command makes, without a model call; again, it reverts nothing the
    person did since; `/undo forget` then takes the turn out of what the model is shown next."""
    from workspace_tree import SHELL_CHANGES, SHELL_TURN, changed_paths, make_tree, snapshot

    (workspace / "hello.py").write_text("print('hello')\n")
    make_tree(workspace)
    before = snapshot(workspace)
    model.script = SHELL_TURN  # by the user messages the model is shown: after the forget, "hello" is the first
    client = RecordingClient()

    async def told(conn, session_id: str, text: str) -> str:
        said, asked = len(client.text()), len(model.requests)
        assert (await prompt(conn, session_id, text)).stop_reason == "end_turn"
        assert len(model.requests) == asked, "a command needs no model call"
        return client.text()[said:]

    async with connect(client) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        await until(lambda: client.of("available_commands_update"))
        [advertised] = client.of("available_commands_update")
        assert [c["name"] for c in advertised["availableCommands"]] == ["undo"]
        sid = session.session_id
        assert (await prompt(conn, sid, "reorganise")).stop_reason == "end_turn"
        assert set(changed_paths(before, snapshot(workspace))) >= SHELL_CHANGES
        undone = await told(conn, sid, "/undo")
        assert changed_paths(before, snapshot(workspace)) == []
        assert undone.startswith("Undid the last turn: ") and "hello.py" in undone and "--restore" in undone
        (workspace / "mine.txt").write_text("the person's\n")
        assert "undone already" in await told(conn, sid, "/undo")
        assert (workspace / "mine.txt").exists(), "a second /undo reverts nothing the person did since"
        assert "out of the conversation now" in await told(conn, sid, "/undo\tforget")
        assert "takes nothing or `forget`" in await told(conn, sid, "/undo now please")
        await prompt(conn, sid, "hello")
        shown = [m.get("content") for m in model.requests[-1]["messages"]]
        assert "hello" in shown and "reorganise" not in shown
