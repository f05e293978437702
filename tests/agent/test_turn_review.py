"""Keeping or undoing a turn's changes hunk by hunk (agent/turn_review.py): the picked hunks go
back to the checkpoint's lines, everything else (other hunks, the person's later edits) stays;
a stale pick leaves its file alone; created files go, deleted ones come back; binary files are
listed without hunks; line breaks, encodings and modes survive; a kept pick is checked too."""

from __future__ import annotations

import pytest

from agent.checkpoints import CheckpointStore
from agent.turn_review import Pick, apply_review, plan_review, turn_changes
from agent.workspace import Workspace


async def undo_hunks(store, checkpoint, ws, undo, keep=()):
    return await apply_review(ws, plan_review(store, checkpoint, ws, undo, keep))


TOP = "".join(f"line {i}\n" for i in range(1, 21))


@pytest.fixture
def turn(tmp_path):
    """A workspace, its store, and the checkpoint before a 'turn' that changes two far-apart
    lines of app.py, creates new.py, deletes old.py and rewrites data.bin."""
    (tmp_path / "app.py").write_text(TOP)
    (tmp_path / "old.py").write_text("gone = True\n")
    (tmp_path / "data.bin").write_bytes(b"\0\1\2")
    store = CheckpointStore(tmp_path)
    checkpoint = store.create("before the turn").id
    (tmp_path / "app.py").write_text(TOP.replace("line 2\n", "line two\n").replace("line 18\n", "line eighteen\n"))
    (tmp_path / "new.py").write_text("print('new')\n")
    (tmp_path / "old.py").unlink()
    (tmp_path / "data.bin").write_bytes(b"\x00\x09")
    return tmp_path, store, checkpoint, Workspace(tmp_path)


def _pick(files, path, index):
    [f] = [f for f in files if f.path == path]
    return Pick(path, index, f.hunks[index].digest)


def test_the_turn_s_files_are_listed_hunk_by_hunk(turn):
    _, store, checkpoint, ws = turn
    files = {f.path: f for f in turn_changes(store, checkpoint, ws)}
    assert {p: f.status for p, f in files.items()} == {
        "app.py": "modified", "new.py": "added", "old.py": "deleted", "data.bin": "modified"}
    app = files["app.py"]
    assert [h.header for h in app.hunks] == ["@@ -1,5 +1,5 @@", "@@ -15,6 +15,6 @@"]
    assert "-line 2" in app.hunks[0].lines and "+line two" in app.hunks[0].lines
    assert files["data.bin"].binary and not files["data.bin"].hunks


async def test_undoing_one_hunk_keeps_the_other_and_the_person_s_later_edit(turn):
    root, store, checkpoint, ws = turn
    files = turn_changes(store, checkpoint, ws)
    ws.set_buffer("app.py", (root / "app.py").read_text().replace("line 10\n", "line ten, mine\n"), 4)
    files = turn_changes(store, checkpoint, ws, also=["app.py"])  # listed with the person's edit
    [app] = [f for f in files if f.path == "app.py"]
    assert [h.header for h in app.hunks] == ["@@ -1,5 +1,5 @@", "@@ -7,7 +7,7 @@", "@@ -15,6 +15,6 @@"]
    result = await undo_hunks(store, checkpoint, ws, [_pick(files, "app.py", 2)])
    assert result.refused == {} and [p.index for p in result.undone] == [2]
    text = ws.read_text("app.py")
    assert "line two\n" in text and "line ten, mine\n" in text and "line 18\n" in text


async def test_a_pick_from_an_older_listing_leaves_the_file_alone(turn):
    root, store, checkpoint, ws = turn
    pick = _pick(turn_changes(store, checkpoint, ws), "app.py", 0)
    (root / "app.py").write_text((root / "app.py").read_text().replace("line two", "line TWO"))
    result = await undo_hunks(store, checkpoint, ws, [pick])
    assert "changed since" in result.refused["app.py"] and not result.undone
    assert "line TWO\n" in (root / "app.py").read_text()


async def test_a_created_file_goes_and_a_deleted_one_comes_back(turn):
    root, store, checkpoint, ws = turn
    files = turn_changes(store, checkpoint, ws)
    result = await undo_hunks(store, checkpoint, ws, [_pick(files, "new.py", 0), _pick(files, "old.py", 0)])
    assert not result.refused
    assert not (root / "new.py").exists() and (root / "old.py").read_text() == "gone = True\n"
    result = await undo_hunks(store, checkpoint, ws, [Pick("data.bin", 0, "x")])
    assert "binary" in result.refused["data.bin"] and (root / "data.bin").read_bytes() == b"\x00\x09"


