"""The codebase index: chunks of every workspace file, searchable by keyword (SQLite FTS5
trigram), by meaning (embeddings of the code, and of each definition's name as words) and by
symbol name, fused by reciprocal rank; kept fresh incrementally and persisted in `.composer/index`.

    index = CodebaseIndex("/repo", MiniLMEmbedder(), on_progress=lambda done, total: ...)
    index.update()                                   # first build, then only what changed
    hits = index.search("where are HTTP retries handled", k=10, paths=["src"])
    index.update_files(["src/app.py"])               # the editor's didSave (reads the disk)
    index.update_files(["src/app.py"], texts={"src/app.py": unsaved})   # didChange
    shared = CodebaseIndex("/rollout/repo", emb, index_dir=base_dir, read_only=True)
    shared.update_files(edited_paths)                # an in-memory overlay; the base is untouched

Freshness: stat first, hash (blake2b) only files whose mtime or size moved, re-chunk only files
whose hash changed, and embed only chunks whose content hash has no vector yet (so a rename or a
reverted edit embeds nothing). Directory Merkle hashes give `root_hash`, the snapshot's identity.
A corrupt index or one built by another schema or embedder is rebuilt with a warning naming why.

Read-only mode (RL rollouts sharing one prebuilt index per repo snapshot) opens the base without
writing; files changed since go to an in-memory overlay shard whose chunks shadow the base's
(the base's vectors are reused by content hash). Without a usable base it warns and serves
everything from memory.

Threads: one update at a time (a background thread is fine); queries run beside it and see the
last committed batch. Embedding happens outside the lock, so queries wait only for commits.
Processes: one process writes an index directory; any number open it with read_only=True.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.retrieval import query as Q
from agent.retrieval.chunking import MAX_CHARS, Chunk, chunk_text
from agent.retrieval.embedder import Embedder
from agent.retrieval.exceptions import IndexNotReadyError, StaleIndexError
from agent.retrieval.scan import diff, indexable, merkle, read_source, stat_files, text_record
from agent.retrieval.store import DB_NAME, FileRecord, FileUpdate, Shard, chunk_hash, name_hash
from agent.retrieval.vectors import (
    HNSW_THRESHOLD,
    Hnsw,
    exact_top,
    name_top,
    remove_stale,
    row_scores,
)
from agent.textfile import make_state_dir
from agent.workspace import Workspace

CHANNELS = ("keyword", "vector", "symbol")
"""What `search(channels=)` picks from; "vector" ranks twice, by code and by name vectors."""
COMPACT_MIN_GARBAGE = 4096
"""Cache rows (vectors no chunk uses) kept before a compaction is considered; past this, the
matrix is compacted once they outnumber the live rows."""
RRF_K = 5
"""Reciprocal-rank fusion's k. The usual 60 flattens ranks so much that a channel's first hit
barely beats its fiftieth; at 5 a keyword or symbol hit at rank 1-2 survives fusion with a
vector ranking that missed it (bench/retrieval.py: keyword rank 1, fused rank 13-44 at k=60)."""
DEFAULT_WEIGHTS = {"keyword": 1.0, "vector": 1.0, "name": 1.0, "symbol": 0.5, "exact": 1.0}
"""RRF weight per ranking ("vector": chunks by their code's embedding; "name": definitions by
their name's, from the same query embedding; "exact": the symbol hits of the best exact-name
tier, counted again). Chosen with RRF_K by grids (k 5-60, each weight 0-3) over
bench/retrieval.py's docstring, bug-report and identifier queries with MiniLM (requests, urllib3;
the same queries the benchmark reports, so expect a little less elsewhere). Against the former
k=60, weights 1/3/-/0.25/0.5 and no name vectors, at 1,000-character chunks: function recall@10
on docstring queries 87% -> 89%, on bug reports 96% -> 99%, identifier MRR 0.87 -> 0.90. With
the code adapter (agent/retrieval/adapter.py) a vector weight of 1.5 or 2 moved docstring recall
by at most one query either way, so they stayed. Another embedder may want others (`weights=`)."""


@dataclass(frozen=True)
class SearchHit:
    path: str
    start_line: int
    end_line: int
    kind: str
    symbol: str | None
    score: float
    """The fused RRF score (higher is better; comparable within one query only)."""
    text: str
    ranks: dict[str, int]
    """1-based rank in each channel that found the chunk."""


@dataclass
class UpdateStats:
    files: int = 0
    """Files looked at (listed by a full update, or named to update_files)."""
    changed: int = 0
    """Files whose content changed and were re-chunked."""
    deleted: int = 0
    chunks: int = 0
    """Chunks written."""
    embedded: int = 0
    """Texts sent to the embedder, chunks and definition names (the rest reused a vector with
    the same content hash)."""
    seconds: float = 0.0


@dataclass
class _Batch:
    updates: list[FileUpdate]
    touches: list[FileRecord]
    deletes: list[str]
    reverts: list[str]
    """Read-only mode: overlay files whose content is the base's again (the overlay entry goes)."""


