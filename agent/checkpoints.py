"""Workspace checkpoints: snapshots of the whole tree that `restore()` returns to byte for byte,
whoever made the changes (edit tools or shell commands). The loop takes one before every batch of
tool calls that may write; rewind restores one.

    store = CheckpointStore(Path("repo"))          # store in repo/.composer/checkpoints/
    cp = store.create("before tool batch 3")       # or: await store.acreate(...)
    cp = store.create("...", buffers=ws.unsaved()) # and the editor's unsaved buffers, by path
    ...                                            # tools edit, `rm -rf`, `mv`, `chmod` ...
    store.diff(cp.id)                              # Changes(added, modified, deleted) vs. now
    store.restore(cp.id)                           # the tree is as it was; a backup is taken first
    store.prune(keep=20)                           # drop old checkpoints, collect unused objects

A store keeps its newest `CheckpointConfig.keep` checkpoints (300): when a new one makes more than
a tenth over that, the oldest go and the objects only they used are deleted. Every store on one
workspace, in any process, shares a lock (agent/store_lock.py): records, restores and diffs hold it
shared, a prune alone, and an automatic prune that finds it held waits for a later checkpoint.

Layout (git-like, content-addressed, nothing shared with the user's .git):
  objects/ab/cdef...  zlib-compressed, named by the sha256 of the uncompressed bytes: file contents
      ("blobs") and directory listings ("trees": JSON rows [name, kind, mode, ref, size, mtime_ns,
      ctime_ns, ino]; kind f|l|d; ref = blob hash | link target | subtree hash). An unchanged
      directory yields the same tree object: a checkpoint of a barely-changed repo is a few objects.
  refs/<id>.json  id, label, created, root tree hash, scan time and counts.
  buffers/<id>.json.z  the editor's unsaved buffers at that checkpoint ({path: text}, zlib), when
      there were any: restore hands them back (`buffers(id)`) for the caller to put in the editor.
  lock            the store's lock (agent/store_lock.py); objects are agent/object_store.py's.

Cost: a file's contents are read only when its (size, mtime_ns, ctime_ns, inode) differ from the
previous checkpoint's record (looked up by path, then by inode, so `mv dir` is free too), or when
its mtime is within `racy_ns` of that scan (git's "racily clean" rule). An unchanged tree costs one
lstat per entry and no reads. Measured with `python bench/checkpoints.py DIR...` on a copy of
20,739 files / 391 MB of the venv's site-packages (torch/include and the pure-Python packages),
on this 2-core machine while a benchmark shared it (two runs):
  first checkpoint 8.2-10.4 s (stores 90 MB), second (unchanged) 0.22-0.52 s, `rm -rf` of a
  7,828-path subtree then restore 1.6-4.9 s (backup checkpoint included), diff vs. now 0.5 s.
On 9,932 files / 46 MB (torch/include and five pure-Python packages; AMD EPYC Zen 4, alone,
2026-12-07), pruning to the newest of 3 checkpoints (7,820 objects deleted) took 0.15-0.16 s, and
the checkpoint after a one-file edit that prunes the store from 331 checkpoints to 300 took 0.18 s (0.11 s without).
`composer-agent checkpoints --keep N` prunes to fewer when the user asks.

What is recorded (a deliberate choice; change it with CheckpointConfig):
  * every regular file, symlink (as a link, never followed) and directory (so empty ones come
    back), with its permission bits, INCLUDING gitignored files: `rm -rf` or `git clean` in the
    terminal deletes `.env`, local data and build inputs that no git-based checkpoint would bring
    back;
  * except `.git` and `.composer` (anywhere), the store itself, and directory names in
    `exclude_dirs` (default: node_modules, virtualenvs and tool caches: big, regenerable, and
    untouched by restore, which neither deletes nor recreates what it does not record);
  * files over `max_file_bytes` are recorded without contents: restore leaves them as they are
    and reports them in `RestoreResult.skipped` when they changed.
Restore does not bring back mtimes (a restored source file gets a new mtime, so build tools see
it changed), hard links (each path gets its own file), owners, or special files (fifos, sockets).
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import hashlib
import json
import os
import secrets
import shutil
import stat
import time
import warnings
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from agent.checkpoint_records import Changes, Checkpoint, PruneResult, RestoreResult, StoredFile
from agent.exceptions import OutsideWorkspaceError
from agent.object_store import CheckpointCorrupt, CheckpointError, ObjectStore, refuse_links
from agent.store_lock import StoreLock, process_lock
from agent.textfile import atomic_write, make_state_dir

ALWAYS_EXCLUDED = frozenset({".git", ".composer"})
"""Names never recorded or touched, at any depth (file or directory)."""

DEFAULT_EXCLUDE_DIRS = frozenset({"node_modules", ".venv", "venv", "__pycache__", ".mypy_cache",
                                  ".pytest_cache", ".ruff_cache", ".tox", ".nox", ".hypothesis"})


@dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
    exclude_dirs: frozenset[str] = DEFAULT_EXCLUDE_DIRS
    """Directory names skipped at any depth: not recorded, never deleted or recreated by restore."""
    max_file_bytes: int = 64 * 2**20
    """Larger files are recorded (size, mode) without their contents."""
    compress_level: int = 1
    """zlib level for stored objects: 1 is fast and already shrinks source text ~3x."""
    racy_ns: int = 2_000_000_000
    """Files modified this close to the previous scan are re-read even when their stat matches."""
    keep: int | None = 300
    """Checkpoints kept when new ones are recorded (pruned a tenth over it, so rarely); None keeps all."""

    def __post_init__(self) -> None:
        if self.keep is not None and self.keep < 1:
            raise ValueError(f"keep must be 1 or more (None keeps every checkpoint), got {self.keep}")


class Entry(NamedTuple):
    kind: str
    """f (file), l (symlink), d (directory)."""
    mode: int
    ref: str
    """Blob hash (f; "" when not stored), link target (l) or tree hash (d)."""
    size: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0
    ino: int = 0


@dataclass
class _Scan:
    store: bool
    cache: dict[str, Entry]
    by_inode: dict[tuple[int, int, int, int], Entry]
    trusted_before_ns: int
    flat: dict[str, Entry] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    new_objects: int = 0
    new_bytes: int = 0


def _join(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


def default_store_dir(workspace_root: Path) -> Path:
    """Where a workspace's checkpoints live unless told otherwise: .composer/checkpoints."""
    return Path(workspace_root).resolve() / ".composer" / "checkpoints"


