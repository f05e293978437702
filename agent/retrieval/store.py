"""One shard of the codebase index: a SQLite database (files, chunks, FTS5 trigram text, the
chunk-hash -> vector-row cache, meta) beside an append-only float32 vector matrix.

    shard = Shard.open(index_dir, name="hashing/256", dim=256)       # raises StaleIndexError
    shard = Shard.memory(name, dim)                                  # the read-only overlay
    rows = shard.cached_rows([chunk_hash, ...])                      # vectors already embedded
    with lock: shard.write(files=[...], deletes=[...], new_vectors=V) # one transaction
    shard.snapshot                                                    # what queries read

Layout of an index directory (`.composer/index`):
  meta.sqlite           schema, embedder name and dim, committed row count, generation
  vectors.<gen>.f32     rows x dim float32, no header; rows past the committed count are the tail
                        of an interrupted write and are overwritten by the next one
  hnsw.<gen>.usearch    HNSW graph (only above the HNSW threshold; see vectors.py)

Vectors are content-addressed: a chunk's hash covers its kind, symbol and text (not its path), so
a renamed or moved file, or text that comes back after an edit, reuses its rows. A definition's
chunk also has a name vector (`Chunk.name_text`, addressed by name_hash) in the same matrix:
`chunks.nrow`, -1 for chunks without one. Rows that no chunk references stay as cache until they
outnumber the live ones (then `compact`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.retrieval.chunking import Chunk
from agent.retrieval.exceptions import RetrievalError, StaleIndexError

SCHEMA_VERSION = 2
"""2: name vectors (chunks.nrow)."""
DB_NAME = "meta.sqlite"
_SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
CREATE TABLE files(id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL, hash TEXT NOT NULL,
                   mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL);
CREATE TABLE chunks(id INTEGER PRIMARY KEY, file_id INTEGER NOT NULL, start_line INTEGER NOT NULL,
                    end_line INTEGER NOT NULL, kind TEXT NOT NULL, symbol TEXT, tail TEXT,
                    squashed TEXT, hash BLOB NOT NULL, vrow INTEGER NOT NULL, nrow INTEGER NOT NULL);
CREATE INDEX chunks_file ON chunks(file_id);
CREATE INDEX chunks_symbol ON chunks(symbol);
CREATE INDEX chunks_tail ON chunks(tail);
CREATE INDEX chunks_squashed ON chunks(squashed);
CREATE TABLE vectors(hash BLOB PRIMARY KEY, vrow INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE dirs(path TEXT PRIMARY KEY, hash TEXT NOT NULL) WITHOUT ROWID;
CREATE VIRTUAL TABLE fts USING fts5(text, path, symbol, tokenize='trigram');
"""


def chunk_hash(chunk: Chunk) -> bytes:
    """The content address of a chunk's vector: kind, symbol and text, not the path."""
    key = f"{chunk.kind}\0{chunk.symbol or ''}\0{chunk.text}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(key, digest_size=16).digest()


def name_hash(name_text: str) -> bytes:
    """The content address of a name vector (a key space apart from chunk_hash's)."""
    return hashlib.blake2b(f"name\0{name_text}".encode("utf-8", "surrogatepass"), digest_size=16).digest()


def symbol_keys(symbol: str | None) -> tuple[str | None, str | None]:
    """(tail, squashed): the last dotted part lower-cased, and that without `_` (so
    `parse_header_links` and `parseHeaderLinks` both squash to `parseheaderlinks`)."""
    if not symbol:
        return None, None
    tail = symbol.rsplit(".", 1)[-1].lower()
    return tail, tail.replace("_", "")


@dataclass(frozen=True)
class FileRecord:
    path: str
    hash: str
    mtime_ns: int
    """-1 when the indexed text was not read from disk (an unsaved editor buffer)."""
    size: int


@dataclass
class FileUpdate:
    """One file's new contents for `Shard.write`: its record, its chunks, each chunk's hash,
    vector row and name vector row (-1: none), with each name's hash (None: none). Rows >= the
    committed count index into the batch's new vectors."""

    record: FileRecord
    chunks: list[Chunk]
    hashes: list[bytes]
    rows: list[int]
    name_hashes: list[bytes | None]
    name_rows: list[int]


@dataclass(frozen=True)
class Snapshot:
    """The committed state queries read: live chunks and the vector matrix. Immutable; a
    commit swaps in a new one, so a query never sees half a write."""

    ids: np.ndarray
    """int64 chunk ids of the live chunks, ascending."""
    rows: np.ndarray
    """int64 vector row of each live chunk."""
    name_rows: np.ndarray
    """int64 name vector row of each live chunk, -1 where it has none."""
    file_of: np.ndarray
    """int32 index into `paths` of each live chunk."""
    paths: list[str]
    matrix: np.ndarray
    """(n_rows, dim) float32; rows in neither `rows` nor `name_rows` are cache (or the HNSW's
    dead keys)."""

    @property
    def size(self) -> int:
        return len(self.ids)