class CodebaseIndex:
    def __init__(self, workspace_root: str | os.PathLike[str], embedder: Embedder,
                 index_dir: str | os.PathLike[str] | None = None, *, read_only: bool = False,
                 on_progress: Callable[[int, int], None] | None = None, max_file_bytes: int = 1 << 20,
                 max_chars: int = MAX_CHARS, batch_chunks: int = 256, hnsw_threshold: int = HNSW_THRESHOLD,
                 weights: Mapping[str, float] | None = None, rrf_k: int = RRF_K) -> None:
        self.workspace = Workspace(workspace_root)
        self.root = self.workspace.root
        self.embedder = embedder
        self.read_only = read_only
        self.on_progress = on_progress
        self.max_file_bytes, self.max_chars, self.batch_chunks = max_file_bytes, max_chars, batch_chunks
        self.hnsw_threshold = hnsw_threshold
        self.weights = dict(DEFAULT_WEIGHTS if weights is None else weights)
        self.rrf_k = rrf_k
        self.index_dir = Path(index_dir) if index_dir is not None else self.root / ".composer" / "index"
        self._lock = threading.RLock()  # the SQLite connections and the snapshots
        self._update_lock = threading.Lock()  # one writer at a time
        self._pinned: set[str] = set()  # paths indexed from unsaved text: full updates skip them
        self._hidden: frozenset[str] = frozenset()  # base paths the overlay replaces or deletes
        self._ann: Hnsw | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._touched: dict[str, FileRecord] = {}  # read-only mode: base files re-stat'ed, same content
        self.progress = (0, 0)
        self.base: Shard | None = self._open_base()
        self.overlay: Shard | None = Shard.memory(embedder.name, embedder.dim) if read_only else None
        self._complete = self.base is not None and self.base.meta("complete") == "1"
        self._load_ann()

    # ---- opening -------------------------------------------------------------------------------

    def _open_base(self) -> Shard | None:
        # Chunk boundaries are part of what the rows mean: another max_chars rebuilds too.
        name, dim = f"{self.embedder.name}; chunks of {self.max_chars}", self.embedder.dim
        if self.read_only:
            try:
                shard = Shard.open(self.index_dir, name=name, dim=dim, read_only=True)
                if shard.meta("complete") != "1":
                    shard.close()
                    raise StaleIndexError("its first build never finished")
                return shard
            except StaleIndexError as err:
                warnings.warn(f"codebase index {self.index_dir} is unusable ({err}); read-only mode "
                              "indexes the workspace in memory instead", stacklevel=3)
                return None
        self._make_dir()
        try:
            return Shard.open(self.index_dir, name=name, dim=dim)
        except StaleIndexError as err:
            warnings.warn(f"rebuilding codebase index {self.index_dir}: {err}", stacklevel=3)
        for path in self.index_dir.iterdir():
            if path.is_file() and (path.name.startswith(DB_NAME) or path.suffix in (".f32", ".usearch", ".tmp")):
                path.unlink()
        return Shard.open(self.index_dir, name=name, dim=dim)

    def _make_dir(self) -> None:
        if self.index_dir.is_relative_to(self.root / ".composer"):  # never through a link out of the workspace
            make_state_dir(self.root, *self.index_dir.relative_to(self.root / ".composer").parts)
        self.index_dir.mkdir(parents=True, exist_ok=True)

    def _ann_path(self) -> Path:
        assert self.base is not None
        return self.index_dir / f"hnsw.{self.base.generation}.usearch"

    def _load_ann(self) -> None:
        base = self.base
        if base is None or base.snapshot.size <= self.hnsw_threshold:
            return
        ann = Hnsw.load(self._ann_path(), view=self.read_only)
        if ann is not None and ann.covered <= base.n_rows:
            self._ann = ann

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
        with self._lock:
            for shard in (self.base, self.overlay):
                if shard is not None:
                    shard.close()

    # ---- state ---------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """A complete index can be searched (the first build finished). Never blocks."""
        return self._complete

    @property
    def root_hash(self) -> str | None:
        """The Merkle hash of the tree the base index holds, as of its last full update (None
        before one): the repo snapshot's identity (read-only mode: the shared snapshot's)."""
        with self._lock:
            return self.base.meta("root") if self.base is not None else None

    def stats(self) -> dict[str, int]:
        with self._lock:
            shards = [s for s in (self.base, self.overlay) if s is not None]
            return {"chunks": sum(s.snapshot.size for s in shards),
                    "files": len(set().union(*(s.snapshot.paths for s in shards))) if shards else 0,
                    "vector_rows": sum(s.n_rows for s in shards), "hidden": len(self._hidden)}

    def _target(self) -> Shard:
        target = self.overlay if self.read_only else self.base
        assert target is not None
        return target

    def _known(self) -> dict[str, FileRecord]:
        """What the index holds per path now (base minus hidden, then the overlay)."""
        with self._lock:
            known = {} if self.base is None else self.base.files()
            known.update(self._touched)
            for path in self._hidden:
                known.pop(path, None)
            if self.overlay is not None:
                known.update(self.overlay.files())
            return known

    # ---- updating ------------------------------------------------------------------------------

    def update(self) -> UpdateStats:
        """Brings the index up to date with the workspace on disk (paths indexed from unsaved
        text stay until update_files reads them again)."""
        with self._update_lock:
            started = time.perf_counter()
            paths = [p for p in self.workspace.iter_files() if indexable(p) and p not in self._pinned]
            current = stat_files(self.root, paths)
            known = self._known()
            changed, deleted = diff(current, known)
            deleted = [p for p in deleted if p not in self._pinned]
            stats = self._apply(changed, deleted, {}, known)
            stats.files = len(current)
            self._finish(full=bool(changed or deleted) or not self._complete)
            stats.seconds = time.perf_counter() - started
            return stats

    def update_files(self, paths: Iterable[str], *, texts: Mapping[str, str] | None = None) -> UpdateStats:
        """Re-indexes the named files: from `texts` where given (unsaved buffers, which full
        updates then leave alone), else from disk (a missing file is removed)."""
        with self._update_lock:
            started = time.perf_counter()
            texts = {self.workspace.relative(p): t for p, t in (texts or {}).items()}
            rels = list(dict.fromkeys([*(self.workspace.relative(p) for p in paths), *texts]))
            known = self._known()
            changed, deleted = [], []
            for rel in rels:
                if rel in texts:
                    self._pinned.add(rel)
                    changed.append(rel)
                    continue
                self._pinned.discard(rel)
                on_disk = (self.root / rel).is_file() and indexable(rel) and not self.workspace.is_ignored(rel)
                if on_disk:
                    changed.append(rel)
                elif rel in known:
                    deleted.append(rel)
            stats = self._apply(changed, deleted, texts, known)
            stats.files = len(rels)
            self._finish(full=False)
            stats.seconds = time.perf_counter() - started
            return stats

    def _apply(self, changed: list[str], deleted: list[str], texts: Mapping[str, str],
               known: dict[str, FileRecord]) -> UpdateStats:
        stats = UpdateStats(deleted=len(deleted))
        total = len(changed)
        self._report(0, total)
        with self._lock:  # read-only mode: what the base holds, and what the overlay replaced
            base = self.base.files() if self.read_only and self.base is not None else {}
            in_overlay = set(self.overlay.files()) if self.overlay is not None else set()
        pending: list[tuple[FileRecord, list[Chunk]]] = []
        batch = _Batch([], [], list(deleted), [])
        n_chunks = 0
        for done, path in enumerate(changed, 1):
            item = self._read(path, texts.get(path))
            if item is None:  # vanished or unreadable since it was listed
                if path in known:
                    batch.deletes.append(path)
                continue
            record, text = item
            old, at_base = known.get(path), base.get(path)
            if old is not None and old.hash == record.hash:  # touched, same content
                if self.read_only and path not in in_overlay:
                    self._touched[path] = record
                else:
                    batch.touches.append(record)
            elif at_base is not None and at_base.hash == record.hash:  # back to the base's content
                batch.reverts.append(path)
            else:
                chunks = chunk_text(path, text, max_chars=self.max_chars) if text else []
                pending.append((record, chunks))
                n_chunks += len(chunks)
            if n_chunks >= self.batch_chunks:
                self._commit(pending, batch, stats)
                pending, batch, n_chunks = [], _Batch([], [], [], []), 0
                self._report(done, total)
        self._commit(pending, batch, stats)
        self._report(total, total)
        return stats

    def _read(self, path: str, text: str | None) -> tuple[FileRecord, str | None] | None:
        """The file's record and text (from `text` when given, an unsaved buffer)."""
        if text is not None:
            return text_record(path, text), text
        return read_source(self.root, path, self.max_file_bytes)

    def _commit(self, pending: list[tuple[FileRecord, list[Chunk]]], batch: _Batch, stats: UpdateStats) -> None:
        """Embeds what has no vector yet (outside the lock), then writes one transaction."""
        if not (pending or batch.touches or batch.deletes or batch.reverts):
            return
        target = self._target()
        hashes = [[chunk_hash(c) for c in chunks] for _, chunks in pending]
        names = [[c.name_text for c in chunks] for _, chunks in pending]
        name_hashes = [[name_hash(n) if n else None for n in ns] for ns in names]
        wanted = [h for hs in hashes + name_hashes for h in hs if h is not None]
        with self._lock:
            rows = target.cached_rows(wanted)
            first = target.n_rows
        new_texts: dict[bytes, str] = {}
        for (_, chunks), hs, ns, nhs in zip(pending, hashes, names, name_hashes):
            for chunk, digest, name, name_digest in zip(chunks, hs, ns, nhs):
                if digest not in rows and digest not in new_texts:
                    new_texts[digest] = chunk.embedding_text
                if name_digest is not None and name_digest not in rows and name_digest not in new_texts:
                    new_texts[name_digest] = name
        new_vectors = self._vectors_for(new_texts, stats)
        for i, digest in enumerate(new_texts):
            rows[digest] = first + i
        updates = [FileUpdate(record, chunks, hs, [rows[h] for h in hs], nhs,
                              [-1 if h is None else rows[h] for h in nhs])
                   for (record, chunks), hs, nhs in zip(pending, hashes, name_hashes)]
        with self._lock:
            assert target.n_rows == first, "another writer appended vectors"
            target.write(updates, batch.deletes + batch.reverts, new_vectors, touches=batch.touches)
            if self.read_only:
                changed = {u.record.path for u in updates} | set(batch.deletes)
                self._hidden = (self._hidden | changed) - set(batch.reverts)
                for path in changed:
                    self._touched.pop(path, None)
        stats.changed += len(updates)
        stats.chunks += sum(len(u.chunks) for u in updates)

    def _vectors_for(self, texts: dict[bytes, str], stats: UpdateStats) -> np.ndarray:
        """Vectors for new chunk hashes: the base's cache first (read-only mode), else embed."""
        dim = self.embedder.dim
        out = np.zeros((len(texts), dim), np.float32)
        missing = list(range(len(texts)))
        if self.read_only and self.base is not None and texts:
            keys = list(texts)
            with self._lock:
                found = self.base.cached_rows(keys)
                matrix = self.base.snapshot.matrix
                have = [i for i, key in enumerate(keys) if key in found]
                if have:
                    out[have] = matrix[[found[keys[i]] for i in have]]
            missing = [i for i in missing if keys[i] not in found]
        if missing:
            values = list(texts.values())
            for i in range(0, len(missing), self.batch_chunks):
                part = missing[i : i + self.batch_chunks]
                out[part] = self.embedder.embed([values[j] for j in part])
            stats.embedded += len(missing)
        return out

    def _finish(self, *, full: bool) -> None:
        """After an update: the Merkle hashes and the 'complete' mark (`full`: a full update
        that changed something, or the first), compaction when cache rows outnumber live ones,
        the HNSW graph above its threshold."""
        if self.read_only:
            self._complete = self._complete or (full and self.base is None)
            return
        base = self.base
        assert base is not None
        with self._lock:
            if full:
                dirs = merkle({p: r.hash for p, r in base.files().items()})
                base.set_meta({"complete": "1", "root": dirs["."]}, dirs=dirs)
                self._complete = True
            if base.garbage() > max(base.snapshot.size, COMPACT_MIN_GARBAGE):
                base.compact()
                self._ann = None
            snap, ann = base.snapshot, self._ann
        built = snap.size > self.hnsw_threshold and ann is None
        if built:
            ann = Hnsw.build(snap.matrix)  # minutes for millions of rows: outside the lock
            with self._lock:
                self._ann = ann
        with self._lock:
            if self._ann is not None:
                self._ann.extend(base.snapshot.matrix)
                if full or built:  # not after every saved file: the graph is rewritten whole
                    self._ann.save(self._ann_path())
            remove_stale(self.index_dir, {f"vectors.{base.generation}.f32", self._ann_path().name})

    def _report(self, done: int, total: int) -> None:
        self.progress = (done, total)
        if self.on_progress is not None:
            self.on_progress(done, total)

    # ---- searching -----------------------------------------------------------------------------

    def search(self, query: str, k: int = 10, *, paths: Sequence[str] | None = None,
               channels: Sequence[str] = CHANNELS) -> list[SearchHit]:
        """The k best chunks for `query`, fusing the channels by reciprocal rank (RRF_K), with
        overlapping chunks of one file deduplicated. `paths`: globs or directories to search in.
        Raises IndexNotReadyError before the first complete build."""
        if not query.strip():
            raise ValueError("query is empty; describe what the code does or name a symbol")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        unknown = set(channels) - set(CHANNELS)
        if unknown:
            raise ValueError(f"unknown channels {sorted(unknown)}; choose from {list(CHANNELS)}")
        if not self.ready:
            done, total = self.progress
            raise IndexNotReadyError(f"the codebase index is being built ({done} of {total} files)")
        keep = Q.path_filter(paths)
        depth = max(50, 5 * k)
        with self._lock:
            shards = [(i, s) for i, s in enumerate((self.base, self.overlay)) if s is not None]
            # The query's embedding and the vector channel run beside the SQLite channels
            # (sqlite3 and numpy's matmul both release the GIL).
            vector = self._executor().submit(self._vector, shards, query, depth, keep) \
                if "vector" in channels else None
            keyword = self._keyword(shards, query, depth, keep) if "keyword" in channels else None
            symbol = self._symbol(shards, query, depth, keep) if "symbol" in channels else None
            rankings: dict[str, list[tuple[int, int]]] = {}
            if keyword is not None:
                rankings["keyword"] = keyword
            if vector is not None:
                rankings["vector"], rankings["name"] = vector.result()
            if symbol is not None:
                rankings["symbol"], rankings["exact"] = symbol
            return self._hits(shards, rankings, k)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="codebase-vector")
        return self._pool

    def _visible(self, shard_no: int, keep: Callable[[str], bool] | None) -> Callable[[str], bool] | None:
        hidden = self._hidden if shard_no == 0 else frozenset()
        if not hidden:
            return keep
        return lambda path: path not in hidden and (keep is None or keep(path))

    def _keyword(self, shards, query: str, depth: int, keep) -> list[tuple[int, int]]:
        terms = Q.keyword_terms(query)
        if not terms:
            return []
        found = []
        for no, shard in shards:
            ids = shard.keyword(Q.fts_expression(terms), depth, self._visible(no, keep))
            found += [(rank, no, cid) for rank, cid in enumerate(ids)]
        return [(no, cid) for _, no, cid in sorted(found)[:depth]]  # shards interleaved by rank

    def _vector(self, shards, query: str, depth: int, keep) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """(chunks by code vector, chunks by name vector): one query embedding, one pass over
        the matrix when the search is exact."""
        q = self.embedder.embed([query])[0]
        code, names = [], []
        for no, shard in shards:
            snap = shard.snapshot
            visible = self._visible(no, keep)
            mask = None
            if visible is not None:
                ok = np.fromiter((visible(p) for p in snap.paths), bool, len(snap.paths))
                mask = ok[snap.file_of] if len(snap.paths) else np.zeros(0, bool)
            hits = named = None
            ann = self._ann if no == 0 else None
            if ann is not None and ann.covered == shard.n_rows and snap.size > self.hnsw_threshold:
                hits, named = ann.top(snap, q, depth, mask), ann.top(snap, q, depth, mask, names=True)
            if hits is None or named is None:
                scores = row_scores(snap, q) if snap.size else None
                hits = exact_top(snap, q, depth, mask, scores=scores) if hits is None else hits
                named = name_top(snap, q, depth, mask, scores=scores) if named is None else named
            code += [(-score, no, int(snap.ids[pos])) for pos, score in hits if score > 0.0]  # 0: no signal
            names += [(-score, no, int(snap.ids[pos])) for pos, score in named if score > 0.0]
        return [(no, cid) for _, no, cid in sorted(code)[:depth]], [(no, cid) for _, no, cid in sorted(names)[:depth]]

    def _symbol(self, shards, query: str, depth: int, keep) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """(all symbol hits by tier, the hits of the best tier when it is an exact name): an
        exact name counts twice."""
        lookups, prefixes = Q.symbol_lookups(query)
        found = []
        for no, shard in shards:
            visible = self._visible(no, keep)
            for cid, tier, path in shard.symbols(lookups, prefixes, depth):
                if visible is None or visible(path):
                    found.append((tier, no, cid))
        found = sorted(found)[:depth]
        best = found[0][0] if found else None  # the strongest evidence found gets the boost
        exact = [(no, cid) for tier, no, cid in found if tier == best and tier <= Q.EXACT_TIERS]
        return [(no, cid) for _, no, cid in found], exact

    def _hits(self, shards, rankings: dict[str, list[tuple[int, int]]], k: int) -> list[SearchHit]:
        """Fuses the channels over definitions, not chunks: the windows of one long function
        (same file and symbol) count as one unit, ranked in each channel by its best window, and
        shown as its best-fused window with the line range of all its matched windows. Then a
        unit half shown by a better hit is dropped."""
        by_shard = dict(shards)
        meta: dict[tuple[int, int], tuple] = {}
        for no, shard in shards:
            ids = list({cid for ranking in rankings.values() for n, cid in ranking if n == no})
            meta.update(((no, cid), row) for cid, row in shard.chunks(ids).items())
        unit = {key: (key[0], row[0], row[4]) if row[4] else key for key, row in meta.items()}
        chunk_scores = {key: score for key, score, _ in Q.fuse(rankings, k=self.rrf_k, weights=self.weights)}
        units = {c: list(dict.fromkeys(unit[key] for key in r if key in unit)) for c, r in rankings.items()}
        members: dict[tuple, list[tuple[int, int]]] = {}
        for key in sorted(meta, key=lambda key: -chunk_scores.get(key, 0.0)):
            members.setdefault(unit[key], []).append(key)
        fused = Q.fuse(units, k=self.rrf_k, weights=self.weights)
        hits: list[SearchHit] = []
        for start in range(0, len(fused), 2 * k):  # texts are read for the likely hits only
            window = fused[start : start + 2 * k]
            texts: dict[tuple[int, int], str] = {}
            for no in {members[group][0][0] for group, _, _ in window}:
                ids = [members[group][0][1] for group, _, _ in window if members[group][0][0] == no]
                texts.update(((no, cid), text) for cid, text in by_shard[no].texts(ids).items())
            for group, score, ranks in window:
                keys = members[group]
                path, start_line, end_line, kind, symbol = meta[keys[0]]
                if len(keys) > 1:
                    start_line = min(start_line, *(meta[key][1] for key in keys))
                    end_line = max(end_line, *(meta[key][2] for key in keys))
                hit = SearchHit(path, start_line, end_line, kind, symbol, score, texts.get(keys[0], ""), ranks)
                if not _absorbed(hit, hits):
                    hits.append(hit)
                if len(hits) == k:
                    return hits
        return hits


def _absorbed(hit: SearchHit, hits: list[SearchHit]) -> bool:
    """Whether a better hit of the same file already shows at least half of `hit`'s lines (a
    collapsed class shows only signatures, so it shows none)."""
    length = hit.end_line - hit.start_line + 1
    for kept in hits:
        if kept.path != hit.path:
            continue
        shows_text = kept.text.count("\n") + 1 >= 0.9 * (kept.end_line - kept.start_line + 1)
        overlap = min(hit.end_line, kept.end_line) - max(hit.start_line, kept.start_line) + 1
        if shows_text and overlap >= length / 2:
            return True
    return False
