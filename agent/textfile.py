"""How a file's bytes become the text the agent's tools see, and back: encoding (UTF-8, UTF-8 or
UTF-16 with BOM, latin-1 fallback), CRLF line breaks shown as \\n and restored on write, binary
detection, and atomic writes. agent/workspace.py reads and writes every file through these.

    text, fmt = decode_bytes(data)          # None when the bytes are binary
    atomic_write(path, fmt.encode(text, rel))
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agent.exceptions import OutsideWorkspaceError, WorkspaceError

SNIFF_BYTES = 8192
"""How much of a file's head decides whether it is binary (git looks at the same amount)."""

_BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
_CONTROL = bytes(range(0x00, 0x08)) + bytes(range(0x0E, 0x1A)) + bytes(range(0x1C, 0x20))
_ANY_NEWLINE = re.compile(r"\r?\n")

# The process umask, read once at import (os.umask can only be read by setting it, which is not
# thread-safe later on). New files get 0o666 & ~umask, as open() would give them.
_UMASK = os.umask(0o022)
os.umask(_UMASK)


@dataclass(frozen=True)
class TextFormat:
    """How a file's text is stored, so a write can put back exactly what a read took off."""

    encoding: str = "utf-8"
    """A Python codec name: utf-8, utf-16-le, utf-16-be or latin-1."""
    bom: bytes = b""
    newline: str | None = "\n"
    """"\\n", "\\r\\n" (the text is shown with \\n and written back with \\r\\n) or None for
    mixed line breaks (the text is kept verbatim)."""

    @property
    def note(self) -> str | None:
        if self.encoding == "latin-1":
            return "not valid UTF-8, so it was decoded as latin-1; writes keep latin-1"
        return None

    def encode(self, text: str, rel: str) -> bytes:
        if self.newline == "\r\n":
            text = _ANY_NEWLINE.sub("\r\n", text)
        try:
            return self.bom + text.encode(self.encoding)
        except UnicodeEncodeError as err:
            line = text.count("\n", 0, err.start) + 1
            raise WorkspaceError(
                f"{rel} is stored as {self.encoding}, which cannot hold {text[err.start]!r} "
                f"(line {line}); use characters {self.encoding} can encode (or an escape)"
            ) from None


def is_binary(data: bytes) -> bool:
    """True for data that is not text: a NUL in the head, or mostly control bytes."""
    head = data[:SNIFF_BYTES]
    if b"\x00" in head:
        return True
    return bool(head) and len(head.translate(None, _CONTROL)) < 0.7 * len(head)


def decode_bytes(data: bytes) -> tuple[str, TextFormat] | None:
    """Decodes a file's bytes to the text tools see plus its TextFormat; None when binary."""
    raw = None
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            with contextlib.suppress(UnicodeDecodeError):
                raw, fmt = data[len(bom) :].decode(encoding), TextFormat(encoding, bom)
            break
    if raw is None:
        if is_binary(data):
            return None
        try:
            raw, fmt = data.decode("utf-8"), TextFormat()
        except UnicodeDecodeError:
            raw, fmt = data.decode("latin-1"), TextFormat("latin-1")
    newline = newline_style(raw)
    if newline == "\r\n":
        raw = raw.replace("\r\n", "\n")
    return raw, TextFormat(fmt.encoding, fmt.bom, newline)


def newline_style(text: str) -> str | None:
    """ "\\r\\n" when every line break is CRLF, "\\n" when none is, None when mixed."""
    crlf = text.count("\r\n")
    if crlf == 0:
        return "\n"
    # "\r\r\n" would read as "\r\n" and come back as one CRLF: treat such files as mixed.
    return "\r\n" if crlf == text.count("\n") and "\r\r\n" not in text else None


def restore_newlines(view: str, newline: str | None) -> str:
    """The text as stored: `view` (plain \\n) with CRLFs put back when the file uses them."""
    return _ANY_NEWLINE.sub("\r\n", view) if newline == "\r\n" else view


def make_state_dir(root: Path, *parts: str) -> Path:
    """The workspace's `.composer/` (checkpoints, the codebase index, editor edits), or the folder
    `parts` names in it, made where missing; `.composer` gets a `.gitignore` of `*` so that git never
    lists what Composer keeps there. A repository can ship `.composer`, or anything in it, as a
    symbolic link, which would have Composer write (and prune) its state wherever the link points:
    so each level must be a folder of its own, and so must be what the folder `parts` names holds
    (a store's or an index's files and folders), else OutsideWorkspaceError names the link."""
    state = level = Path(root) / ".composer"
    for name in ("", *parts):
        level = level / name if name else level
        refuse_link(level)
        level.mkdir(exist_ok=True)
    if not os.path.lexists(state / ".gitignore"):
        (state / ".gitignore").write_text("*\n")
    if parts:
        for entry in os.scandir(level):
            refuse_link(Path(entry.path))
    return level


def refuse_link(path: Path, error: type[Exception] = OutsideWorkspaceError) -> None:
    """`error` when `path`, something of Composer's state, is a symbolic link (make_state_dir)."""
    if path.is_symlink():
        raise error(f"{path} is a symbolic link (to {os.readlink(path)}); Composer keeps its state inside "
                    "the workspace and follows no link out of it: remove the link, and Composer makes what it needs")


def atomic_write(target: Path, data: bytes, *, mode: int | None = None, durable: bool = True) -> None:
    """Replaces `target` with `data` all at once: temp file beside it, fsync, os.replace. Keeps
    the old file's mode unless given one; creates missing parent directories. Leaves no temp file
    on failure. `durable=False` skips the fsync: the checkpoint store writes thousands of files a
    checkpoint, whole or not at all, and a crash only loses the newest checkpoint."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = target.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o666 & ~_UMASK
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
