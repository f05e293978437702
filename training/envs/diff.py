"""What an environment changed, as a git-style diff that `git apply` (and, for text, `patch -p1`)
takes: found from the overlay's upper dir (files there were written, whiteouts and opaque dirs
mark deletions) without walking the base, or, for a copy, by comparing the two trees.

    text = tree_diff(lower, root, upper=layer.upper)     # upper=None: compare the whole trees
    changed_paths(lower, root, upper)                    # the candidate paths, sorted

Format: `diff --git a/P b/P`, mode lines, a full `index <sha1>..<sha1>` line (git's blob ids, so
binary hunks apply), unified hunks with 3 lines of context and `\\ No newline at end of file`,
`GIT binary patch` literal hunks (zlib + git's base85) for files with a NUL in the first 8000
bytes, symlinks as mode 120000 with the target as content, C-quoted paths where git quotes
them. Bytes that are not UTF-8 survive: the text is decoded with surrogateescape, so
`text.encode("utf-8", "surrogateescape")` gives back the exact patch.

Left out: any path under `.git` or `.composer`, Python and test caches (`__pycache__`, `*.pyc`,
`.pytest_cache`, ...), and what the root `.gitignore` ignores (`include_ignored=True` keeps it).

Tests: .venv/bin/python -m pytest tests/training/test_envs.py -k diff
"""

from __future__ import annotations

import base64
import contextlib
import difflib
import hashlib
import logging
import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path

import pathspec

log = logging.getLogger(__name__)

NEVER = frozenset({".git", ".composer"})
JUNK = ("__pycache__/", "*.pyc", "*.pyo", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/",
        ".hypothesis/", ".coverage")
NULL_ID = "0" * 40
BINARY_SNIFF = 8000
MAX_FILE_BYTES = 64 * 1024**2
"""Files larger than this (on either side) are left out of the diff, with a warning: a rollout's
stray dump must not be read into memory and shipped as a patch."""
_CONTEXT = 3
_OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")
_FUSE_WHITEOUT, _FUSE_OPAQUE = ".wh.", ".wh..wh..opq"
_QUOTE = {7: "\\a", 8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f", 13: "\\r", 34: '\\"', 92: "\\\\"}


# ---- which paths changed ----------------------------------------------------------------------


def _files_below(root: Path, rel: str) -> Iterator[str]:
    """Every non-directory path at or under root/rel, relative to root (symlinks to directories
    count as files: os.walk lists them but does not follow them)."""
    top = root / rel if rel else root
    if top.is_symlink() or not top.is_dir():
        if os.path.lexists(top):
            yield rel
        return
    for folder, dirs, files in os.walk(top):
        base = os.path.relpath(folder, root)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            yield os.path.normpath(os.path.join(base, name))


def _is_opaque(path: str) -> bool:
    for name in _OPAQUE_XATTRS:
        try:
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return os.path.exists(os.path.join(path, _FUSE_OPAQUE))


def _overlay_candidates(lower: Path, upper: Path) -> set[str]:
    found: set[str] = set()
    for folder, dirs, files in os.walk(upper):
        rel_dir = os.path.relpath(folder, upper)
        rel_dir = "" if rel_dir == "." else rel_dir
        if rel_dir and _is_opaque(folder):  # replaced directory: the lower's files are gone
            found.update(_files_below(lower, rel_dir))
        for name in files + dirs:
            path = os.path.join(folder, name)
            rel = os.path.join(rel_dir, name)
            st = os.lstat(path)
            if name == _FUSE_OPAQUE:
                continue
            if name.startswith(_FUSE_WHITEOUT):
                found.update(_files_below(lower, os.path.join(rel_dir, name[len(_FUSE_WHITEOUT):])))
            elif stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:  # kernel whiteout
                found.update(_files_below(lower, rel))
            elif stat.S_ISDIR(st.st_mode):
                if os.path.lexists(lower / rel) and not (lower / rel).is_dir():
                    found.add(rel)  # a file replaced by a directory
            else:
                found.add(rel)
                if (lower / rel).is_dir() and not (lower / rel).is_symlink():
                    found.update(_files_below(lower, rel))  # a directory replaced by a file
    return found


def _copy_candidates(lower: Path, root: Path) -> set[str]:
    """Paths whose type, size, mode or mtime differ between the two trees (cp -a keeps mtimes)."""
    old = {rel: os.lstat(lower / rel) for rel in _files_below(lower, "")}
    new = {rel: os.lstat(root / rel) for rel in _files_below(root, "")}
    found = set(old) ^ set(new)
    for rel in set(old) & set(new):
        a, b = old[rel], new[rel]
        if (a.st_mode, a.st_size, a.st_mtime_ns) != (b.st_mode, b.st_size, b.st_mtime_ns):
            found.add(rel)
    return found


def _ignore_spec(root: Path, lower: Path, include_ignored: bool) -> pathspec.GitIgnoreSpec:
    lines = list(JUNK)
    if not include_ignored:
        for tree in (lower, root):
            with_rules = tree / ".gitignore"
            if with_rules.is_file() and not with_rules.is_symlink():
                lines += with_rules.read_text(errors="replace").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines)


