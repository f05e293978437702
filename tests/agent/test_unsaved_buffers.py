"""The editor's unsaved buffers in checkpoints: the workspace names the buffers that differ from
the disk, a checkpoint records them (and a prune forgets them), the turn's changes are measured
from them, and a rewind puts them back in the editor, where no disk restore reaches. The whole
path through composer-lsp: tests/server/test_rewind.py."""

from __future__ import annotations

import pytest
from scripted_engine import ScriptedEngine  # tests/agent is no package: on sys.path

from agent.buffer_rewind import rewind_buffers
from agent.checkpoints import CheckpointStore
from agent.object_store import CheckpointCorrupt
from agent.policy import EnginePolicy
from agent.session import Session, SessionConfig
from agent.turn_review import Pick, apply_review, plan_review, turn_changes
from agent.workspace import Workspace


class Editor:
    """An edit sink that does what an editor does: the edit lands in the buffer, unsaved (the
    editor's didChange would report the new version)."""

    def __init__(self) -> None:
        self.workspace: Workspace | None = None
        self.refuse: set[str] = set()

    async def apply(self, path, old_text, new_text, version):
        if path in self.refuse:
            return False
        assert self.workspace is not None and self.workspace.buffer(path)[0] == old_text
        self.workspace.set_buffer(path, new_text, (version or 0) + 1)
        return True


async def rewind(store, checkpoint, ws):
    """What Session.restore does: the disk, then the buffers."""
    recorded, unsaved = store.buffers(checkpoint), ws.unsaved()
    before = {p: ws.buffer(p)[0] for p in ws.open_buffers()}
    store.restore(checkpoint, buffers=unsaved)
    return await rewind_buffers(store, checkpoint, ws, before, unsaved, recorded)


@pytest.fixture
def editor_ws(tmp_path):
    editor = Editor()
    ws = editor.workspace = Workspace(tmp_path, edit_sink=editor)
    return tmp_path, ws, editor


def test_unsaved_names_the_buffers_that_differ_from_the_disk(tmp_path):
    (tmp_path / "clean.py").write_text("x = 1\n")
    (tmp_path / "dirty.py").write_text("x = 1\n")
    (tmp_path / "win.txt").write_bytes(b"a\r\nb\r\n")
    ws = Workspace(tmp_path)
    ws.set_buffer("clean.py", "x = 1\n", 1)
    ws.set_buffer("dirty.py", "x = 2\n", 3)
    ws.set_buffer("win.txt", "a\r\nb\r\n", 1)  # as the editor holds a CRLF file: the same text
    ws.set_buffer("new.py", "", 1)  # never saved: no file on the disk
    ws.set_buffer("huge.txt", "x" * (ws.max_file_bytes + 1), 1)
    assert ws.unsaved() == {"dirty.py": "x = 2\n", "new.py": ""}
    # A shell command rewrites clean.py: until the editor's reload arrives its buffer is stale,
    # not unsaved work, and a checkpoint must not record it as the person's text.
    (tmp_path / "clean.py").write_text("x = 'from the shell'\n")
    assert "clean.py" not in ws.unsaved()
    ws.set_buffer("clean.py", "x = 'typed'\n", 2)
    assert ws.unsaved()["clean.py"] == "x = 'typed'\n"


def test_a_checkpoint_keeps_its_unsaved_buffers_until_it_is_pruned(tmp_path):
    (tmp_path / "a.py").write_text("a\n")
    store = CheckpointStore(tmp_path)
    first = store.create("with buffers", buffers={"a.py": "a, unsaved \u00e9\n"})
    second = store.create("without")
    assert store.buffers(first.id) == {"a.py": "a, unsaved \u00e9\n"} and store.buffers(second.id) == {}
    backup = store.restore(second.id, buffers={"a.py": "typed since"}).backup
    assert store.buffers(backup.id) == {"a.py": "typed since"}
    store.prune(keep=1)  # the backup, the newest, stays
    assert [p.name for p in (store.store_dir / "buffers").iterdir()] == [f"{backup.id}.json.z"]
    (store.store_dir / "buffers" / "0000-cut-short.json.z").write_bytes(b"")  # its ref was never written
    store.prune(keep=1)
    assert [p.name for p in (store.store_dir / "buffers").iterdir()] == [f"{backup.id}.json.z"]
    (store.store_dir / "buffers" / f"{backup.id}.json.z").write_bytes(b"not zlib")
    with pytest.raises(CheckpointCorrupt, match="unsaved buffers"):
        store.buffers(backup.id)


