"""Checkpoints restore the workspace byte for byte after edits, shell commands (rm -rf, mv, chmod),
new files, symlinks and kind changes; an unchanged tree costs a stat walk; prune keeps what is
needed; a corrupt store is reported before anything is touched."""

from __future__ import annotations

import builtins
import os
import stat
import subprocess
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.checkpoints import CheckpointConfig, CheckpointCorrupt, CheckpointError, CheckpointStore

SKIP = {".composer", ".git", "node_modules"}


def snapshot(root: Path) -> dict[str, tuple]:
    """Everything restore promises to bring back: kind, permission bits, bytes or link target."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP]
        for name in dirnames + filenames:
            if name in SKIP:
                continue
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            st_ = path.lstat()
            if stat.S_ISLNK(st_.st_mode):
                out[rel] = ("l", os.readlink(path))
            elif stat.S_ISDIR(st_.st_mode):
                out[rel] = ("d", stat.S_IMODE(st_.st_mode))
            else:
                out[rel] = ("f", stat.S_IMODE(st_.st_mode), path.read_bytes())
    return out


def sh(cwd: Path, command: str) -> None:
    subprocess.run(command, shell=True, cwd=cwd, check=True)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src/pkg/sub").mkdir(parents=True)
    (root / "src/pkg/__init__.py").write_text("")
    (root / "src/pkg/core.py").write_text("def f(x):\n    return x + 1\n")
    (root / "src/pkg/sub/data.bin").write_bytes(bytes(range(256)) * 40)
    (root / "src/pkg/sub/notes.md").write_text("no trailing newline")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "run.sh", 0o755)
    (root / "readonly.txt").write_text("ro\n")
    os.chmod(root / "readonly.txt", 0o444)
    (root / "empty_dir").mkdir()
    (root / ".env").write_text("API_KEY=abc\n")  # gitignored files are recorded too
    os.symlink("src/pkg/core.py", root / "link_to_file")
    os.symlink("src/pkg", root / "link_to_dir")
    os.symlink("does/not/exist", root / "dangling")
    (root / ".git").mkdir()
    (root / ".git/HEAD").write_text("ref: refs/heads/main\n")
    (root / "node_modules/lib").mkdir(parents=True)
    (root / "node_modules/lib/index.js").write_text("module.exports = 1\n")
    return root


def test_store_layout_and_gitignore(ws: Path) -> None:
    store = CheckpointStore(ws)
    assert store.store_dir == (ws / ".composer/checkpoints").resolve()
    assert (ws / ".composer/.gitignore").read_text() == "*\n"
    cp = store.create("first")
    assert [c.id for c in store.list()] == [cp.id]
    assert store.get(cp.id).label == "first"
    assert cp.files == 7  # .git, node_modules and the store are not recorded


def test_restore_after_edits_and_new_files(ws: Path) -> None:
    store = CheckpointStore(ws)
    before = snapshot(ws)
    cp = store.create("before edits")
    (ws / "src/pkg/core.py").write_text("def f(x):\n    return x + 2\n")
    (ws / "src/pkg/sub/data.bin").write_bytes(b"\0" * 5)
    (ws / "src/pkg/__init__.py").write_text("import os\n")
    (ws / "new.py").write_text("print('new')\n")
    (ws / "newdir/deeper").mkdir(parents=True)
    (ws / "newdir/deeper/x.txt").write_text("x")
    changes = store.diff(cp.id)
    assert set(changes.added) == {"new.py", "newdir/", "newdir/deeper/", "newdir/deeper/x.txt"}
    assert set(changes.modified) == {"src/pkg/core.py", "src/pkg/sub/data.bin", "src/pkg/__init__.py"}
    result = store.restore(cp.id)
    assert snapshot(ws) == before
    assert set(result.changes.deleted) == set(changes.added)
    assert result.backup is not None and store.diff(cp.id, result.backup.id) == changes
    assert not store.diff(cp.id)


def test_restore_after_shell_rm_rf_and_git_clean_of_ignored_files(ws: Path) -> None:
    store = CheckpointStore(ws)
    before = snapshot(ws)
    cp = store.create()
    sh(ws, "rm -rf src .env empty_dir")
    assert store.diff(cp.id).deleted[:2] == (".env", "empty_dir/")
    store.restore(cp.id)
    assert snapshot(ws) == before


def test_restore_after_mv_of_a_directory(ws: Path) -> None:
    store = CheckpointStore(ws)
    before = snapshot(ws)
    cp = store.create()
    sh(ws, "mv src/pkg lib && mv run.sh lib/run.sh")
    store.restore(cp.id)
    assert snapshot(ws) == before


def test_restore_after_chmod(ws: Path) -> None:
    store = CheckpointStore(ws)
    before = snapshot(ws)
    cp = store.create()
    sh(ws, "chmod -x run.sh && chmod 600 readonly.txt && chmod 700 src/pkg && chmod 555 empty_dir")
    assert set(store.diff(cp.id).modified) == {"run.sh", "readonly.txt", "src/pkg/", "empty_dir/"}
    store.restore(cp.id)
    assert snapshot(ws) == before


def test_restore_symlinks_and_kind_changes(ws: Path) -> None:
    store = CheckpointStore(ws)
    before = snapshot(ws)
    cp = store.create()
    os.remove(ws / "link_to_file")
    os.symlink("run.sh", ws / "link_to_file")          # retargeted
    os.remove(ws / "dangling")
    (ws / "dangling").write_text("now a file")         # link -> file
    os.remove(ws / "run.sh")
    os.symlink("/etc/passwd", ws / "run.sh")           # file -> link
    sh(ws, "rm -rf src/pkg/sub && echo hi > src/pkg/sub")  # dir -> file
    os.remove(ws / "readonly.txt")
    (ws / "readonly.txt/inner").mkdir(parents=True)     # file -> dir
    store.restore(cp.id)
    assert snapshot(ws) == before
    assert os.readlink(ws / "link_to_dir") == "src/pkg"  # links are recorded, never followed


def test_excluded_directories_are_neither_recorded_nor_touched(ws: Path) -> None:
    store = CheckpointStore(ws)
    cp = store.create()
    (ws / ".git/HEAD").write_text("changed\n")
    (ws / "node_modules/lib/index.js").write_text("changed\n")
    (ws / "src/__pycache__").mkdir()
    (ws / "src/__pycache__/x.pyc").write_bytes(b"pyc")
    assert not store.diff(cp.id)
    store.restore(cp.id)
    assert (ws / ".git/HEAD").read_text() == "changed\n"
    assert (ws / "node_modules/lib/index.js").read_text() == "changed\n"
    everything = CheckpointStore(ws, config=CheckpointConfig(exclude_dirs=frozenset()))
    assert "node_modules/lib/index.js" in everything.diff(everything.create().id, cp.id).deleted


def test_store_outside_the_workspace_and_async(ws: Path, tmp_path: Path) -> None:
    import asyncio

    async def go() -> None:
        store = CheckpointStore(ws, tmp_path / "store")
        before = snapshot(ws)
        cp = await store.acreate("a")
        (ws / "run.sh").unlink()
        assert (await store.adiff(cp.id)).deleted == ("run.sh",)
        await store.arestore(cp.id)
        assert snapshot(ws) == before

    asyncio.run(go())
    assert not (ws / ".composer").exists()


def _count_workspace_opens(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[str]:
    opened: list[str] = []
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):
        path = Path(os.fsdecode(file)) if isinstance(file, str | bytes | os.PathLike) else None
        if path is not None and path.is_relative_to(root) and ".composer" not in path.parts:
            opened.append(str(path))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    return opened


def _make_tree(root: Path, files: int) -> None:
    old = 1_600_000_000 * 10**9  # written long before the checkpoint: outside the racy window
    for i in range(files):
        path = root / f"d{i % 40}" / f"e{i % 7}" / f"f{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"value = {i}\n" * (i % 5 + 1))
        os.utime(path, ns=(old, old))


def test_unchanged_tree_recheckpoint_reads_no_file_contents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "big"
    _make_tree(root, 2000)
    store = CheckpointStore(root)
    first = store.create("first")
    assert first.files == 2000 and first.new_objects > 2000
    opened = _count_workspace_opens(monkeypatch, root)
    second = store.create("unchanged")
    assert opened == [] and second.new_objects == 0 and second.root == first.root
    fresh = CheckpointStore(root)  # a new process: the stat cache comes from the store
    assert fresh.create("again").root == first.root and opened == []
    sh(root, "mv d3 moved && touch d4/e0/f4.py")  # mv keeps inodes: found again without reading
    third = store.create("after mv")
    assert opened == [str(root / "d4/e0/f4.py")]
    assert set(store.diff(first.id, third.id).added) >= {"moved/", "moved/e3/f3.py"}


def test_same_size_rewrite_with_restored_mtime_is_detected(ws: Path) -> None:
    store = CheckpointStore(ws, config=CheckpointConfig(racy_ns=0))
    path = ws / "src/pkg/core.py"
    st_ = path.stat()
    cp = store.create()
    path.write_text(path.read_text().replace("1", "9"))  # same size
    os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns))  # same mtime, but ctime moved
    assert store.diff(cp.id).modified == ("src/pkg/core.py",)
    assert store.create().root != cp.root


def test_prune_keeps_needed_objects(ws: Path) -> None:
    store = CheckpointStore(ws)
    ids, states = [], []
    for i in range(4):
        (ws / "src/pkg/core.py").write_text(f"version {i}\n" * 100)
        (ws / f"file{i}.txt").write_text(f"only in {i}\n")
        states.append(snapshot(ws))
        ids.append(store.create(f"v{i}").id)
    objects = lambda: sum(1 for _ in (store.store_dir / "objects").glob("*/*"))  # noqa: E731
    before = objects()
    result = store.prune(keep=2)
    assert result.checkpoints == 2 and result.objects > 0 and objects() == before - result.objects
    assert [c.id for c in store.list()] == ids[2:]
    with pytest.raises(CheckpointError, match="no checkpoint"):
        store.restore(ids[0])
    for cp_id, state in zip(ids[2:], states[2:]):
        store.restore(cp_id, backup=False)
        assert snapshot(ws) == state
    assert store.prune(keep=2).objects == 0  # nothing else is garbage
    store.prune(keep=0)
    assert store.list() == [] and objects() == 0
    store.create("after prune everything")  # the stat cache does not point at deleted objects
    assert objects() > 0


def test_corrupt_or_missing_object_is_reported_before_anything_changes(ws: Path) -> None:
    store = CheckpointStore(ws)
    cp = store.create()
    blob = store._objects.path(store._tree(store._tree(store._tree(cp.root)["src"].ref)["pkg"].ref)["core.py"].ref)
    blob.write_bytes(zlib.compress(b"tampered"))
    (ws / "src/pkg/core.py").write_text("edited\n")
    (ws / "zzz_new.txt").write_text("new\n")
    edited = snapshot(ws)
    with pytest.raises(CheckpointCorrupt, match="does not match its hash"):
        store.restore(cp.id, backup=False)
    assert snapshot(ws) == edited
    blob.write_bytes(b"not zlib at all")
    with pytest.raises(CheckpointCorrupt, match="is corrupt"):
        store.restore(cp.id, backup=False)
    blob.unlink()
    with pytest.raises(CheckpointCorrupt, match="missing"):
        store.restore(cp.id, backup=False)
    assert snapshot(ws) == edited


def test_large_files_are_recorded_without_contents(ws: Path) -> None:
    store = CheckpointStore(ws, config=CheckpointConfig(max_file_bytes=1000))
    cp = store.create()
    assert "src/pkg/sub/data.bin" in cp.skipped
    (ws / "src/pkg/sub/data.bin").unlink()
    result = store.restore(cp.id, backup=False)
    assert result.skipped == ("src/pkg/sub/data.bin",)


def test_unified_diff(ws: Path) -> None:
    store = CheckpointStore(ws)
    cp = store.create()
    (ws / "src/pkg/core.py").write_text("def f(x):\n    return x + 2\n")
    (ws / "src/pkg/sub/data.bin").write_bytes(b"\0\1")
    (ws / "added.txt").write_text("a\nb\n")
    os.remove(ws / "src/pkg/sub/notes.md")
    text = store.unified_diff(cp.id)
    assert "--- a/src/pkg/core.py\n+++ b/src/pkg/core.py\n" in text
    assert "-    return x + 1\n+    return x + 2\n" in text
    assert "--- /dev/null\n+++ b/added.txt\n@@ -0,0 +1,2 @@\n+a\n+b\n" in text
    assert "Binary files a/src/pkg/sub/data.bin and b/src/pkg/sub/data.bin differ" in text
    assert "-no trailing newline\n\\ No newline at end of file\n" in text
    assert store.unified_diff(cp.id, store.create().id) == text


OPS = st.lists(
    st.tuples(st.sampled_from(["write", "append", "rm", "rmtree", "mkdir", "chmod", "link", "mv"]),
              st.sampled_from(["a", "b", "d1/c", "d1/d2/e", "d3", "d1"]), st.binary(max_size=20)),
    max_size=12,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_restore_after_random_operations(tmp_path_factory: pytest.TempPathFactory, ops: list) -> None:
    root = tmp_path_factory.mktemp("rand")
    (root / "d1/d2").mkdir(parents=True)
    (root / "a").write_text("a")
    (root / "d1/c").write_text("c")
    store = CheckpointStore(root)
    before = snapshot(root)
    cp = store.create()
    for op, rel, data in ops:
        path = root / rel
        try:
            if op == "write":
                path.write_bytes(data)
            elif op == "append":
                with open(path, "ab") as f:
                    f.write(data)
            elif op == "rm":
                path.unlink()
            elif op == "rmtree":
                sh(root, f"rm -rf {rel}")
            elif op == "mkdir":
                path.mkdir(parents=True)
            elif op == "chmod":
                os.chmod(path, 0o700 if len(data) % 2 else 0o640)
            elif op == "link":
                os.symlink(data.hex() or "a", path)
            elif op == "mv":
                os.rename(path, root / f"moved{len(data)}")
        except OSError:
            pass
    store.restore(cp.id)
    assert snapshot(root) == before


def test_create_if_empty_records_only_a_store_without_checkpoints(ws: Path) -> None:
    store = CheckpointStore(ws)
    first = store.create_if_empty("opened")
    assert first is not None and first.label == "opened"
    assert store.create_if_empty("opened again") is None and len(store.list()) == 1