class Shard:
    """A SQLite connection plus the vector matrix; every method must be called under the owner's
    lock (the connection is shared between the indexing thread and queries)."""

    def __init__(self, db: sqlite3.Connection, directory: Path | None, dim: int, read_only: bool) -> None:
        self.db, self.directory, self.dim, self.read_only = db, directory, dim, read_only
        self.generation = int(self.meta("generation") or 0)
        self.n_rows = int(self.meta("rows") or 0)
        self._memory = np.zeros((0, dim), np.float32)  # the in-memory shard's rows
        self._check_vectors()
        self.snapshot = self._load_snapshot()

    # ---- opening -------------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, *, name: str, dim: int, read_only: bool = False) -> Shard:
        """Opens (or, writable and empty, creates) the shard in `directory`. Raises
        StaleIndexError naming the reason when the files are corrupt or were built for another
        schema or embedder; the caller rebuilds."""
        path = directory / DB_NAME
        if read_only and not path.is_file():
            raise StaleIndexError(f"no index at {path}")
        if read_only:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        else:
            directory.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(path, check_same_thread=False)
        try:
            fresh = not db.execute("SELECT name FROM sqlite_master WHERE name='meta'").fetchone()
            if fresh and read_only:
                raise StaleIndexError(f"{path} holds no index")
            if fresh:
                _create(db, name, dim)
            _check_meta(db, name, dim)
            return cls(db, directory, dim, read_only)
        except sqlite3.OperationalError as err:
            db.close()
            if "locked" in str(err):  # another process is writing: never a reason to rebuild
                raise RetrievalError(f"{path} is locked by another process ({err}); one process "
                                     "writes an index, others open it with read_only=True") from err
            raise StaleIndexError(f"{path} is corrupt ({err})") from err
        except sqlite3.DatabaseError as err:
            db.close()
            raise StaleIndexError(f"{path} is corrupt ({err})") from err
        except StaleIndexError:
            db.close()
            raise

    @classmethod
    def memory(cls, name: str, dim: int) -> Shard:
        db = sqlite3.connect(":memory:", check_same_thread=False)
        _create(db, name, dim)
        return cls(db, None, dim, False)

    def _check_vectors(self) -> None:
        path = self.vector_path()
        have = path.stat().st_size if path and path.exists() else 0
        if have < self.n_rows * self.dim * 4:
            raise StaleIndexError(f"{path} holds {have} bytes, fewer than the {self.n_rows} rows the index committed")

    def vector_path(self, generation: int | None = None) -> Path | None:
        if self.directory is None:
            return None
        return self.directory / f"vectors.{self.generation if generation is None else generation}.f32"

    def close(self) -> None:
        self.db.close()

    # ---- reading -------------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def files(self) -> dict[str, FileRecord]:
        rows = self.db.execute("SELECT path, hash, mtime_ns, size FROM files")
        return {r[0]: FileRecord(*r) for r in rows}

    def cached_rows(self, hashes: Iterable[bytes]) -> dict[bytes, int]:
        """The vector rows already embedded for these chunk hashes."""
        found: dict[bytes, int] = {}
        for part, marks in _batches(list(dict.fromkeys(hashes))):
            found.update(self.db.execute(f"SELECT hash, vrow FROM vectors WHERE hash IN ({marks})", part))
        return found

    def chunks(self, ids: list[int]) -> dict[int, tuple]:
        """id -> (path, start_line, end_line, kind, symbol)."""
        out: dict[int, tuple] = {}
        for part, marks in _batches(ids):
            rows = self.db.execute(
                "SELECT c.id, f.path, c.start_line, c.end_line, c.kind, c.symbol FROM chunks c "
                f"JOIN files f ON f.id = c.file_id WHERE c.id IN ({marks})", part)
            out.update((r[0], r[1:]) for r in rows)
        return out

    def texts(self, ids: list[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        for part, marks in _batches(ids):
            out.update(self.db.execute(f"SELECT rowid, text FROM fts WHERE rowid IN ({marks})", part))
        return out

    def keyword(self, expression: str, limit: int, keep: Callable[[str], bool] | None) -> list[int]:
        """Chunk ids matching an FTS5 expression, best bm25 first (path matches weigh double)."""
        sql = "SELECT rowid FROM fts WHERE fts MATCH ?"
        if keep is not None:
            self.db.create_function("composer_keep", 1, lambda p: bool(keep(p)), deterministic=True)
            sql += " AND composer_keep(path)"
        sql += " ORDER BY bm25(fts, 1.0, 2.0, 2.0) LIMIT ?"
        try:
            return [r[0] for r in self.db.execute(sql, (expression, limit))]
        except sqlite3.OperationalError:  # an expression FTS5 cannot parse: no keyword hits
            return []

    def symbols(self, lookups: list[tuple[int, str, list[str]]], prefixes: list[str], limit: int) -> list[tuple[int, int, str]]:
        """(chunk id, tier, path) of chunks whose `column` ("symbol" as written; "tail", the last
        dotted part lower-cased; "squashed", that without underscores) equals one of the values
        of a (tier, column, values) lookup, or whose tail starts with one of the `prefixes` (tier
        len(lookups), shortest symbols first). Best (lowest) tier first."""
        found: dict[int, tuple[int, int, str]] = {}
        select = "SELECT c.id, f.path FROM chunks c JOIN files f ON f.id = c.file_id WHERE "
        for tier, column, values in lookups:
            assert column in ("symbol", "tail", "squashed"), column
            for part, marks in _batches(values):
                for cid, path in self.db.execute(f"{select}c.{column} IN ({marks}) LIMIT ?", (*part, limit)):
                    if cid not in found or found[cid][1] > tier:
                        found[cid] = (cid, tier, path)
        for value in prefixes:  # an indexed range scan: value <= tail < value + U+FFFF
            rows = self.db.execute(f"{select}c.tail >= ? AND c.tail < ? ORDER BY length(c.tail) LIMIT ?",
                                   (value, value + "\uffff", limit))
            for cid, path in rows:
                found.setdefault(cid, (cid, len(lookups), path))
        return sorted(found.values(), key=lambda item: item[1])[:limit]

    def _load_snapshot(self) -> Snapshot:
        paths_by_id = dict(self.db.execute("SELECT id, path FROM files"))
        index = {fid: i for i, fid in enumerate(paths_by_id)}
        rows = self.db.execute("SELECT id, vrow, file_id, nrow FROM chunks ORDER BY id").fetchall()
        table = np.array(rows, dtype=np.int64).reshape(-1, 4)
        file_of = np.array([index[f] for f in table[:, 2].tolist()], dtype=np.int32)
        return Snapshot(table[:, 0].copy(), table[:, 1].copy(), table[:, 3].copy(), file_of,
                        list(paths_by_id.values()), self._matrix())

    def _matrix(self) -> np.ndarray:
        path = self.vector_path()
        if path is None:
            return self._memory[: self.n_rows]
        if self.n_rows == 0:
            return np.zeros((0, self.dim), np.float32)
        # A plain ndarray view of the mapping: arithmetic on np.memmap itself goes through the
        # subclass's hooks and made exact search 2.4x slower.
        return np.asarray(np.memmap(path, dtype=np.float32, mode="r", shape=(self.n_rows, self.dim)))

    # ---- writing -------------------------------------------------------------------------------

    def write(self, updates: list[FileUpdate], deletes: list[str], new_vectors: np.ndarray, *,
              touches: Iterable[FileRecord] = ()) -> None:
        """Appends `new_vectors` (rows n_rows.. in order), replaces the chunks of the updated
        files, removes the deleted ones and refreshes the stat of touched (same content) files,
        in one transaction; then swaps the snapshot."""
        assert not self.read_only, "write on a read-only shard"
        first = self.n_rows
        self._append(new_vectors)
        n_rows = first + len(new_vectors)
        try:
            with self.db:
                for path in deletes:
                    self._delete(path)
                for update in updates:
                    self._replace(update)
                new_hashes = {digest: row for update in updates
                              for digest, row in [*zip(update.hashes, update.rows),
                                                  *zip(update.name_hashes, update.name_rows)]
                              if digest is not None and row >= first}
                self.db.executemany("INSERT OR REPLACE INTO vectors(hash, vrow) VALUES (?, ?)", new_hashes.items())
                self.db.executemany("UPDATE files SET mtime_ns=?, size=? WHERE path=?",
                                    [(r.mtime_ns, r.size, r.path) for r in touches])
                self.db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('rows', ?)", (str(n_rows),))
        except BaseException:
            self._memory = self._memory[:first]
            raise
        self.n_rows = n_rows
        if updates or deletes or len(new_vectors):
            self.snapshot = self._load_snapshot()

    def _append(self, vectors: np.ndarray) -> None:
        if len(vectors) and vectors.shape[1] != self.dim:
            raise ValueError(f"vectors have dim {vectors.shape[1]}, the index has dim {self.dim}")
        data = np.ascontiguousarray(vectors, dtype=np.float32)
        path = self.vector_path()
        if path is None:
            self._memory = np.concatenate([self._memory[: self.n_rows], data])
            return
        if not len(data):
            return
        with open(path, "r+b" if path.exists() else "wb") as f:
            f.seek(self.n_rows * self.dim * 4)
            f.write(data.tobytes())
            f.truncate()
            f.flush()
            os.fsync(f.fileno())  # rows are durable before the transaction that names them

    def _delete(self, path: str) -> None:
        row = self.db.execute("SELECT id FROM files WHERE path=?", (path,)).fetchone()
        if row is None:
            return
        self.db.execute("DELETE FROM fts WHERE rowid IN (SELECT id FROM chunks WHERE file_id=?)", row)
        self.db.execute("DELETE FROM chunks WHERE file_id=?", row)
        self.db.execute("DELETE FROM files WHERE id=?", row)

    def _replace(self, update: FileUpdate) -> None:
        rec = update.record
        self._delete(rec.path)
        cur = self.db.execute("INSERT INTO files(path, hash, mtime_ns, size) VALUES (?, ?, ?, ?)",
                              (rec.path, rec.hash, rec.mtime_ns, rec.size))
        file_id = cur.lastrowid
        for chunk, digest, row, name_row in zip(update.chunks, update.hashes, update.rows, update.name_rows):
            tail, squashed = symbol_keys(chunk.symbol)
            cur = self.db.execute(
                "INSERT INTO chunks(file_id, start_line, end_line, kind, symbol, tail, squashed, hash, vrow, nrow) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (file_id, chunk.start_line, chunk.end_line, chunk.kind, chunk.symbol, tail, squashed, digest, row,
                 name_row))
            self.db.execute("INSERT INTO fts(rowid, text, path, symbol) VALUES (?, ?, ?, ?)",
                            (cur.lastrowid, chunk.text, rec.path, chunk.symbol or ""))

    def set_meta(self, values: dict[str, str], *, dirs: dict[str, str] | None = None) -> None:
        """Meta values, and the directory Merkle hashes when given (replacing the old ones)."""
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", values.items())
            if dirs is not None:
                self.db.execute("DELETE FROM dirs")
                self.db.executemany("INSERT INTO dirs(path, hash) VALUES (?, ?)", dirs.items())

    def live_rows(self) -> np.ndarray:
        """The matrix rows live chunks reference (vectors and names), ascending."""
        snap = self.snapshot
        return np.unique(np.concatenate([snap.rows, snap.name_rows[snap.name_rows >= 0]]))

    def garbage(self) -> int:
        """Vector rows no live chunk references (the cache part of the matrix)."""
        return self.n_rows - len(self.live_rows())

    def compact(self) -> None:
        """Rewrites the matrix with only the referenced rows, under a new generation, and drops
        the cache entries of the others. Readers holding the old snapshot keep its mapping."""
        keep = self.live_rows()
        remap = {int(old): new for new, old in enumerate(keep.tolist())}
        old_path, generation = self.vector_path(), self.generation + 1
        if old_path is None:
            self._memory = np.ascontiguousarray(self._memory[keep])
        else:
            np.asarray(self.snapshot.matrix[keep], dtype=np.float32).tofile(self.vector_path(generation))
        self.db.create_function("composer_remap", 1, lambda r: remap.get(r, -1), deterministic=True)
        with self.db:
            self.db.execute("DELETE FROM vectors WHERE vrow NOT IN (SELECT vrow FROM chunks UNION SELECT nrow FROM chunks)")
            self.db.execute("UPDATE vectors SET vrow = composer_remap(vrow)")
            self.db.execute("UPDATE chunks SET vrow = composer_remap(vrow), nrow = composer_remap(nrow)")
            self.db.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                                [("rows", str(len(keep))), ("generation", str(generation))])
        self.generation, self.n_rows = generation, len(keep)
        self.snapshot = self._load_snapshot()
        if old_path is not None:
            with contextlib.suppress(OSError):
                old_path.unlink()


def _batches(values: list, size: int = 500) -> Iterator[tuple[list, str]]:
    """`values` in slices within SQLite's bound-variable limit, each with its "?,?,..." marks."""
    for i in range(0, len(values), size):
        part = values[i : i + size]
        yield part, ",".join("?" * len(part))


def _create(db: sqlite3.Connection, name: str, dim: int) -> None:
    with db:
        db.executescript(_SCHEMA)
        db.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", [
            ("schema", str(SCHEMA_VERSION)), ("embedder", name), ("dim", str(dim)),
            ("rows", "0"), ("generation", "0"), ("complete", "0")])


def _check_meta(db: sqlite3.Connection, name: str, dim: int) -> None:
    meta = dict(db.execute("SELECT key, value FROM meta"))
    if meta.get("schema") != str(SCHEMA_VERSION):
        raise StaleIndexError(f"schema version {meta.get('schema')} != {SCHEMA_VERSION}")
    if meta.get("embedder") != name or meta.get("dim") != str(dim):
        raise StaleIndexError(f"built with embedder {meta.get('embedder')!r} (dim {meta.get('dim')}), "
                              f"not {name!r} (dim {dim})")
