"""`composer-agent checkpoints`: the workspace's rewind points listed, diffed and restored (a shell
change rewound, and the backup undoing it), counted and sized, and pruned to the
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


def test_list_diff_and_restore_rewind_a_shell_change_and_the_backup_undoes_it(tmp_path, capsys):
    store = CheckpointStore(tmp_path)
    (tmp_path / "a.py").write_text("A = 1\n")
    (tmp_path / "notes.txt").write_text("keep me\n")
    before = store.create("before run_terminal")
    (tmp_path / "a.py").write_text("A = 2\n")
    (tmp_path / "notes.txt").unlink()  # what `rm` in a terminal does

    assert main(["checkpoints", "--workspace", str(tmp_path), "--list"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(before.id + "  ") and line.endswith("  before run_terminal")

    assert main(["checkpoints", "--workspace", str(tmp_path), "--diff", before.id]) == 0
    diff = capsys.readouterr().out
    assert "-A = 1\n+A = 2\n" in diff and "diff --git a/notes.txt b/notes.txt" in diff

    assert main(["checkpoints", "--workspace", str(tmp_path), "--restore", before.id]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"restored {before.id}: 1 added, 1 modified, 0 deleted")
    assert (tmp_path / "a.py").read_text() == "A = 1\n" and (tmp_path / "notes.txt").read_text() == "keep me\n"
    undo = out.rsplit("--restore ", 1)[1].strip()
    assert main(["checkpoints", "--workspace", str(tmp_path), "--restore", undo]) == 0
    assert (tmp_path / "a.py").read_text() == "A = 2\n" and not (tmp_path / "notes.txt").exists()


def test_an_unknown_checkpoint_is_an_error_that_names_the_latest(tmp_path, capsys):
    (tmp_path / "a.py").write_text("x\n")
    latest = CheckpointStore(tmp_path).create()
    assert main(["checkpoints", "--workspace", str(tmp_path), "--restore", "nope"]) == 1
    err = capsys.readouterr().err
    assert "no checkpoint 'nope'" in err and latest.id in err
    assert (tmp_path / "a.py").read_text() == "x\n"


def test_ids_outside_the_store_missing_workspaces_and_unreadable_records_are_clear_errors(tmp_path, capsys):
    (tmp_path / "a.py").write_text("x\n")
    store = CheckpointStore(tmp_path)
    store.create()
    for crafted in ("../refs/x", "a/b", ".."):
        assert main(["checkpoints", "--workspace", str(tmp_path), "--restore", crafted]) == 1
        assert "no checkpoint" in capsys.readouterr().err
    assert main(["checkpoints", "--workspace", str(tmp_path / "missing"), "--restore", "x"]) == 1
    assert "is not a directory" in capsys.readouterr().err
    (tmp_path / "other").mkdir()
    assert main(["checkpoints", "--workspace", str(tmp_path / "other"), "--diff", "x"]) == 1
    assert "no checkpoints in" in capsys.readouterr().err
    (store.store_dir / "refs/0000000000000000-dead00.json").write_text("{not json")
    assert main(["checkpoints", "--workspace", str(tmp_path), "--list"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and err.startswith("warning: checkpoint record ") and "Traceback" not in err