async def test_a_damaged_record_refuses_the_rewind_before_the_disk_changes(tmp_path, real_tokenizer):
    tok = real_tokenizer
    root = tmp_path / "repo"
    root.mkdir()
    write = '<tool_call>\n{"name": "write_file", "arguments": {"path": "a.py", "content": "x = 1\\n"}}\n</tool_call>'
    engine = ScriptedEngine(tok, [[*tok.encode(write), tok.eos_token_id], [*tok.encode("Done."), tok.eos_token_id]])
    session = await Session.create(SessionConfig(workspace=root, log_dir=tmp_path / "logs", index="off",
                                                 repo_map_tokens=0, warm_checkpoints=False),
                                   policy=EnginePolicy(engine))
    await session.prompt("write a.py")
    checkpoint = session.agent.turn_checkpoint
    session.checkpoints._buffer_file(checkpoint).parent.mkdir(exist_ok=True)
    session.checkpoints._buffer_file(checkpoint).write_bytes(b"damaged")
    with pytest.raises(CheckpointCorrupt, match="unsaved buffers are damaged"):
        await session.restore(checkpoint)
    assert (root / "a.py").read_text() == "x = 1\n" and session.changing is None
    session.close()


async def test_the_turn_s_changes_start_from_the_text_the_person_saw(editor_ws):
    root, ws, _ = editor_ws
    top = "".join(f"line {i}\n" for i in range(1, 21))
    (root / "app.py").write_text(top)
    mine = top.replace("line 3\n", "line three, mine\n")
    ws.set_buffer("app.py", mine, 2)
    store = CheckpointStore(root)
    checkpoint = store.create("before the turn", ws.unsaved()).id
    await ws.apply_text("app.py", mine.replace("line 17\n", "line seventeen\n"))  # the agent, via the editor
    [app] = turn_changes(store, checkpoint, ws)
    assert [[x for x in h.lines if x[0] in "+-"] for h in app.hunks] == [["-line 17", "+line seventeen"]]
    plan = plan_review(store, checkpoint, ws, [Pick("app.py", 0, app.hunks[0].digest)], [])
    assert (await apply_review(ws, plan)).refused == {}
    assert ws.buffer("app.py")[0] == mine and (root / "app.py").read_text() == top


async def test_a_rewind_takes_back_only_the_agent_s_edits_of_buffers(editor_ws):
    root, ws, editor = editor_ws
    for name in ("a.py", "b.py", "typed.py", "mine.py"):
        (root / name).write_text(f"{name} on disk\n")
    (root / "win.txt").write_bytes(b"x\r\n")
    ws.set_buffer("a.py", "a.py, unsaved\n", 1)  # the person's, unsaved at the checkpoint
    for name in ("b.py", "typed.py", "mine.py"):
        ws.set_buffer(name, f"{name} on disk\n", 1)  # clean at the checkpoint
    ws.set_buffer("win.txt", "x\r\n", 1)
    store = CheckpointStore(root)
    checkpoint = store.create("turn", ws.unsaved()).id
    for name in ("a.py", "b.py", "typed.py", "win.txt"):
        await ws.apply_text(name, "the agent's\n")
    ws.set_buffer("typed.py", "the agent's\nand the person's line\n", 3)  # typed after the edit
    ws.set_buffer("mine.py", "the person's, typed during the turn\n", 2)  # never the agent's
    ws.set_buffer("late.py", "opened after the checkpoint\n", 1)
    editor.refuse.add("b.py")
    result = await rewind(store, checkpoint, ws)
    assert result.reverted == ["a.py", "win.txt"] and sorted(result.refused) == ["b.py", "typed.py"]
    assert "changed it after the agent's edit" in result.refused["typed.py"]
    assert ws.buffer("a.py")[0] == "a.py, unsaved\n" and ws.buffer("win.txt")[0] == "x\r\n"
    assert ws.buffer("typed.py")[0] == "the agent's\nand the person's line\n", "the person's typing is kept"
    assert ws.buffer("mine.py")[0] == "the person's, typed during the turn\n"
    assert ws.buffer("late.py")[0] == "opened after the checkpoint\n"
    # Undoing the rewind (its backup) gives the agent's edit back where the rewind took it.
    again = await rewind(store, store.list()[-1].id, ws)
    assert again.reverted == ["a.py", "win.txt"] and ws.buffer("a.py")[0] == "the agent's\n"


