"""The files the agent works on: one root directory, overlaid with the editor's unsaved buffers.

    ws = Workspace("/path/to/repo")                 # edit_sink=... when an editor is attached
    ws.set_buffer("src/app.py", unsaved_text, 7)    # the editor's didOpen/didChange
    text = ws.read_text("src/app.py")               # the buffer wins over the disk
    via = await ws.apply_text("src/app.py", new)    # "editor" (workspace/applyEdit) or "disk"
    for rel in ws.iter_files("src"): ...            # sorted, .gitignore-aware

Paths: every method takes a workspace-relative path or an absolute path inside the root. `..`
escapes, absolute paths elsewhere and symlinks (any component) that lead outside the root raise
OutsideWorkspaceError; symlinks that stay inside are fine. Paths are kept as written (normalised),
so deleting a symlink removes the link and writing through one rewrites its target.

Text: `read_text` decodes UTF-8, UTF-8 with BOM, UTF-16 with BOM and falls back to latin-1
(`text_format(path).note` says so). A file whose line breaks are all CRLF reads with plain `\\n`;
writes put the CRLFs, the BOM and the encoding back, so an edit changes only what it meant to.
Binary files and files over `max_file_bytes` raise, saying what to do instead (`read_lines`
streams any size).

Writes are atomic: a temp file in the same directory, fsync, os.replace, the old mode kept.

Speed (2-core dev box, nice 19, warm cache): `iter_files` lists the venv's site-packages (36.5k
files) in 0.12 s; with a 15-pattern root .gitignore checked for every entry, in 0.46 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pathspec

from agent.editor_edits import BufferEditRecord
from agent.exceptions import (
    BinaryFileError,
    EditorRefusedError,
    FileTooLargeError,
    OutsideWorkspaceError,
    WorkspaceError,
)
from agent.ignore_rules import IgnoreFiles, ignored
from agent.textfile import (
    SNIFF_BYTES,
    TextFormat,
    atomic_write,
    decode_bytes,
    is_binary,
    newline_style,
    restore_newlines,
)

NAME_MAX = 255
"""The longest file or folder name Linux file systems take, in bytes (a longer one: ENAMETOOLONG)."""
ALWAYS_SKIPPED = frozenset({".git", ".composer"})
"""Directory names never listed: git's store and Composer's own index."""


class EditSink(Protocol):
    """Where edits to open buffers go when an editor is attached (the language server implements
    it with workspace/applyEdit). Returns False when the editor refused the edit."""

    async def apply(
        self, path: str, old_text: str | None, new_text: str, version: int | None
    ) -> bool: ...


class DeleteSink(Protocol):
    """Optional second method of an edit sink: deletes a file whose buffer is open (a
    WorkspaceEdit DeleteFile). Sinks without it get the disk delete plus a closed overlay."""

    async def delete(self, path: str, version: int | None) -> bool: ...


@dataclass(frozen=True)
class DirEntry:
    name: str
    is_dir: bool
    size: int | None
    """Bytes for files, None for directories and broken symlinks."""


@dataclass
class _Buffer:
    text: str
    """As the editor holds it (its own line breaks)."""
    version: int | None
    saved: bool = False
    """The text was the file's on the disk when the editor reported it: a clean buffer, which the
    editor reloads itself when the disk changes (so it is never unsaved work, even while a
    reload is on its way)."""


class Workspace:
    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_file_bytes: int = 2_000_000,
        edit_sink: EditSink | None = None,
        alias: str | None = None,
    ) -> None:
        """`alias`: an absolute path that names the root to the model (`display_root`, what the
        system prompt says) and that tools accept as the root. Task environments use one fixed
        alias, so every environment's prompt is the same tokens (prefix caching, shared prefixes
        in training) and runs are reproducible whatever directory the environment got."""
        given = Path(os.path.abspath(root))
        self.root = given.resolve()
        if not self.root.is_dir():
            raise ValueError(f"workspace root {str(given)!r} is not a directory")
        if alias is not None and not os.path.isabs(alias):
            raise ValueError(f"workspace alias {alias!r} is not an absolute path")
        self._root_str = str(self.root)
        self.display_root = os.path.normpath(alias) if alias else str(given)
        self._aliases = sorted(
            {self._root_str, str(given), self.display_root}, key=len, reverse=True
        )
        self.max_file_bytes = max_file_bytes
        self.edit_sink = edit_sink
        self._buffers: dict[str, _Buffer] = {}
        self._edits = BufferEditRecord(self.root)
        """Which buffers still hold the text this workspace's last editor edit left there."""
        self._formats: dict[str, TextFormat] = {}
        self._ignore = IgnoreFiles(self.root)

    # ---- paths -----------------------------------------------------------------------------

    def resolve(self, path: str | os.PathLike[str]) -> Path:
        """The absolute path for `path` (workspace-relative, or absolute inside the root), after
        checking it cannot reach outside the root."""
        rel = self._rel(path)
        return self.root / rel if rel != "." else self.root

    def relative(self, path: str | os.PathLike[str]) -> str:
        """`path` relative to the root, posix style ("." for the root itself)."""
        return self._rel(path)

    def _rel(self, path: str | os.PathLike[str]) -> str:
        text = os.fspath(path)
        if "\x00" in text:
            raise WorkspaceError(f"{text!r} contains a NUL character; give a plain file path")
        rel = None
        if os.path.isabs(text):
            norm = os.path.normpath(text)
            for alias in self._aliases:
                if norm == alias or norm.startswith(alias.rstrip(os.sep) + os.sep):
                    rel = os.path.relpath(norm, alias)
                    break
            if rel is None:
                raise OutsideWorkspaceError(
                    f"{text!r} is outside the workspace {self.display_root}; use a path relative to "
                    f"the workspace root (like 'src/main.py') or an absolute path inside it"
                )
        else:
            rel = os.path.normpath(text or ".")
        if rel == ".." or rel.startswith(".." + os.sep):
            raise OutsideWorkspaceError(
                f"{text!r} escapes the workspace via '..'; paths must stay inside "
                f"{self.display_root} (use a path relative to it, like 'src/main.py')"
            )
        rel = rel.replace(os.sep, "/")
        longest = max(len(os.fsencode(part)) for part in rel.split("/"))
        if longest > NAME_MAX:
            raise WorkspaceError(
                f"{text[:80]!r} has a name of {longest} bytes; file names are at most {NAME_MAX} bytes, "
                "so no such file can exist (give the path as the request or a listing spells it)"
            )
        if rel != ".":
            self._check_symlinks(text, rel)
        return rel

    def _check_symlinks(self, text: str, rel: str) -> None:
        real = os.path.realpath(os.path.join(self._root_str, rel))
        if real == self._root_str or real.startswith(self._root_str + os.sep):
            return
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            link = os.path.join(self._root_str, *parts[:i])
            if os.path.islink(link):
                target = os.path.realpath(link)
                if not (target == self._root_str or target.startswith(self._root_str + os.sep)):
                    raise OutsideWorkspaceError(
                        f"{text!r} goes through the symlink {'/'.join(parts[:i])!r}, which points "
                        f"outside the workspace (to {target}); only files inside "
                        f"{self._root_str} can be used, including through symlinks that stay inside"
                    )
        raise OutsideWorkspaceError(
            f"{text!r} resolves to {real}, outside the workspace {self._root_str}"
        )

    # ---- the editor's unsaved buffers ------------------------------------------------------

    def set_buffer(self, path: str, text: str, version: int | None) -> None:
        """Records the editor's current text of `path` (didOpen/didChange); reads see it."""
        rel = self._rel(path)
        buffer = _Buffer(text, version, self._is_saved(rel, text))
        if rel not in self._buffers:
            self._edits.opened(rel, text, clean=buffer.saved)
        self._buffers[rel] = buffer

    def clear_buffer(self, path: str) -> None:
        """The editor closed `path` (didClose): reads go back to the disk."""
        self._buffers.pop(self._rel(path), None)
        self._edits.forget(self._rel(path))

    def holds_last_edit(self, path: str, text: str) -> bool | None:
        """Whether `text` (a buffer of `path` as the editor holds it) is what the agent's last
        editor edit of it left, so there has been no typing since: None when no such edit is known
        since the buffer was opened. It outlives a server restart (agent/editor_edits.py)."""
        return self._edits.holds_last_edit(self._rel(path), text)

    def buffer(self, path: str) -> tuple[str, int | None] | None:
        """(text as the editor holds it, version) of an open buffer, else None."""
        buf = self._buffers.get(self._rel(path))
        return None if buf is None else (buf.text, buf.version)

    def open_buffers(self) -> list[str]:
        return sorted(self._buffers)

    def unsaved(self) -> dict[str, str]:
        """The open buffers whose text is not the file's on the disk (or that have no file there),
        as the editor holds them: what a checkpoint of the disk alone would miss. Buffers over
        max_file_bytes are left out, and so are those the editor reported clean: when the disk
        changed since (a shell command), the editor's reload is on its way."""
        return {rel: buf.text for rel, buf in self._buffers.items()
                if not buf.saved and len(buf.text) <= self.max_file_bytes and self._on_disk(rel) != buf.text}

    def _is_saved(self, rel: str, text: str) -> bool:
        """Whether `text` is the file's on the disk; a file known to be UTF-8 without a BOM and
        of another length cannot hold it, which spares the read for most of an editor's reports."""
        try:
            size = (self.root / rel).stat().st_size
        except OSError:
            return False
        fmt = self._formats.get(rel)
        plain_utf8 = fmt is not None and fmt.encoding == "utf-8" and not fmt.bom
        if size > self.max_file_bytes or (plain_utf8 and size != len(text.encode("utf-8", "surrogatepass"))):
            return False
        return self._on_disk(rel) == text

    def _on_disk(self, rel: str) -> str | None:
        """The file's text on the disk with its own line breaks; None when there is none, or it
        is binary, too large or unreadable."""
        try:
            target = self.root / rel
            if target.stat().st_size > self.max_file_bytes:
                return None
            decoded = decode_bytes(target.read_bytes())
        except OSError:  # none, a directory, unreadable
            return None
        if decoded is None:
            return None
        self._formats.setdefault(rel, decoded[1])  # so _is_saved's shortcut serves the next report
        return restore_newlines(decoded[0], decoded[1].newline)

    # ---- reading ---------------------------------------------------------------------------

    def read_text(self, path: str) -> str:
        """The file's text (an open buffer first), with CRLF files shown as `\\n`. Raises
        BinaryFileError, FileTooLargeError, or WorkspaceError for directories and missing files."""
        rel = self._rel(path)
        buf = self._buffers.get(rel)
        if buf is not None:
            newline = newline_style(buf.text)
            self._formats.setdefault(rel, TextFormat(newline=newline))
            return buf.text.replace("\r\n", "\n") if newline == "\r\n" else buf.text
        target = self._file(rel)
        size = target.stat().st_size
        if size > self.max_file_bytes:
            raise FileTooLargeError(
                f"{rel} is {size:,} bytes, more than the {self.max_file_bytes:,} read at once; read a "
                f"line range (read_file with offset and limit) or search it with grep"
            )
        decoded = decode_bytes(self._read(target, rel))
        if decoded is None:
            raise BinaryFileError(
                f"{rel} is a binary file, {size:,} bytes; use run_terminal with `xxd` or `file` to inspect it"
            )
        text, fmt = decoded
        self._formats[rel] = fmt
        return text

    def read_lines(
        self, path: str, start: int = 1, count: int | None = None
    ) -> tuple[list[str], int]:
        """Lines start..start+count-1 (1-based, without line breaks) and the file's line count.
        Streams files over max_file_bytes instead of refusing them."""
        try:
            lines = self.read_text(path).split("\n")
        except FileTooLargeError:
            return self._stream_lines(self._rel(path), start, count)
        if lines[-1] == "":
            lines.pop()
        stop = len(lines) if count is None else start - 1 + count
        return lines[start - 1 : stop], len(lines)

    def _stream_lines(self, rel: str, start: int, count: int | None) -> tuple[list[str], int]:
        target = self._file(rel)
        with target.open("rb") as f:
            head = f.read(SNIFF_BYTES)
        encoding = "utf-16" if head.startswith((b"\xff\xfe", b"\xfe\xff")) else "utf-8-sig"
        if encoding == "utf-8-sig" and is_binary(head):
            raise BinaryFileError(
                f"{rel} is a binary file; use run_terminal with `xxd` or `file` to inspect it"
            )
        shown, total = [], 0
        stop = None if count is None else start - 1 + count
        with open(target, encoding=encoding, errors="replace", newline="\n") as f:
            for total, line in enumerate(f, 1):
                if total >= start and (stop is None or total <= stop):
                    shown.append(line.rstrip("\n").removesuffix("\r"))
        return shown, total

    def read_bytes(self, path: str) -> bytes:
        """The file's bytes; an open buffer is encoded as the file would be written."""
        rel = self._rel(path)
        buf = self._buffers.get(rel)
        if buf is not None:
            fmt = self._formats.get(rel, TextFormat())
            return fmt.bom + buf.text.encode(fmt.encoding, errors="replace")
        return self._read(self._file(rel), rel)

    def text_format(self, path: str) -> TextFormat | None:
        """How the file was stored when last read or written (None before that)."""
        return self._formats.get(self._rel(path))

    def exists(self, path: str) -> bool:
        rel = self._rel(path)
        return rel in self._buffers or os.path.exists(self.root / rel)

    def is_file(self, path: str) -> bool:
        rel = self._rel(path)
        return rel in self._buffers or os.path.isfile(self.root / rel)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(self.resolve(path))

    def stat(self, path: str) -> os.stat_result:
        rel = self._rel(path)
        try:
            return os.stat(self.root / rel)
        except FileNotFoundError:
            raise WorkspaceError(self._missing(rel)) from None

    def _file(self, rel: str) -> Path:
        target = self.root / rel
        if target.is_dir():
            raise WorkspaceError(
                f"{rel} is a directory, not a file; use list_dir to see what it holds"
            )
        if not target.exists():
            raise WorkspaceError(self._missing(rel))
        return target

    def _read(self, target: Path, rel: str) -> bytes:
        try:
            return target.read_bytes()
        except FileNotFoundError:
            raise WorkspaceError(self._missing(rel)) from None
        except OSError as err:
            raise WorkspaceError(f"cannot read {rel}: {err.strerror}") from None

    def _missing(self, rel: str) -> str:
        """'X does not exist' plus the closest names in its folder, so a typo fixes itself."""
        parent, _, name = rel.rpartition("/")
        folder = self.root / parent
        if not folder.is_dir():
            return f"{rel} does not exist (nor does its folder {parent or '.'}/)"
        names = [e.name + ("/" if e.is_dir() else "") for e in os.scandir(folder)]
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        hint = (
            "; did you mean "
            + " or ".join(f"{parent + '/' if parent else ''}{c}" for c in close)
            + "?"
        )
        return f"{rel} does not exist" + (hint if close else "")

    # ---- writing ---------------------------------------------------------------------------

    def write_text(self, path: str, text: str) -> None:
        """Writes `text` to the disk atomically, in the file's own encoding, BOM and line breaks
        (UTF-8 and `\\n` for a new file); creates parent directories."""
        rel = self._rel(path)
        target = self.root / rel
        if target.is_dir():
            raise WorkspaceError(f"{rel} is a directory; give the path of a file inside it")
        fmt = self._formats.get(rel, TextFormat())
        if target.is_file():
            decoded = decode_bytes(self._read(target, rel))
            fmt = decoded[1] if decoded is not None else TextFormat()
        if target.is_symlink():
            target = Path(os.path.realpath(target))  # rewrite the link's target, keep the link
        atomic_write(target, fmt.encode(text, rel))
        self._formats[rel] = fmt

    def delete(self, path: str) -> None:
        """Removes a file (a symlink: the link itself). Refuses directories."""
        rel = self._rel(path)
        target = self.root / rel
        if target.is_dir() and not target.is_symlink():
            raise WorkspaceError(
                f"{rel} is a directory; only files can be deleted here (use run_terminal with "
                f"`rm -r {rel}` to remove a directory)"
            )
        if not os.path.lexists(target):
            raise WorkspaceError(self._missing(rel))
        target.unlink()
        self._formats.pop(rel, None)

    async def apply_text(self, path: str, new_text: str) -> str:
        """Replaces the file's text: through the editor when it has the file open (so the user
        sees and can undo the edit), else atomically on the disk. Returns "editor" or "disk"."""
        rel = self._rel(path)
        buf = self._buffers.get(rel)
        if buf is not None and self.edit_sink is not None:
            raw = restore_newlines(new_text, newline_style(buf.text))
            if not await self.edit_sink.apply(rel, buf.text, raw, buf.version):
                raise EditorRefusedError(
                    f"the editor refused the edit to {rel} (the user rejected it or the buffer "
                    f"changed meanwhile); read {rel} again, then retry or ask the user"
                )
            # The editor reports the new version with its didChange; until then none is known. A
            # report that came while the edit was answered (with any typing) is the buffer now.
            if self._buffers.get(rel) is buf:
                self._buffers[rel] = _Buffer(raw, None)
            await asyncio.to_thread(self._edits.record, rel, raw)
            return "editor"
        await asyncio.to_thread(self.write_text, rel, new_text)
        if buf is not None:
            self._buffers[rel] = _Buffer(restore_newlines(new_text, newline_style(buf.text)), None, saved=True)
        return "disk"

    async def apply_delete(self, path: str) -> str:
        """Deletes a file: through the editor when it has it open and the sink can delete, else
        on the disk (and the overlay forgets it). Returns "editor" or "disk"."""
        rel = self._rel(path)
        buf = self._buffers.get(rel)
        sink_delete = getattr(self.edit_sink, "delete", None)
        if buf is not None and sink_delete is not None:
            if (self.root / rel).is_dir():
                raise WorkspaceError(f"{rel} is a directory; only files can be deleted here")
            if not await sink_delete(rel, buf.version):
                raise EditorRefusedError(f"the editor refused to delete {rel}; ask the user")
            self._buffers.pop(rel, None)
            self._edits.forget(rel)
            self._formats.pop(rel, None)
            return "editor"
        if buf is not None and not os.path.lexists(self.root / rel):
            self._buffers.pop(rel)  # an unsaved buffer that never reached the disk
            self._edits.forget(rel)
            return "disk"
        await asyncio.to_thread(self.delete, rel)
        self._buffers.pop(rel, None)
        self._edits.forget(rel)
        return "disk"

    # ---- listing ---------------------------------------------------------------------------

    def list_dir(self, path: str = ".") -> list[DirEntry]:
        """The entries of a directory, sorted by name (hidden and ignored ones included)."""
        rel = self._rel(path)
        folder = self.root / rel if rel != "." else self.root
        if not folder.is_dir():
            if folder.exists():
                raise WorkspaceError(f"{rel} is a file, not a directory; use read_file to read it")
            raise WorkspaceError(self._missing(rel))
        out = []
        for entry in os.scandir(folder):
            is_dir = entry.is_dir()
            size = None
            if not is_dir:
                with contextlib.suppress(OSError):
                    size = entry.stat().st_size
            out.append(DirEntry(entry.name, is_dir, size))
        return sorted(out, key=lambda e: e.name)

    def is_ignored(self, path: str) -> bool:
        """True when git would ignore `path` (or a directory above it), or it is under .git/ or
        .composer/."""
        rel = self._rel(path)
        if rel == ".":
            return False
        parts = rel.split("/")
        if ALWAYS_SKIPPED.intersection(parts):
            return True
        rules = self._ignore.base_rules()
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            is_dir = i < len(parts) or os.path.isdir(self.root / sub)
            if ignored(rules, sub, is_dir):
                return True
            if is_dir:
                self._add_rules(rules, sub + "/")
        return False

    def _add_rules(self, rules: list[tuple[str, pathspec.GitIgnoreSpec]], prefix: str) -> None:
        spec = self._ignore.load(self.root / prefix / ".gitignore")
        if spec is not None:
            rules.append((prefix, spec))

    def iter_files(
        self, subdir: str = ".", *, include_ignored: bool = False, include_hidden: bool = False
    ) -> Iterator[str]:
        """Relative posix paths of the files under `subdir`, sorted, lazily. Skips what git
        ignores (nested .gitignore files and .git/info/exclude included) unless include_ignored,
        dot-files unless include_hidden, and always .git/ and .composer/. Symlinked files that
        stay inside the root are listed; symlinked directories are not followed."""
        rel = self._rel(subdir)
        if rel != "." and not include_ignored and self.is_ignored(rel):
            return
        start = self.root / rel if rel != "." else self.root
        if not start.is_dir():
            raise WorkspaceError(
                f"{rel} is not a directory" if start.exists() else self._missing(rel)
            )
        rules: list[tuple[str, pathspec.GitIgnoreSpec]] = []
        if not include_ignored:
            rules = self._ignore.base_rules()
            parts = [] if rel == "." else rel.split("/")
            for i in range(1, len(parts)):  # the start's own .gitignore is read by _frame
                self._add_rules(rules, "/".join(parts[:i]) + "/")
        prefix = "" if rel == "." else rel + "/"
        stack = [self._frame(prefix, start, rules, include_ignored)]
        while stack:
            prefix, entries, rules = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                continue
            name = entry.name
            if name in ALWAYS_SKIPPED or (not include_hidden and name.startswith(".")):
                continue
            path = prefix + name
            is_dir = entry.is_dir(follow_symlinks=False)
            if rules and ignored(rules, path, is_dir):
                continue
            if is_dir:
                stack.append(self._frame(path + "/", entry.path, rules, include_ignored))
            elif entry.is_symlink():
                real = os.path.realpath(entry.path)
                if os.path.isfile(real) and real.startswith(self._root_str + os.sep):
                    yield path
            elif entry.is_file(follow_symlinks=False):
                yield path

    def _frame(self, prefix: str, folder: str | Path, rules: list, include_ignored: bool) -> tuple:
        """One directory of the walk: (its path prefix, its entries to visit, the rules in force)."""
        try:
            entries = list(os.scandir(folder))
        except OSError:  # unreadable directory: list what can be listed, skip the rest
            entries = []
        if not include_ignored and any(e.name == ".gitignore" for e in entries) and prefix:
            spec = self._ignore.load(Path(folder) / ".gitignore")
            if spec is not None:
                rules = [*rules, (prefix, spec)]
        # Sorting "name/" for directories makes the walk's order the sorted order of full paths.
        entries.sort(key=lambda e: e.name + "/" if e.is_dir(follow_symlinks=False) else e.name)
        return prefix, iter(entries), rules
