"""A repository that ships `.composer` (or a folder in it) as a symbolic link cannot make Composer
write its state outside the workspace: the checkpoint store, its object folders, the codebase
index and the record of the agent's buffer edits refuse the link, say which, and write nothing
where it points (agent/textfile.py `make_state_dir`)."""

from __future__ import annotations

import hashlib
import logging
import os
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


def test_a_dangling_gitignore_link_is_not_followed(planted):
    workspace, outside = planted
    (workspace / ".composer").mkdir()
    os.symlink(outside / "planted", workspace / ".composer" / ".gitignore")
    CheckpointStore(workspace).create("turn")
    assert list(outside.iterdir()) == []
