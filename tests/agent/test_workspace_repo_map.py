"""The repo map of a workspace: cached tags never hide a change on disk or in an open buffer."""

from __future__ import annotations

from agent.retrieval.repomap import workspace_repo_map
from agent.workspace import Workspace


def test_the_map_follows_edits_on_disk_and_in_unsaved_buffers(tmp_path):
    (tmp_path / "lib.py").write_text("def parse_settings(path):\n    return path\n")
    (tmp_path / "app.py").write_text("from lib import parse_settings\nparse_settings('x')\n")
    ws = Workspace(tmp_path)
    assert "parse_settings" in workspace_repo_map(ws)
    (tmp_path / "lib.py").write_text("def load_configuration(path):\n    return path\n")
    (tmp_path / "app.py").write_text("from lib import load_configuration\nload_configuration('x')\n")
    after_disk = workspace_repo_map(ws)
    assert "load_configuration" in after_disk and "parse_settings" not in after_disk
    ws.set_buffer("lib.py", "def read_everything(path):\n    return path\n", 2)
    assert "read_everything" in workspace_repo_map(ws)
    ws.clear_buffer("lib.py")
    assert "load_configuration" in workspace_repo_map(ws)
