"""A machine without a usable sandbox, for tests: `bwrap` (and `unshare`) stubs that exit 1, first
on PATH, so a process started with that PATH probes agent/sandbox.py's levels afresh and gets
`unshare` (bwrap stubbed) or `none` (both stubbed).

    env = {**os.environ, "PATH": stubbed_path(tmp_path / "stubs", "bwrap", "unshare")}
"""

from __future__ import annotations

import os
from pathlib import Path


def stubbed_path(where: Path, *tools: str) -> str:
    """PATH with `where` (made, holding a failing stub per tool) in front of this process's."""
    where.mkdir(parents=True, exist_ok=True)
    for tool in tools:
        (where / tool).write_text(f"#!/bin/sh\necho \"{tool}: not permitted here (a test stub)\" >&2\nexit 1\n")
        (where / tool).chmod(0o755)
    return f"{where}{os.pathsep}{os.environ['PATH']}"
