"""A workspace's whole tree as data, to compare byte for byte: every path (files, directories,
symlinks) with its permission bits and its bytes (a link's target). Checkpoints keep none of
`.composer` (their own store) or `.git`, so neither does this. And a tree with one of each kind
of thing, with a turn whose shell command changes all of them, for the rewind tests.

    make_tree(root)                      # beside what the workspace holds
    before = snapshot(root)
    model.script = SHELL_TURN            # run_terminal SHELL, then composer/rewind
    assert changed_paths(before, snapshot(root)) == []
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

SKIPPED = frozenset({".composer", ".git"})
SHELL = (
    "mkdir -p new/deep && printf 'a\\000b\\377' > new/deep/raw.bin && echo made > new/a.txt"
    " && echo appended >> hello.py && rm src/lib.py && rm -rf docs/old && rmdir empty"
    " && head -c 3000 /dev/zero > data/blob.bin && mv data/keep.txt data/moved.txt"
    " && chmod 600 scripts/run.sh && chmod 700 data && ln -sfn src new/link && rm link"
)
"""Creates (a directory tree, a binary file, a link), changes (text, binary, modes), deletes
(a file, a tree, an empty directory, a link) and renames: what a shell turn does."""
SHELL_TURN = [[{"text": "Reorganising.", "tool_calls": [{"name": "run_terminal", "arguments": {"command": SHELL}}]},
               {"text": "Done reorganising."}]]
"""The scripted model's turn that runs SHELL."""
SHELL_CHANGES = frozenset({"new/deep/raw.bin", "new/link", "hello.py", "src/lib.py", "docs/old", "empty",
                           "data/blob.bin", "data/moved.txt", "scripts/run.sh", "data", "link"})
"""Some of the paths SHELL changes, one of each kind of change."""


def make_tree(root: Path) -> None:
    """Text, binary and executable files, nested and empty directories and a link beside
    root/hello.py (which the workspace fixtures hold)."""
    for rel, data in {"src/lib.py": b"def f():\n    return 1\n", "docs/old/readme.txt": b"old\n",
                      "docs/keep.md": b"# keep\n", "data/blob.bin": bytes(range(256)) * 16,
                      "data/keep.txt": b"keep\n", "scripts/run.sh": b"#!/bin/sh\necho run\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "scripts/run.sh").chmod(0o755)
    (root / "empty").mkdir()
    os.symlink("hello.py", root / "link")


def snapshot(root: Path) -> dict[str, tuple[str, int, bytes | str | None]]:
    """{relative path: (kind f|d|l, permission bits, bytes | link target | None)}."""
    tree: dict[str, tuple[str, int, bytes | str | None]] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED)
        for name in [*dirs, *sorted(f for f in files if f not in SKIPPED)]:
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                tree[rel] = ("l", 0, os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                tree[rel] = ("d", stat.S_IMODE(st.st_mode), None)
            else:
                tree[rel] = ("f", stat.S_IMODE(st.st_mode), path.read_bytes())
    return tree


def changed_paths(a: dict, b: dict) -> list[str]:
    """The paths whose kind, mode or contents differ between two snapshots (or are in one only)."""
    return sorted(p for p in a.keys() | b.keys() if a.get(p) != b.get(p))