async def test_a_crlf_file_keeps_its_line_breaks(tmp_path):
    (tmp_path / "win.txt").write_bytes(b"a\r\nb\r\nc\r\n" + b"x\r\n" * 10 + b"y\r\n")
    store = CheckpointStore(tmp_path)
    checkpoint = store.create().id
    (tmp_path / "win.txt").write_bytes(b"A\r\nb\r\nc\r\n" + b"x\r\n" * 10 + b"Y\r\n")
    ws = Workspace(tmp_path)
    files = turn_changes(store, checkpoint, ws)
    await undo_hunks(store, checkpoint, ws, [_pick(files, "win.txt", 0)])
    assert (tmp_path / "win.txt").read_bytes() == b"a\r\nb\r\nc\r\n" + b"x\r\n" * 10 + b"Y\r\n"


async def test_a_deleted_file_comes_back_byte_for_byte_with_its_mode(tmp_path):
    data = "caf\u00e9\r\nbar\r\n".encode("latin-1")
    (tmp_path / "run.sh").write_bytes(data)
    (tmp_path / "run.sh").chmod(0o755)
    store = CheckpointStore(tmp_path)
    checkpoint = store.create().id
    (tmp_path / "run.sh").unlink()
    ws = Workspace(tmp_path)
    [gone] = turn_changes(store, checkpoint, ws)
    assert gone.status == "deleted" and "-caf\u00e9" in gone.hunks[0].lines
    await undo_hunks(store, checkpoint, ws, [Pick("run.sh", 0, gone.hunks[0].digest)])
    assert (tmp_path / "run.sh").read_bytes() == data and (tmp_path / "run.sh").stat().st_mode & 0o777 == 0o755


async def test_a_line_appended_by_the_shell_to_a_crlf_file_is_one_hunk(tmp_path):
    (tmp_path / "win.txt").write_bytes(b"a\r\n" * 30)
    store = CheckpointStore(tmp_path)
    checkpoint = store.create().id
    with open(tmp_path / "win.txt", "ab") as f:
        f.write(b"x\n")  # echo x >> win.txt
    ws = Workspace(tmp_path)
    [win] = turn_changes(store, checkpoint, ws)
    assert [h.header for h in win.hunks] == ["@@ -28,3 +28,4 @@"]
    await undo_hunks(store, checkpoint, ws, [Pick("win.txt", 0, win.hunks[0].digest)])
    assert (tmp_path / "win.txt").read_bytes() == b"a\r\n" * 30


async def test_links_are_listed_without_hunks_and_picks_are_checked_by_normalised_path(tmp_path):
    (tmp_path / "a.cfg").write_text("a\n")
    (tmp_path / "b.cfg").write_text("b\n")
    (tmp_path / "current.cfg").symlink_to("a.cfg")
    (tmp_path / "app.py").write_text("x = 1\n")
    store = CheckpointStore(tmp_path)
    checkpoint = store.create().id
    (tmp_path / "current.cfg").unlink()
    (tmp_path / "current.cfg").symlink_to("b.cfg")
    (tmp_path / "app.py").write_text("x = 2\n")
    ws = Workspace(tmp_path)
    files = {f.path: f for f in turn_changes(store, checkpoint, ws)}
    assert files["current.cfg"].binary and not files["current.cfg"].hunks
    digest = files["app.py"].hunks[0].digest
    plan = plan_review(store, checkpoint, ws, [], [Pick("./app.py", 0, digest), Pick("app.py", 7, "made-up")])
    assert plan.result.kept == [] and "list them again" in plan.result.refused["app.py"]  # a made-up verdict
    result = await undo_hunks(store, checkpoint, ws, [Pick("./app.py", 0, digest)])
    assert [p.path for p in result.undone] == ["app.py"] and (tmp_path / "app.py").read_text() == "x = 1\n"
    assert (tmp_path / "current.cfg").readlink().name == "b.cfg"  # left to a rewind


async def test_an_empty_file_the_turn_created_can_be_undone(tmp_path):
    store = CheckpointStore(tmp_path)
    checkpoint = store.create().id
    (tmp_path / "empty.txt").write_text("")
    ws = Workspace(tmp_path)
    [empty] = turn_changes(store, checkpoint, ws)
    assert empty.status == "added" and len(empty.hunks) == 1
    await undo_hunks(store, checkpoint, ws, [Pick("empty.txt", 0, empty.hunks[0].digest)])
    assert not (tmp_path / "empty.txt").exists()
