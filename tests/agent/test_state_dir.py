"""A repository that ships `.composer` (or a folder or file in it) as a symbolic link cannot make
Composer write or delete its state outside the workspace: the checkpoint store, its object
folders, its prune, the codebase index and the record of the agent's buffer edits refuse the
link, say which, and touch nothing where it points (agent/textfile.py `make_state_dir`); a session
there fails to start with that message, in `composer-agent run` as one line."""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.checkpoints import CheckpointStore
from agent.editor_edits import BufferEditRecord
from agent.exceptions import OutsideWorkspaceError
from agent.object_store import CheckpointError
from agent.retrieval.embedder import HashingEmbedder
from agent.retrieval.index import CodebaseIndex


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace and a folder outside it, which must stay empty."""
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (workspace / "main.py").write_text("print('hi')\n")
    return workspace, outside


def test_a_linked_state_folder_refuses_the_store_and_the_index(planted, caplog):
    workspace, outside = planted
    os.symlink(outside, workspace / ".composer")
    with pytest.raises(CheckpointError, match=r"\.composer is a symbolic link .*remove the link"):
        CheckpointStore(workspace)
    with pytest.raises(OutsideWorkspaceError, match="symbolic link"):
        CodebaseIndex(workspace, HashingEmbedder(64))
    with caplog.at_level(logging.WARNING):
        BufferEditRecord(workspace).record("main.py", "the agent's")
    assert "symbolic link" in caplog.text
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("link", ["checkpoints", "checkpoints/refs", "checkpoints/objects", "index"])
def test_a_linked_folder_inside_it_is_refused_too(planted, link):
    workspace, outside = planted
    (workspace / ".composer" / link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, workspace / ".composer" / link)
    with pytest.raises((CheckpointError, OutsideWorkspaceError), match=f"{link} is a symbolic link"):
        if link == "index":
            CodebaseIndex(workspace, HashingEmbedder(64))
        else:
            CheckpointStore(workspace)
    assert list(outside.iterdir()) == []


def test_an_object_folder_shipped_as_a_link_is_never_written_through(planted):
    workspace, outside = planted
    store = CheckpointStore(workspace)
    fan_out = hashlib.sha256((workspace / "main.py").read_bytes()).hexdigest()[:2]
    os.symlink(outside, store.store_dir / "objects" / fan_out)
    with pytest.raises(CheckpointError, match=f"{fan_out} is a symbolic link"):
        store.create("turn")
    assert list(outside.iterdir()) == []


def test_a_prune_never_deletes_through_a_linked_object_folder(planted):
    workspace, outside = planted
    (outside / "victim").write_text("kept")
    store = CheckpointStore(workspace)
    store.create("first")
    os.symlink(outside, store.store_dir / "objects" / "zz")  # planted after the store opened
    store.prune(keep=0)
    assert (outside / "victim").read_text() == "kept"
    with pytest.raises(CheckpointError, match="zz is a symbolic link"):
        CheckpointStore(workspace)  # and the next store refuses it


def test_a_store_whose_folder_became_a_link_writes_nothing_there(planted):
    workspace, outside = planted
    store = CheckpointStore(workspace)
    store.create("first")
    store.store_dir.rename(workspace / "moved-away")
    os.symlink(outside, store.store_dir)  # a checkout put a link where the store's folder was
    for act in (lambda: store.create("second"), lambda: store.prune(keep=0)):
        with pytest.raises(CheckpointError, match="through a symbolic link"):
            act()
    assert list(outside.iterdir()) == [], "not even the lock file"


def test_a_prune_leaves_a_folder_it_did_not_write_in_an_object_folder(planted):
    workspace, _ = planted
    store = CheckpointStore(workspace)
    store.create("first")
    stray = store.store_dir / "objects" / "zz" / "stray"
    stray.mkdir(parents=True)
    store.prune(keep=0)
    assert stray.is_dir()


@pytest.mark.parametrize("folder", ["buffers", "refs"])
def test_a_store_folder_linked_after_it_opened_is_refused_before_any_write(planted, folder):
    workspace, outside = planted
    store = CheckpointStore(workspace)
    store.create("first")
    target = store.store_dir / folder
    if target.exists():
        for path in target.iterdir():
            path.rename(outside / path.name)  # what the checkout moved away; it must stay there
        target.rmdir()
    before = sorted(p.name for p in outside.iterdir())
    os.symlink(outside, target)
    with pytest.raises(CheckpointError, match=f"{folder} is a symbolic link"):
        store.create("second", {"main.py": "unsaved"})
    with pytest.raises(CheckpointError, match=f"{folder} is a symbolic link"):
        store.prune(keep=0)
    assert sorted(p.name for p in outside.iterdir()) == before


@pytest.mark.parametrize("name", ["meta.sqlite", "vectors.0.f32"])
def test_the_index_refuses_a_linked_file_in_its_folder(planted, name):
    workspace, outside = planted
    (outside / "victim").write_text("kept")
    (workspace / ".composer" / "index").mkdir(parents=True)
    os.symlink(outside / "victim", workspace / ".composer" / "index" / name)
    with pytest.raises(OutsideWorkspaceError, match=f"{name} is a symbolic link"):
        CodebaseIndex(workspace, HashingEmbedder(64)).update()
    assert (outside / "victim").read_text() == "kept"


def test_composer_agent_run_says_why_in_one_line(planted):
    workspace, outside = planted
    os.symlink(outside, workspace / ".composer")
    proc = subprocess.run([sys.executable, "-m", "agent.cli", "run", "--workspace", str(workspace), "--endpoint",
                           "http://127.0.0.1:9/v1", "--allow-unsandboxed", "hello"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "is a symbolic link" in proc.stderr and list(outside.iterdir()) == []


def test_a_dangling_gitignore_link_is_not_followed(planted):
    workspace, outside = planted
    (workspace / ".composer").mkdir()
    os.symlink(outside / "planted", workspace / ".composer" / ".gitignore")
    CheckpointStore(workspace).create("turn")
    assert list(outside.iterdir()) == []