def changed_paths(lower: Path, root: Path, upper: Path | None = None, *,
                  include_ignored: bool = False) -> list[str]:
    """Sorted paths (relative, '/'-separated) that may differ between `lower` and `root`."""
    found = _overlay_candidates(lower, upper) if upper is not None else _copy_candidates(lower, root)
    spec = _ignore_spec(root, lower, include_ignored)
    keep = []
    for rel in found:
        rel = rel.replace(os.sep, "/")
        if NEVER.intersection(rel.split("/")) or spec.match_file(rel):
            continue
        keep.append(rel)
    return sorted(keep)


# ---- one file's diff --------------------------------------------------------------------------


def _read(path: Path) -> tuple[bytes, str] | None:
    """(content, git mode) of a file or symlink; None when absent (or a directory)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return os.fsencode(os.readlink(path)), "120000"
    if not stat.S_ISREG(st.st_mode):
        return None
    return path.read_bytes(), "100755" if st.st_mode & 0o100 else "100644"


def blob_id(data: bytes) -> str:
    """git's object id of a blob with this content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def quote_path(path: str) -> str:
    """A path as git writes it in headers: C-quoted when it holds quotes, backslashes, control or
    non-ASCII characters (core.quotePath)."""
    raw = os.fsencode(path)
    if not any(b < 32 or b >= 127 or b in (34, 92) for b in raw):
        return path
    return '"' + "".join(_QUOTE.get(b) or (chr(b) if 32 <= b < 127 else f"\\{b:03o}") for b in raw) + '"'


def _lines(data: bytes) -> list[str]:
    """Lines split on \\n only, endings kept, bytes kept as latin-1 characters."""
    text = data.decode("latin-1")
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _text_hunks(old: bytes, new: bytes, a: str, b: str) -> str:
    out = []
    for line in difflib.unified_diff(_lines(old), _lines(new), a, b, n=_CONTEXT):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _base85_lines(data: bytes) -> str:
    packed = zlib.compress(data, 9)
    out = []
    for start in range(0, len(packed), 52):
        chunk = packed[start : start + 52]
        size = len(chunk)
        tag = chr(ord("A") + size - 1) if size <= 26 else chr(ord("a") + size - 27)
        out.append(tag + base64.b85encode(chunk, pad=True).decode("ascii") + "\n")
    return "".join(out)


def _binary_hunks(old: bytes, new: bytes) -> str:
    return (f"GIT binary patch\nliteral {len(new)}\n{_base85_lines(new)}\n"
            f"literal {len(old)}\n{_base85_lines(old)}\n")


def _is_binary(data: bytes) -> bool:
    return b"\0" in data[:BINARY_SNIFF]


def file_diff(rel: str, old: tuple[bytes, str] | None, new: tuple[bytes, str] | None) -> str:
    """The diff of one path between two (content, mode) states; "" when equal."""
    if old == new:
        return ""
    if old is not None and new is not None and (old[1] == "120000") != (new[1] == "120000"):
        return file_diff(rel, old, None) + file_diff(rel, None, new)  # type change: delete + add
    a_name, b_name = quote_path(f"a/{rel}"), quote_path(f"b/{rel}")
    head = [f"diff --git {a_name} {b_name}\n"]
    old_data, new_data = (old or (b"", ""))[0], (new or (b"", ""))[0]
    old_id = blob_id(old_data) if old is not None else NULL_ID
    new_id = blob_id(new_data) if new is not None else NULL_ID
    if old is None:
        head.append(f"new file mode {new[1]}\n")
    elif new is None:
        head.append(f"deleted file mode {old[1]}\n")
    elif old[1] != new[1]:
        head.append(f"old mode {old[1]}\nnew mode {new[1]}\n")
    if old_data == new_data and old is not None and new is not None:
        return "".join(head)  # mode change only
    same_mode = f" {old[1]}" if old is not None and new is not None and old[1] == new[1] else ""
    head.append(f"index {old_id}..{new_id}{same_mode}\n")
    if _is_binary(old_data) or _is_binary(new_data):
        return "".join(head) + _binary_hunks(old_data, new_data)
    tab = "\t" if " " in rel else ""
    a_label = f"{a_name}{tab}" if old is not None else "/dev/null"
    b_label = f"{b_name}{tab}" if new is not None else "/dev/null"
    return "".join(head) + _text_hunks(old_data, new_data, a_label, b_label)


def _too_big(*paths: Path, limit: int) -> bool:
    for path in paths:
        with contextlib.suppress(OSError):
            if stat.S_ISREG(os.lstat(path).st_mode) and os.lstat(path).st_size > limit:
                return True
    return False


def tree_diff(lower: Path, root: Path, upper: Path | None = None, *,
              include_ignored: bool = False, max_file_bytes: int = MAX_FILE_BYTES) -> str:
    """The diff from `lower` to `root` (see the module docstring); `upper` is the overlay's upper
    dir, which lists the candidates without walking the trees."""
    parts, skipped = [], []
    for rel in changed_paths(lower, root, upper, include_ignored=include_ignored):
        if _too_big(lower / rel, root / rel, limit=max_file_bytes):
            skipped.append(rel)
            continue
        parts.append(file_diff(rel, _read(lower / rel), _read(root / rel)))
    if skipped:
        log.warning("envs: left %d files over %d bytes out of the diff: %s", len(skipped),
                    max_file_bytes, ", ".join(skipped[:5]))
    return "".join(parts).encode("latin-1").decode("utf-8", "surrogateescape")
