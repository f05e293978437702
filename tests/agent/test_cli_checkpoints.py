"""`composer-agent checkpoints`: the workspace's rewind points counted and sized, and pruned to the
newest N with the objects only the deleted ones used; the kept ones still restore byte for byte."""

from __future__ import annotations

from agent.checkpoints import CheckpointStore
from agent.cli import main


def test_a_workspace_without_a_store_is_told_so_and_left_alone(tmp_path, capsys):
    assert main(["checkpoints", "--workspace", str(tmp_path)]) == 0
    assert "no checkpoints" in capsys.readouterr().out
    assert not (tmp_path / ".composer").exists()


def test_keep_deletes_the_oldest_and_their_objects_and_the_newest_still_restore(tmp_path, capsys):
    store = CheckpointStore(tmp_path)
    versions = [f"version {i}\n" * 2000 for i in range(4)]
    for text in versions:
        (tmp_path / "a.py").write_text(text)
        store.create()
    objects_before = sum(1 for _ in store.store_dir.glob("objects/*/*"))

    assert main(["checkpoints", "--workspace", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("4 checkpoints, ")

    assert main(["checkpoints", "--workspace", str(tmp_path), "--keep", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("deleted 2 checkpoints and ") and "\n2 checkpoints, " in out
    kept = CheckpointStore(tmp_path).list()
    assert len(kept) == 2 and sum(1 for _ in store.store_dir.glob("objects/*/*")) < objects_before
    CheckpointStore(tmp_path).restore(kept[0].id, backup=False)
    assert (tmp_path / "a.py").read_text() == versions[2]


def test_a_negative_keep_is_refused_and_deletes_nothing(tmp_path, capsys):
    store = CheckpointStore(tmp_path)
    (tmp_path / "a.py").write_text("x\n")
    store.create()
    assert main(["checkpoints", "--workspace", str(tmp_path), "--keep", "-1"]) == 2
    assert "--keep must be 0 or more" in capsys.readouterr().err and len(store.list()) == 1