async def test_without_an_editor_a_rewind_leaves_buffers_alone(tmp_path):
    (tmp_path / "a.py").write_text("a\n")
    ws = Workspace(tmp_path)
    ws.set_buffer("a.py", "a, unsaved\n", 1)
    store = CheckpointStore(tmp_path)
    checkpoint = store.create("turn", ws.unsaved()).id
    await ws.apply_text("a.py", "the agent's\n")  # no editor: to the disk
    result = await rewind(store, checkpoint, ws)
    assert result.reverted == [] and (tmp_path / "a.py").read_text() == "a\n", "the disk is the checkpoint's"


async def test_an_unsaved_file_the_turn_deleted_comes_back_with_its_text_encoding_and_mode(editor_ws):
    root, ws, _ = editor_ws
    (root / "x.sh").write_bytes("echo caf\xe9\n".encode("latin-1"))
    (root / "x.sh").chmod(0o755)
    ws.read_text("x.sh")
    ws.set_buffer("x.sh", "echo caf\xe9\necho unsaved\n", 2)
    store = CheckpointStore(root)
    checkpoint = store.create("turn", ws.unsaved()).id
    await ws.apply_delete("x.sh")  # no delete in this editor: the disk, and the buffer goes
    [gone] = turn_changes(store, checkpoint, ws)
    assert gone.status == "deleted"
    plan = plan_review(store, checkpoint, ws, [Pick("x.sh", 0, gone.hunks[0].digest)], [])
    assert (await apply_review(ws, plan)).refused == {}
    assert (root / "x.sh").read_bytes() == "echo caf\xe9\necho unsaved\n".encode("latin-1")
    assert (root / "x.sh").stat().st_mode & 0o777 == 0o755


def test_a_buffer_never_saved_or_closed_since_is_not_the_turn_s_change(editor_ws):
    root, ws, _ = editor_ws
    (root / "closed.py").write_text("c\n")
    ws.set_buffer("draft.py", "never saved\n", 1)
    ws.set_buffer("closed.py", "c, then given up\n", 1)
    store = CheckpointStore(root)
    checkpoint = store.create("turn", ws.unsaved()).id
    ws.clear_buffer("closed.py")  # closed without saving
    assert turn_changes(store, checkpoint, ws) == []


async def test_a_rewind_leaves_saved_and_already_undone_buffers_to_the_editor(editor_ws):
    root, ws, _ = editor_ws
    for name in ("saved.py", "undone.py"):
        (root / name).write_text(f"{name}\n")
        ws.set_buffer(name, f"{name}\n", 1)
    store = CheckpointStore(root)
    checkpoint = store.create("turn", ws.unsaved()).id
    for name in ("saved.py", "undone.py", "made.py"):
        if name == "made.py":  # the turn creates it; the person opens it; the agent edits it there
            (root / name).write_text("made\n")
            ws.set_buffer(name, "made\n", 1)
        await ws.apply_text(name, "the agent's\n")
    (root / "saved.py").write_text("the agent's\n")  # the person saved the agent's edit
    ws.set_buffer("saved.py", "the agent's\n", 3)
    ws.set_buffer("undone.py", "undone.py\n", 4)  # Ctrl-Z in the editor
    result = await rewind(store, checkpoint, ws)
    assert result.reverted == [] and list(result.refused) == ["made.py"]
    assert "the turn created this file" in result.refused["made.py"]
    assert ws.buffer("saved.py")[0] == "the agent's\n", "no edit sent: the editor reloads a saved buffer"
    assert (root / "saved.py").read_text() == "saved.py\n" and not (root / "made.py").exists()


