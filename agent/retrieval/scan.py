"""What changed in the workspace since the index last looked: stat first, hash only what moved,
and Merkle hashes of directories.

    current = stat_files(root, paths)                       # {path: (mtime_ns, size)}
    changed, deleted = diff(current, known)                 # against the index's FileRecords
    record, text = read_source(root, "src/app.py", 1 << 20) # hashed bytes, decoded text or None
    dirs = merkle({"src/app.py": h1, "README.md": h2})      # {"src": .., ".": root hash}

A file's hash is blake2b-128 of its bytes. A directory's is blake2b of its sorted (name, child
hash) pairs, so equal roots mean equal trees and one changed file changes only its ancestors.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from agent.retrieval.store import FileRecord
from agent.textfile import decode_bytes

SKIP_SUFFIXES = (".lock", ".min.js", ".min.css", ".map", ".svg", ".ipynb", ".pyc", ".csv", ".tsv",
                 ".pdf", ".png", ".jpg", ".jpeg", ".gif", ".ico", ".woff", ".woff2", ".ttf", ".zip",
                 ".gz", ".tar", ".whl", ".so", ".dylib", ".dll", ".exe", ".bin", ".pt", ".safetensors",
                 ".npy", ".npz", ".sqlite", ".db")
"""Suffixes never indexed: generated, minified, data or binary files (binary is also sniffed)."""
SKIP_NAMES = frozenset({"package-lock.json", "yarn.lock", "pnpm-lock.yaml", "poetry.lock", "uv.lock",
                        "Cargo.lock", "go.sum"})


def indexable(path: str) -> bool:
    """Whether a workspace file is worth chunking at all (by name; size and content decide later)."""
    name = path.rsplit("/", 1)[-1]
    return name not in SKIP_NAMES and not name.lower().endswith(SKIP_SUFFIXES)


def file_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def stat_files(root: Path, paths: Iterable[str]) -> dict[str, tuple[int, int]]:
    """(mtime_ns, size) per path; files that vanished since they were listed are left out."""
    out = {}
    base = str(root)
    for path in paths:
        try:
            st = os.stat(os.path.join(base, path))
        except OSError:
            continue
        out[path] = (st.st_mtime_ns, st.st_size)
    return out


def diff(current: Mapping[str, tuple[int, int]], known: Mapping[str, FileRecord]) -> tuple[list[str], list[str]]:
    """(changed, deleted): paths new or whose stat moved (or whose indexed text came from an
    unsaved buffer), and indexed paths no longer present."""
    changed = []
    for path, (mtime_ns, size) in current.items():
        rec = known.get(path)
        if rec is None or rec.mtime_ns != mtime_ns or rec.size != size:
            changed.append(path)
    deleted = [path for path in known if path not in current]
    return changed, deleted


def read_source(root: Path, path: str, max_bytes: int) -> tuple[FileRecord, str | None] | None:
    """The file's record and its text (None for binary or oversized files, which are recorded
    with no chunks so they are not re-read until they change); None if it cannot be read."""
    try:
        with open(root / path, "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read(max_bytes + 1)
    except OSError:
        return None
    record = FileRecord(path, file_hash(data), st.st_mtime_ns, st.st_size)
    if len(data) > max_bytes:
        return record, None
    decoded = decode_bytes(data)
    return record, decoded[0] if decoded else None


def text_record(path: str, text: str) -> FileRecord:
    """The record of an unsaved buffer's text: mtime -1 makes the next scan re-read the disk."""
    data = text.encode("utf-8", "surrogatepass")
    return FileRecord(path, file_hash(data), -1, len(data))


def merkle(hashes: Mapping[str, str]) -> dict[str, str]:
    """Directory hashes ("." is the root) from file hashes, each the hash of its sorted
    (name, child hash) pairs."""
    tree: dict[str, dict[str, str]] = {".": {}}  # directory -> {name: child path}
    for path in hashes:
        parts = path.split("/")
        for i in range(len(parts)):
            tree.setdefault("/".join(parts[:i]) or ".", {})[parts[i]] = "/".join(parts[: i + 1])
    out: dict[str, str] = {}
    for directory in sorted(tree, key=lambda d: -1 if d == "." else d.count("/"), reverse=True):
        h = hashlib.blake2b(digest_size=16)  # deepest first: child directories are done
        for name, child in sorted(tree[directory].items()):
            digest = "f" + hashes[child] if child in hashes else "d" + out[child]
            h.update(name.encode("utf-8", "surrogatepass") + b"\0" + digest.encode() + b"\n")
        out[directory] = h.hexdigest()
    return out
