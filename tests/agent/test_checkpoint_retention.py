"""A store prunes itself to `CheckpointConfig.keep` and the newest checkpoints still restore byte
for byte; a prune waits for a checkpoint another process is recording, and for a restore of another
store in the process, so it never deletes the objects they use; an automatic prune neither waits
for the lock nor fails the checkpoint it follows."""

from __future__ import annotations

import errno
import subprocess
import sys
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


PRUNE = """
import sys
from pathlib import Path
from agent.checkpoints import CheckpointStore
store = CheckpointStore(Path(sys.argv[1]))
print("pruning", flush=True)
print(store.prune(int(sys.argv[2])).checkpoints, flush=True)
"""


def test_a_prune_in_another_process_waits_for_a_checkpoint_being_recorded(tmp_path: Path) -> None:
    recording, pruning = CheckpointStore(tmp_path), CheckpointStore(tmp_path)  # a server and the CLI
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
    with ThreadPoolExecutor(1) as pool:
        created = pool.submit(recording.create, "being recorded")
        assert scanned.wait(10)
        cli = subprocess.Popen([sys.executable, "-c", PRUNE, str(tmp_path), "1"], stdout=subprocess.PIPE, text=True)
        assert cli.stdout is not None and cli.stdout.readline() == "pruning\n"
        time.sleep(0.3)
        assert cli.poll() is None  # without the lock it would keep "old" and delete new.txt's object
        go_on.set()
        cp = created.result(10)
        assert cli.stdout.readline() == "1\n" and cli.wait(10) == 0
    assert [c.id for c in pruning.list()] == [cp.id]
    (tmp_path / "new.txt").unlink()
    pruning.restore(cp.id)
    assert (tmp_path / "new.txt").read_text() == "only in the checkpoint being recorded\n"


def test_a_prune_waits_for_a_restore_of_another_store_in_the_process(tmp_path: Path) -> None:
    restoring, pruning = CheckpointStore(tmp_path), CheckpointStore(tmp_path)  # two sessions of a server
    _version(tmp_path, 1)
    target = restoring.create("v1")
    _version(tmp_path, 2)
    applying, go_on = threading.Event(), threading.Event()
    apply = restoring._apply

    def pause_then_apply(changes):
        applying.set()  # the objects are verified, none written yet
        go_on.wait(10)
        return apply(changes)

    restoring._apply = pause_then_apply  # type: ignore[method-assign]
    with ThreadPoolExecutor(2) as pool:
        restored = pool.submit(restoring.restore, target.id, False)
        assert applying.wait(10)
        pruned = pool.submit(pruning.prune, 0)
        time.sleep(0.3)
        assert not pruned.done()  # without the lock it would delete v1's object under the restore
        go_on.set()
        restored.result(10), pruned.result(10)
    assert (tmp_path / "app.py").read_text() == "VERSION = 1\n" * 50


def test_a_store_whose_newest_checkpoint_another_pruned_records_whole_ones(tmp_path: Path) -> None:
    session = CheckpointStore(tmp_path, config=CheckpointConfig(racy_ns=0))  # trusts a fresh stat
    cli = CheckpointStore(tmp_path)
    _version(tmp_path, 1)
    session.create()  # its stat cache now names app.py's object
    cli.prune(0)  # `composer-agent checkpoints --keep 0`: every object goes
    cp = session.create()  # app.py unchanged: reused from the cache only if its record survives
    _version(tmp_path, 2)
    session.restore(cp.id, backup=False)
    assert (tmp_path / "app.py").read_text() == "VERSION = 1\n" * 50


def test_an_automatic_prune_does_not_wait_for_the_lock(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, config=CheckpointConfig(keep=1))  # prunes past 2, to 1

    def record_four() -> None:
        for i in range(4):
            _version(tmp_path, i)
            store.create()

    with StoreLock(store.store_dir / "lock").shared(), ThreadPoolExecutor(1) as pool:  # another process restoring
        pool.submit(record_four).result(10)  # a TimeoutError, not a hang, if it waited
        assert len(store.list()) == 4  # past the limit, but the store was busy
    _version(tmp_path, 4)
    newest = store.create()
    assert [cp.id for cp in store.list()] == [newest.id]


def test_keep_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="keep must be 1 or more"):
        CheckpointConfig(keep=0)


def test_an_unreadable_record_is_skipped_and_recording_goes_on(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, config=CheckpointConfig(keep=1))
    (store.store_dir / "refs/0000000000000000-dead00.json").write_text("{not json")  # a hand edit
    with pytest.warns(UserWarning, match="cannot be read"):
        for i in range(3):
            _version(tmp_path, i)
            newest = store.create()
        assert [cp.id for cp in store.list()] == [newest.id]


def test_a_store_this_process_cannot_write_is_read_without_the_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = CheckpointStore(tmp_path)
    _version(tmp_path, 1)
    cp = store.create()
    (store.store_dir / "lock").unlink()

    def read_only(self: StoreLock) -> int:
        raise OSError(errno.EROFS, "Read-only file system", str(self.path))

    monkeypatch.setattr(StoreLock, "_open", read_only)
    _version(tmp_path, 2)
    assert store.diff(cp.id).modified == ("app.py",)
    store.restore(cp.id, backup=False)
    assert (tmp_path / "app.py").read_text() == "VERSION = 1\n" * 50


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