async def test_typing_while_hunks_are_undone_is_never_overwritten(editor_ws):
    root, ws, _ = editor_ws
    (root / "app.py").write_text("a = 1\nb = 2\n")
    ws.set_buffer("app.py", "a = 1\nb = 2\n", 1)
    store = CheckpointStore(root)
    checkpoint = store.create("turn", ws.unsaved()).id
    await ws.apply_text("app.py", "a = 10\nb = 2\n")
    [app] = turn_changes(store, checkpoint, ws, also=["app.py"])  # the session names the buffers it edited
    plan = plan_review(store, checkpoint, ws, [Pick("app.py", 0, app.hunks[0].digest)], [])
    ws.set_buffer("app.py", "a = 10\nb = 2\nc = 3  # typed meanwhile\n", 3)
    result = await apply_review(ws, plan)
    assert "changed while its changes were undone" in result.refused["app.py"] and not result.undone
    assert ws.buffer("app.py")[0].endswith("c = 3  # typed meanwhile\n")


async def test_a_deleted_file_keeps_its_bytes_when_its_recorded_text_does_not_fit_its_encoding(editor_ws):
    root, ws, _ = editor_ws
    (root / "menu.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    ws.set_buffer("menu.txt", "caf\ufffd au lait\n", 1)  # an editor that decoded it as UTF-8
    store = CheckpointStore(root)
    checkpoint = store.create("turn", ws.unsaved()).id
    ws.clear_buffer("menu.txt")
    (root / "menu.txt").unlink()  # `rm` in the turn
    [menu] = turn_changes(store, checkpoint, ws)
    await apply_review(ws, plan_review(store, checkpoint, ws, [Pick("menu.txt", 0, menu.hunks[0].digest)], []))
    assert (root / "menu.txt").read_bytes() == "caf\xe9 au lait\n".encode("latin-1")


async def test_a_file_a_shell_command_deleted_under_its_open_buffer_comes_back(editor_ws):
    root, ws, _ = editor_ws
    (root / "o.py").write_text("o = 1\n")
    ws.set_buffer("o.py", "o = 1\n", 1)  # open, saved
    store = CheckpointStore(root)
    checkpoint = store.create("turn", ws.unsaved()).id
    (root / "o.py").unlink()  # `rm o.py` in the turn: the editor keeps the buffer
    [gone] = turn_changes(store, checkpoint, ws)
    assert gone.status == "deleted"
    result = await apply_review(ws, plan_review(store, checkpoint, ws, [Pick("o.py", 0, gone.hunks[0].digest)], []))
    assert result.refused == {} and (root / "o.py").read_text() == "o = 1\n"


async def test_a_restarted_server_still_knows_the_agent_s_edits_of_open_buffers(editor_ws):
    """The server stops (a crash, an editor reload) with the agent's edits unsaved in the editor,
    which re-opens the same buffers in a new server: a rewind there takes back the agent's edit
    and still refuses the buffer the person typed in, as the first server would have."""
    root, ws, _ = editor_ws
    for name in ("a.py", "typed.py", "closed.py"):
        (root / name).write_text(f"{name} on disk\n")
        ws.set_buffer(name, f"{name}, unsaved\n", 1)
    checkpoint = CheckpointStore(root).create("turn", ws.unsaved()).id
    for name in ("a.py", "typed.py", "closed.py"):
        await ws.apply_text(name, f"the agent's {name}\n")
    ws.clear_buffer("closed.py")  # closed without saving: the agent's text is gone with it

    editor = Editor()
    restarted = editor.workspace = Workspace(root, edit_sink=editor)
    restarted.set_buffer("a.py", "the agent's a.py\n", 1)
    restarted.set_buffer("typed.py", "the agent's typed.py\nand the person's line\n", 1)
    restarted.set_buffer("closed.py", "the person's, reopened\n", 1)
    result = await rewind(CheckpointStore(root), checkpoint, restarted)
    assert result.reverted == ["a.py"] and list(result.refused) == ["typed.py"]
    assert restarted.buffer("a.py")[0] == "a.py, unsaved\n"
    assert restarted.buffer("closed.py")[0] == "the person's, reopened\n", "never the agent's since it opened"