class CheckpointStore:
    def __init__(self, workspace_root: Path, store_dir: Path | None = None,
                 config: CheckpointConfig | None = None) -> None:
        self.root = Path(workspace_root).resolve()
        if not self.root.is_dir():
            raise ValueError(f"workspace root {self.root} is not a directory")
        if store_dir is None:  # each folder the store writes in is the workspace's own, never a link
            try:
                store_dir = make_state_dir(self.root, "checkpoints")  # objects/, refs/, buffers/, lock
            except OutsideWorkspaceError as err:
                raise CheckpointError(str(err)) from None
        self.store_dir = Path(store_dir).resolve()
        self.config = config or CheckpointConfig()
        self._objects = ObjectStore(self.store_dir / "objects", self.config.compress_level)
        self._meta = self.store_dir / "refs"
        self._meta.mkdir(parents=True, exist_ok=True)
        self._lock = process_lock(self.store_dir)
        self._store_lock = StoreLock(self.store_dir / "lock")
        self._trees: dict[str, dict[str, Entry]] = {}
        self._cache: tuple[str, int, dict[str, Entry]] | None = None
        """(checkpoint id, scan start, flat manifest) of the newest checkpoint: the stat cache."""

    # ---- public API -------------------------------------------------------------------------

    def create(self, label: str = "", buffers: Mapping[str, str] | None = None) -> Checkpoint:
        """Records the workspace as it is now, and `buffers` (an editor's unsaved texts by
        relative path) beside it, and returns the new checkpoint (published in refs/ once all its
        objects are whole: a full disk raises CheckpointError, losing nothing). Then prunes to
        `config.keep` when the store holds a tenth more."""
        with self._lock:
            cp = self._record(label, buffers or {})
            keep = self.config.keep
            if keep is not None and sum(1 for _ in self._meta.glob("*.json")) > keep + max(1, keep // 10):
                try:
                    self._prune(keep, wait=False)
                except (CheckpointError, OSError, ValueError) as err:  # the new checkpoint is whole
                    warnings.warn(f"checkpoint {cp.id} recorded, but the store was not pruned: {err}", stacklevel=2)
            return cp

    def _record(self, label: str, buffers: Mapping[str, str]) -> Checkpoint:
        refuse_links(self.store_dir)  # before the lock file is opened in it
        with self._writing("record a checkpoint", "the checkpoints before it are intact"), self._store_lock.shared():
            started = time.perf_counter()
            scanned_ns = time.time_ns()
            scan, root = self._scan(store=True)
            cp = Checkpoint(
                id=f"{scanned_ns // 1000:016d}-{secrets.token_hex(3)}", label=label,
                created=scanned_ns / 1e9, root=root, scanned_ns=scanned_ns, files=scan.files,
                bytes=scan.bytes, new_objects=scan.new_objects, new_bytes=scan.new_bytes,
                seconds=round(time.perf_counter() - started, 4), skipped=tuple(scan.skipped))
            if buffers:
                atomic_write(self._buffer_file(cp.id), zlib.compress(json.dumps(dict(buffers)).encode()),
                             mode=0o600, durable=False)
            atomic_write(self._meta / f"{cp.id}.json", json.dumps(cp.__dict__).encode(), mode=0o644, durable=False)
            self._cache = (cp.id, scanned_ns, scan.flat)
            return cp

    def buffers(self, checkpoint_id: str) -> dict[str, str]:
        """The editor's unsaved buffers recorded with the checkpoint ({} when none were)."""
        self.get(checkpoint_id)  # raises for unknown ids
        try:
            data = self._buffer_file(checkpoint_id).read_bytes()
        except FileNotFoundError:
            return {}
        try:
            buffers = json.loads(zlib.decompress(data))
        except (zlib.error, ValueError) as err:
            raise CheckpointCorrupt(f"checkpoint {checkpoint_id}'s unsaved buffers are damaged: {err}") from None
        if not isinstance(buffers, dict) or not all(isinstance(t, str) for t in buffers.values()):
            raise CheckpointCorrupt(f"checkpoint {checkpoint_id}'s unsaved buffers are not {{path: text}}")
        return buffers

    def _buffer_file(self, checkpoint_id: str) -> Path:
        return self.store_dir / "buffers" / f"{checkpoint_id}.json.z"

    def create_if_empty(self, label: str = "") -> Checkpoint | None:
        """create(), unless the store holds a checkpoint by the time this one would start."""
        with self._lock:
            return None if not self.is_empty() else self.create(label)

    def is_empty(self) -> bool:
        return next(self._meta.glob("*.json"), None) is None

    def list(self) -> list[Checkpoint]:
        """All checkpoints, oldest first; a record that cannot be read is skipped with a warning."""
        found = []
        for path in self._meta.glob("*.json"):
            try:
                found.append(_load_checkpoint(path))
            except FileNotFoundError:
                continue  # a prune deleted it since the listing
            except CheckpointCorrupt as err:
                warnings.warn(str(err), stacklevel=2)
        return sorted(found, key=lambda cp: (cp.created, cp.id))

    def get(self, checkpoint_id: str) -> Checkpoint:
        path = self._meta / f"{checkpoint_id}.json"
        if "/" in checkpoint_id or not path.is_file():
            known = ", ".join(cp.id for cp in self.list()[-5:]) or "none"
            raise CheckpointError(f"no checkpoint {checkpoint_id!r} in {self.store_dir} (latest: {known}); "
                                  "`composer-agent checkpoints --list` shows them all")
        return _load_checkpoint(path)

    def diff(self, a: str, b: str | None = None) -> Changes:
        """What changed from checkpoint `a` to checkpoint `b` (default: the workspace now)."""
        with self._lock, self._store_lock.shared():
            return _changes(self._diff_trees(self.get(a).root, self._root_of(b)))

    def stored_file(self, checkpoint_id: str, path: str) -> StoredFile | None:
        """What the checkpoint held at `path` (relative, "/"-separated): its kind, mode and, for a
        regular file recorded with contents, its bytes; None when it held nothing there."""
        with self._lock, self._store_lock.shared():
            digest, (*folders, name) = self.get(checkpoint_id).root, path.split("/")
            for folder in folders:
                entry = self._tree(digest).get(folder)
                if entry is None or entry.kind != "d":
                    return None
                digest = entry.ref
            entry = self._tree(digest).get(name)
            if entry is None:
                return None
            data = self._objects.read(entry.ref) if entry.kind == "f" and entry.ref else None
            return StoredFile(entry.kind, entry.mode, data)

    def unified_diff(self, a: str, b: str | None = None, context: int = 3) -> str:
        """A git-style unified diff of the files changed from `a` to `b` (default: now)."""
        chunks = []
        with self._lock, self._store_lock.shared():
            for path, old, new in list(self._diff_trees(self.get(a).root, self._root_of(b))):
                if (old is None or old.kind == "d") and (new is None or new.kind == "d"):
                    continue
                chunks.append(self._file_diff(path, old, new, b is None, context))
        return "".join(chunks)

    def restore(self, checkpoint_id: str, backup: bool = True,
                buffers: Mapping[str, str] | None = None) -> RestoreResult:
        """Returns the disk to the checkpoint: rewrites changed files (atomically), recreates
        deleted ones, deletes what was created since, restores links, directories and modes.
        Every needed object is verified before anything is touched. The backup records `buffers`
        (the unsaved ones now); putting the checkpoint's own back in the editor is the caller's."""
        with self._lock, self._store_lock.shared():
            target = self.get(checkpoint_id)
            if backup:
                saved = self.create(f"before restore of {checkpoint_id}", buffers)
                current = saved.root
            else:
                saved, current = None, self._scan(store=False)[1]
            changes = list(self._diff_trees(current, target.root))
            for _, old, new in changes:
                if new is not None and new.kind == "f" and new.ref and not _same_content(old, new):
                    self._objects.read(new.ref)  # raises CheckpointCorrupt before anything changes
            kept = f"checkpoint {saved.id} holds it as it was before" if saved else "no backup was taken"
            with self._writing(f"restore {checkpoint_id}", f"the workspace is partly restored; {kept}"):
                skipped = self._apply(changes)
            return RestoreResult(target, _changes(changes), saved, tuple(skipped))

    def delete(self, checkpoint_id: str) -> None:
        """Forgets one checkpoint (its objects go at the next prune)."""
        with self._lock:
            self.get(checkpoint_id)  # raises for unknown ids
            refuse_links(self.store_dir)
            self._drop_ref(checkpoint_id)

    def _drop_ref(self, checkpoint_id: str) -> None:
        (self._meta / f"{checkpoint_id}.json").unlink(missing_ok=True)  # another store may have
        self._buffer_file(checkpoint_id).unlink(missing_ok=True)
        if self._cache is not None and self._cache[0] == checkpoint_id:
            self._cache = None

    def prune(self, keep: int) -> PruneResult:
        """Keeps the `keep` newest checkpoints and deletes objects no kept checkpoint uses, once
        no other store on this workspace is recording, restoring or diffing."""
        if keep < 0:
            raise ValueError(f"keep must be >= 0, got {keep}")
        pruned = self._prune(keep, wait=True)
        assert pruned is not None
        return pruned

    def _prune(self, keep: int, wait: bool) -> PruneResult | None:
        """The prune, or None when `wait` is False and another holds the store's lock."""
        refuse_links(self.store_dir)
        with self._lock, self._store_lock.exclusive(wait) as held:
            if not held:
                return None
            checkpoints = self.list()
            doomed = checkpoints[: max(0, len(checkpoints) - keep)]
            live: set[str] = set()
            for cp in checkpoints[len(doomed):]:
                self._mark(cp.root, live)  # first: a damaged store raises with nothing deleted
            for cp in doomed:
                self._drop_ref(cp.id)
            kept = {cp.id for cp in checkpoints[len(doomed):]}
            for orphan in (self.store_dir / "buffers").glob("*.json.z"):  # a record cut short left it
                if orphan.name.removesuffix(".json.z") not in kept:
                    orphan.unlink(missing_ok=True)
            objects, freed = self._objects.sweep(live)
            self._trees = {h: t for h, t in self._trees.items() if h in live}
            return PruneResult(len(doomed), objects, freed)

    async def acreate(self, label: str = "", buffers: Mapping[str, str] | None = None) -> Checkpoint:
        return await asyncio.to_thread(self.create, label, buffers)  # the async forms run in a thread

    async def arestore(self, checkpoint_id: str, backup: bool = True,
                       buffers: Mapping[str, str] | None = None) -> RestoreResult:
        return await asyncio.to_thread(self.restore, checkpoint_id, backup, buffers)

    async def adiff(self, a: str, b: str | None = None) -> Changes:
        return await asyncio.to_thread(self.diff, a, b)

    @contextlib.contextmanager
    def _writing(self, what: str, kept: str) -> Iterator[None]:
        """A failed write (ENOSPC, EDQUOT, EIO) as a CheckpointError that says what was kept."""
        try:
            yield
        except OSError as err:
            raise CheckpointError(f"could not {what} in {self.store_dir}: {err}; {kept}") from err

    # ---- scanning -----------------------------------------------------------------------------

    def _scan(self, store: bool) -> tuple[_Scan, str]:
        if self._cache is not None and not (self._meta / f"{self._cache[0]}.json").exists():
            self._cache = None  # another store pruned it: the objects it names may be gone
        if self._cache is None:
            latest = self.list()[-1:]
            try:
                if latest:
                    flat = dict(self._walk_tree(latest[0].root, ""))
                    self._cache = (latest[0].id, latest[0].scanned_ns, flat)
            except CheckpointCorrupt as err:  # a damaged store must not block new checkpoints
                warnings.warn(f"not reusing checkpoint {latest[0].id}: {err}", stacklevel=3)
        cache, trusted_before = ({}, 0) if self._cache is None else (
            self._cache[2], self._cache[1] - self.config.racy_ns)
        by_inode = {(e.size, e.mtime_ns, e.ctime_ns, e.ino): e for e in cache.values() if e.kind == "f"}
        scan = _Scan(store, cache, by_inode, trusted_before)
        root = self._scan_dir("", str(self.root), scan)
        return scan, root

    def _scan_dir(self, rel: str, abspath: str, scan: _Scan) -> str:
        rows = []
        try:
            with os.scandir(abspath) as it:
                dirents = sorted(it, key=lambda d: d.name)
        except OSError:
            scan.skipped.append(rel + "/")
            dirents = []
        for dirent in dirents:
            entry = self._scan_entry(_join(rel, dirent.name), dirent, scan)
            if entry is not None:
                rows.append([dirent.name, *entry])
        return self._put_tree(rows, scan)

    def _scan_entry(self, relpath: str, dirent: os.DirEntry, scan: _Scan) -> Entry | None:
        if dirent.name in ALWAYS_EXCLUDED or dirent.path == str(self.store_dir):
            return None
        try:
            st = dirent.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                if dirent.name in self.config.exclude_dirs:
                    return None
                entry = Entry("d", stat.S_IMODE(st.st_mode), self._scan_dir(relpath, dirent.path, scan))
            elif stat.S_ISLNK(st.st_mode):
                entry = Entry("l", 0, os.readlink(dirent.path))
            elif stat.S_ISREG(st.st_mode):
                entry = self._file_entry(relpath, dirent.path, st, scan)
            else:
                scan.skipped.append(relpath)
                return None
        except FileNotFoundError:  # deleted while we walked
            return None
        scan.flat[relpath] = entry
        return entry

    def _file_entry(self, relpath: str, abspath: str, st: os.stat_result, scan: _Scan) -> Entry:
        key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        mode = stat.S_IMODE(st.st_mode)
        scan.files += 1
        scan.bytes += st.st_size
        prev = scan.cache.get(relpath)
        if prev is None or (prev.size, prev.mtime_ns, prev.ctime_ns, prev.ino) != key:
            prev = scan.by_inode.get(key)
        if prev is not None and st.st_mtime_ns < scan.trusted_before_ns:
            if not prev.ref:
                scan.skipped.append(relpath)
            return Entry("f", mode, prev.ref, *key)
        data = None
        if st.st_size <= self.config.max_file_bytes:
            with contextlib.suppress(PermissionError), open(abspath, "rb") as f:
                data = f.read()
        if data is None:  # too large or unreadable: recorded without contents
            scan.skipped.append(relpath)
            return Entry("f", mode, "", *key)
        digest = hashlib.sha256(data).hexdigest()
        if scan.store:
            self._put_object(digest, data, scan)
        if len(data) != st.st_size:  # changed under us: never trust this stat again
            key = (len(data), 0, 0, 0)
        return Entry("f", mode, digest, *key)

    # ---- objects ------------------------------------------------------------------------------

    def _put_object(self, digest: str, data: bytes, scan: _Scan) -> None:
        stored = self._objects.put(digest, data)
        scan.new_objects += stored > 0
        scan.new_bytes += stored

    def _put_tree(self, rows: list[list], scan: _Scan) -> str:
        data = json.dumps(rows, separators=(",", ":")).encode()
        digest = hashlib.sha256(data).hexdigest()
        if scan.store:
            self._put_object(digest, data, scan)
        self._trees[digest] = {row[0]: Entry(*row[1:]) for row in rows}
        return digest

    def _tree(self, digest: str) -> dict[str, Entry]:
        tree = self._trees.get(digest)
        if tree is None:
            rows = json.loads(self._objects.read(digest))
            tree = self._trees[digest] = {row[0]: Entry(*row[1:]) for row in rows}
        return tree

    def _walk_tree(self, digest: str, prefix: str) -> Iterator[tuple[str, Entry]]:
        for name, entry in self._tree(digest).items():
            path = _join(prefix, name)
            yield path, entry
            if entry.kind == "d":
                yield from self._walk_tree(entry.ref, path)

    def _mark(self, digest: str, live: set[str]) -> None:
        if digest in live:
            return
        live.add(digest)
        for entry in self._tree(digest).values():
            if entry.kind == "d":
                self._mark(entry.ref, live)
            elif entry.kind == "f" and entry.ref:
                live.add(entry.ref)

    def _root_of(self, checkpoint_id: str | None) -> str:
        return self._scan(store=False)[1] if checkpoint_id is None else self.get(checkpoint_id).root

    def _diff_trees(self, a: str, b: str, prefix: str = "") -> Iterator[tuple[str, Entry | None, Entry | None]]:
        """Yields (path, entry in a, entry in b) for every path that differs; identical subtrees
        are skipped without being read."""
        if a == b:
            return
        ta, tb = self._tree(a), self._tree(b)
        for name in sorted(ta.keys() | tb.keys()):
            old, new, path = ta.get(name), tb.get(name), _join(prefix, name)
            if old is not None and new is not None and old[:3] == new[:3]:  # kind, mode, ref
                continue
            if old is not None and new is not None and old.kind == new.kind == "d":
                if old.mode != new.mode:
                    yield path, old, new
                yield from self._diff_trees(old.ref, new.ref, path)
                continue
            yield path, old, new
            if old is not None and old.kind == "d":
                yield from ((p, e, None) for p, e in self._walk_tree(old.ref, path))
            if new is not None and new.kind == "d":
                yield from ((p, None, e) for p, e in self._walk_tree(new.ref, path))

    # ---- restoring ----------------------------------------------------------------------------

    def _apply(self, changes: list[tuple[str, Entry | None, Entry | None]]) -> list[str]:
        """Deletions first (a removed directory takes its subtree), then creations in path order
        (parents first), then directory modes deepest first (a read-only directory is filled
        before it is locked)."""
        skipped: list[str] = []
        removed: list[str] = []
        for path, old, new in changes:
            if old is None or (new is not None and old.kind == new.kind):
                continue
            if any(path.startswith(r + "/") for r in removed[-1:]):
                continue
            target = self.root / path
            if old.kind == "d" and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
                removed.append(path)
            else:
                with contextlib.suppress(FileNotFoundError):
                    target.unlink()
        dir_modes = []
        for path, old, new in changes:
            if new is None:
                continue
            target = self.root / path
            if new.kind == "d":
                target.mkdir(exist_ok=True)
                dir_modes.append((target, new.mode))
            elif new.kind == "l":
                tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
                os.symlink(new.ref, tmp)
                os.replace(tmp, target)
            elif _same_content(old, new):
                os.chmod(target, new.mode)
            elif not new.ref:
                if not target.exists():
                    skipped.append(path)
            else:
                atomic_write(target, self._objects.read(new.ref), mode=new.mode, durable=False)
        for target, mode in reversed(dir_modes):
            os.chmod(target, mode)
        return skipped

    # ---- unified diff -------------------------------------------------------------------------

    def _file_diff(self, path: str, old: Entry | None, new: Entry | None, new_on_disk: bool,
                   context: int) -> str:
        before = self._side(old, path, on_disk=False)
        after = self._side(new, path, on_disk=new_on_disk)
        head = f"diff --git a/{path} b/{path}\n"
        if old is not None and new is not None and old.mode != new.mode and old.kind == new.kind:
            head += f"old mode {old.mode:o}\nnew mode {new.mode:o}\n"
        if before is None or after is None:
            return head + f"Binary files a/{path} and b/{path} differ\n"
        lines = difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True),
            "/dev/null" if old is None or old.kind == "d" else f"a/{path}",
            "/dev/null" if new is None or new.kind == "d" else f"b/{path}", n=context)
        return head + "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                              for line in lines)

    def _side(self, entry: Entry | None, path: str, on_disk: bool) -> str | None:
        """The text of one side of a diff ("" when absent, a link's target), None when binary."""
        if entry is None or entry.kind == "d":
            return ""
        if entry.kind == "l":
            return entry.ref + "\n"
        if not entry.ref:
            return None
        try:
            data = (self.root / path).read_bytes() if on_disk else self._objects.read(entry.ref)
            return None if b"\0" in data else data.decode()
        except (UnicodeDecodeError, OSError):
            return None


def _load_checkpoint(path: Path) -> Checkpoint:
    try:
        data = json.loads(path.read_text())
        return Checkpoint(**{**data, "skipped": tuple(data.get("skipped", ()))})
    except (ValueError, TypeError, AttributeError) as err:
        raise CheckpointCorrupt(f"checkpoint record {path} cannot be read ({err}); delete it") from None


def _same_content(old: Entry | None, new: Entry) -> bool:
    return old is not None and old.kind == new.kind == "f" and old.ref == new.ref != ""


def _changes(items: Iterator | list) -> Changes:
    added, modified, deleted = [], [], []
    for path, old, new in items:
        shown = path + "/" if (new or old).kind == "d" and (old is None or new is None or old.kind == new.kind) else path
        (added if old is None else deleted if new is None else modified).append(shown)
    return Changes(tuple(added), tuple(modified), tuple(deleted))

