"""What the checkpoint store (agent/checkpoints.py) hands back: a checkpoint's record, the paths
that differ between two trees, one path as a checkpoint holds it, and what a restore or a prune
did."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Checkpoint:
    id: str
    label: str
    created: float
    """Unix time."""
    root: str
    """Hash of the root tree."""
    scanned_ns: int = 0
    files: int = 0
    bytes: int = 0
    new_objects: int = 0
    new_bytes: int = 0
    """Compressed bytes this checkpoint added to the store."""
    seconds: float = 0.0
    skipped: tuple[str, ...] = ()
    """Paths recorded without contents (too large, unreadable) or not at all (fifos, sockets)."""


@dataclass(frozen=True)
class Changes:
    """Paths (relative, "/"-separated; directories end with "/") that differ between two trees."""

    added: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.modified or self.deleted)

    def to_dict(self) -> dict[str, list[str]]:
        return {"added": list(self.added), "modified": list(self.modified), "deleted": list(self.deleted)}


@dataclass(frozen=True)
class RestoreResult:
    checkpoint: Checkpoint
    changes: Changes
    """What restoring changed, from the state before the restore to the checkpoint."""
    backup: Checkpoint | None
    """The state just before the restore (restore it to undo the restore)."""
    skipped: tuple[str, ...] = ()


@dataclass(frozen=True)
class PruneResult:
    checkpoints: int
    objects: int
    bytes: int
    """Checkpoints deleted, objects deleted and the bytes they held."""


@dataclass(frozen=True)
class StoredFile:
    kind: str
    """f (file), l (symlink), d (directory)."""
    mode: int
    data: bytes | None
    """A regular file's bytes; None for links, directories and files recorded without contents."""
