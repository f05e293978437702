"""The checkpoint store's objects: file contents and directory listings, each zlib-compressed in a
file named by the sha256 of its uncompressed bytes (`ab/cdef...`), so equal contents are stored
once. Reads verify the hash; writes are atomic (agent/textfile.py), so a crash leaves whole
objects or none.

    objects = ObjectStore(store_dir / "objects", compress_level=1)
    objects.put(digest, data)            # compressed bytes stored, 0 when it was there already
    objects.read(digest)                 # the bytes, or CheckpointCorrupt
    objects.sweep(live)                  # deletes every object not in `live`: (count, bytes)

agent/checkpoints.py builds checkpoints on it and decides what is live.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import zlib
from pathlib import Path

from agent.textfile import atomic_write, refuse_link


class CheckpointError(Exception):
    """A checkpoint that does not exist or cannot be used."""


class CheckpointCorrupt(CheckpointError):
    """An object in the store is missing or does not match its hash."""


class ObjectStore:
    def __init__(self, directory: Path, compress_level: int) -> None:
        self.directory = directory
        self.compress_level = compress_level
        directory.mkdir(parents=True, exist_ok=True)
        for entry in os.scandir(directory):  # 256 folders at most
            refuse_link(Path(entry.path), CheckpointError)

    def path(self, digest: str) -> Path:
        return self.directory / digest[:2] / digest[2:]

    def put(self, digest: str, data: bytes) -> int:
        """Stores `data` under its `digest`; returns the compressed size, 0 when already stored."""
        path = self.path(digest)
        if path.exists():
            return 0
        refuse_link(path.parent, CheckpointError)  # a fan-out folder linked since the store opened
        packed = zlib.compress(data, self.compress_level)
        atomic_write(path, packed, mode=0o644, durable=False)
        return len(packed)

    def read(self, digest: str) -> bytes:
        path = self.path(digest)
        try:
            data = zlib.decompress(path.read_bytes())
        except FileNotFoundError:
            raise CheckpointCorrupt(
                f"object {digest} is missing from {self.directory}; the checkpoint that needs it "
                "cannot be restored (was the store pruned or edited by hand?)") from None
        except zlib.error as err:
            raise CheckpointCorrupt(f"object {path} is corrupt ({err}); delete the checkpoints "
                                    "that use it or restore an older one") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise CheckpointCorrupt(f"object {path} does not match its hash {digest}: the store is "
                                    "corrupt; delete the checkpoints that use it or restore an older one")
        return data

    def sweep(self, live: set[str]) -> tuple[int, int]:
        """Deletes every object (and leftover temporary file) not in `live`, then the emptied
        folders; returns how many files went and the bytes they held. The caller holds the
        store's lock alone, so no checkpoint is being recorded."""
        count = freed = 0
        for folder in os.scandir(self.directory):
            if not folder.is_dir(follow_symlinks=False):
                continue  # never into a link: what it points at is not the store's
            for entry in os.scandir(folder.path):
                if entry.is_dir(follow_symlinks=False):
                    continue  # not an object: nothing the store wrote
                if folder.name + entry.name not in live:
                    freed += entry.stat(follow_symlinks=False).st_size
                    os.unlink(entry.path)  # a link itself, not what it points at
                    count += 1
            with contextlib.suppress(OSError):
                os.rmdir(folder.path)  # only when empty
        return count, freed


def refuse_links(store_dir: Path) -> None:
    """Before the store writes or deletes: its folder, or one in it, may have become a link since
    it opened (`store_dir` was resolved then), for example by a checkout."""
    if (now := os.path.realpath(store_dir)) != str(store_dir):
        raise CheckpointError(f"{store_dir} leads to {now} now, through a symbolic link; the checkpoint "
                              "store writes and deletes nothing outside its folder: remove the link")
    for folder in ("refs", "buffers", "objects"):
        refuse_link(store_dir / folder, CheckpointError)
