"""A store prunes itself to `CheckpointConfig.keep` and the newest checkpoints still restore byte
for byte; a prune waits for a checkpoint another store on the workspace is recording, so it never
deletes that checkpoint's objects; an automatic prune neither waits for the lock nor fails the
checkpoint it follows."""

from __future__ import annotations

import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agent.checkpoints import CheckpointConfig, CheckpointStore
from agent.store_lock import StoreLock


def _objects(store: CheckpointStore) -> int:
    return sum(1 for _ in (store.store_dir / "objects").glob("*/*"))


def _version(ws: Path, i: int) -> None:
    (ws / "app.py").write_text(f"VERSION = {i}\n" * 50)


def test_the_store_keeps_its_newest_checkpoints_and_they_restore(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, config=CheckpointConfig(keep=3))  # prunes past 4, to 3
    ids = []
    for i in range(9):
        _version(tmp_path, i)
        ids.append(store.create(f"v{i}").id)
        assert len(store.list()) <= 4
    assert [cp.id for cp in store.list()] == ids[-3:]  # the 9th made 5, and pruned to 3
    for i in (6, 7, 8):
        store.restore(ids[i], backup=False)
        assert (tmp_path / "app.py").read_text() == f"VERSION = {i}\n" * 50
    assert store.prune(keep=3).objects == 0  # what the automatic prune left is all in use


def test_keep_none_keeps_every_checkpoint(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, config=CheckpointConfig(keep=None))
    for i in range(6):
        _version(tmp_path, i)
        store.create()
    assert len(store.list()) == 6


def test_a_prune_waits_for_a_checkpoint_being_recorded(tmp_path: Path) -> None:
    recording, pruning = CheckpointStore(tmp_path), CheckpointStore(tmp_path)  # two sessions, one workspace
    pruning.create("old")
    (tmp_path / "new.txt").write_text("only in the checkpoint being recorded\n")
    scanned, go_on = threading.Event(), threading.Event()
    scan = recording._scan

    def scan_then_pause(store: bool):
        result = scan(store)  # new.txt's object is written; the checkpoint is not yet published
        scanned.set()
        go_on.wait(10)
        return result

    recording._scan = scan_then_pause  # type: ignore[method-assign]
    with ThreadPoolExecutor(2) as pool:
        created = pool.submit(recording.create, "being recorded")
        assert scanned.wait(10)
        pruned = pool.submit(pruning.prune, 1)
        time.sleep(0.3)
        assert not pruned.done()  # without the lock it would keep "old" and delete new.txt's object
        go_on.set()
        cp, result = created.result(10), pruned.result(10)
    assert result.checkpoints == 1 and [c.id for c in pruning.list()] == [cp.id]
    (tmp_path / "new.txt").unlink()
    pruning.restore(cp.id)
    assert (tmp_path / "new.txt").read_text() == "only in the checkpoint being recorded\n"


def test_an_automatic_prune_does_not_wait_for_the_lock(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, config=CheckpointConfig(keep=1))  # prunes past 2, to 1
    with StoreLock(store.store_dir / "lock").shared():  # another process restoring, say
        for i in range(4):
            _version(tmp_path, i)
            store.create()
        assert len(store.list()) == 4  # past the limit, but the store was busy
    _version(tmp_path, 4)
    newest = store.create()
    assert [cp.id for cp in store.list()] == [newest.id]


def test_a_damaged_store_warns_and_keeps_the_new_checkpoint(tmp_path: Path) -> None:
    first = CheckpointStore(tmp_path, config=CheckpointConfig(keep=2))  # prunes past 3, to 2
    for i in range(3):
        _version(tmp_path, i)
        last = first.create()
    first._objects.path(last.root).write_bytes(zlib.compress(b"not a tree"))
    fresh = CheckpointStore(tmp_path, config=CheckpointConfig(keep=2))  # reads the trees from disk
    _version(tmp_path, 3)
    with pytest.warns(UserWarning, match="the store was not pruned"):
        newest = fresh.create()
    assert len(fresh.list()) == 4 and fresh.list()[-1].id == newest.id  # nothing deleted
    _version(tmp_path, 9)
    fresh.restore(newest.id, backup=False)
    assert (tmp_path / "app.py").read_text() == "VERSION = 3\n" * 50
