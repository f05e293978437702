"""The VS Code extension (editor-extension/vscode/): it compiles with no TypeScript errors, and its
vitest suite passes. That suite holds the unit tests of the protocol layer and the chat webview,
and an integration test that drives the real composer-lsp (this interpreter, `-m server --stdio`)
with the scripted model endpoint, through vscode-languageserver-protocol.

    .venv/bin/python -m pytest tests/editors/test_vscode.py

Needs node 20+ and npm; `npm ci` runs first when node_modules is missing or older than
package-lock.json (it reaches the npm registry). Skipped only when npm is not installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

EXTENSION = Path(__file__).parents[2] / "editor-extension" / "vscode"
NPM = shutil.which("npm")


def _npm(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COMPOSER_PYTHON": sys.executable, "CI": "1", "NO_COLOR": "1", "FORCE_COLOR": "0"}
    proc = subprocess.run([NPM, *args], cwd=EXTENSION, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"npm {' '.join(args)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-3000:]}")
    return proc


def _stale() -> bool:
    """node_modules missing, or installed from an older package-lock.json (npm writes its own
    node_modules/.package-lock.json on every install)."""
    installed = EXTENSION / "node_modules" / ".package-lock.json"
    return not installed.is_file() or installed.stat().st_mtime < (EXTENSION / "package-lock.json").stat().st_mtime


@pytest.fixture(scope="module")
def node_modules() -> None:
    if NPM is None:
        pytest.skip("npm is not installed")
    if _stale():
        _npm("ci", "--no-audit", "--no-fund", timeout=900)


def test_the_extension_compiles_without_typescript_errors(node_modules):
    _npm("run", "compile", timeout=300)
    assert (EXTENSION / "out" / "extension.js").is_file()
    assert (EXTENSION / "out" / "webview" / "webview" / "main.js").is_file()


def test_the_vitest_suite_passes_against_the_real_server(node_modules):
    proc = _npm("test", timeout=900)
    assert "integration.test.ts" in proc.stdout, proc.stdout[-3000:]
    assert " failed" not in proc.stdout, proc.stdout[-3000:]
