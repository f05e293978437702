"""Nearest chunks to a query vector: exact by matrix-vector product, or an HNSW graph (usearch)
above a size threshold.

    hits = exact_top(snapshot, q, 50, mask)          # [(position in snapshot, cosine)], best first
    names = name_top(snapshot, q, 50, mask)          # the same over the definitions' name vectors
    ann = Hnsw.build(snapshot.matrix)                # or Hnsw.load(path, view=True)
    hits = ann.top(snapshot, q, 50, mask)            # None when too few live hits: use exact_top

Rows are L2-normalised, so the dot product is the cosine. The exact path scores every matrix row
(cache and name rows too; cheaper than gathering the live ones) and picks the top with
argpartition. Per query, code and name rankings on the 2-core dev box (bench/ann.py, vectors
with real MiniLM statistics), exact against HNSW p95: 4.7 / 6.9 ms at 50k chunks, 9.7 / 9.3 ms
at 100k, 18.9 / 10.7 ms at 200k, with the graph's top 10 holding 97% / 94% / 93% of the exact
one's. So CodebaseIndex stays exact up to HNSW_THRESHOLD (150k chunks), where the graph starts
to pay for the recall it gives up.
HNSW keys are matrix rows, code and name vectors alike; a search keeps the rows that are a live
chunk's vector of the kind asked for (over-fetching makes up for the others), and rows are
never removed from the graph (a compaction starts a new graph).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np

from agent.retrieval.store import Snapshot

HNSW_THRESHOLD = 150_000
"""Live chunks above which CodebaseIndex searches the HNSW graph instead of the whole matrix."""


def row_scores(snap: Snapshot, q: np.ndarray) -> np.ndarray:
    """The cosine of `q` with every matrix row (cache rows too; cheaper than gathering)."""
    # einsum, not BLAS (`@`): OpenBLAS splits a matrix-vector product over its threads, and on a
    # busy machine waiting for the second one made 50k x 384 take 8 ms instead of 2.3 ms.
    return np.einsum("ij,j->i", snap.matrix, q)


def exact_top(snap: Snapshot, q: np.ndarray, k: int, mask: np.ndarray | None = None, *,
              scores: np.ndarray | None = None) -> list[tuple[int, float]]:
    """The k live chunks most similar to `q` (positions into the snapshot), best first; `mask`
    (bool per live chunk) leaves chunks out. `scores`: row_scores(snap, q), when already made."""
    if snap.size == 0 or k <= 0:
        return []
    rows = (row_scores(snap, q) if scores is None else scores)[snap.rows]
    return _top(rows, k, mask)


def name_top(snap: Snapshot, q: np.ndarray, k: int, mask: np.ndarray | None = None, *,
             scores: np.ndarray | None = None) -> list[tuple[int, float]]:
    """Like exact_top over the live chunks' name vectors (chunks without a name never rank)."""
    if snap.size == 0 or k <= 0:
        return []
    named = snap.name_rows >= 0
    all_rows = row_scores(snap, q) if scores is None else scores
    return _top(all_rows[np.maximum(snap.name_rows, 0)], k, named if mask is None else mask & named)


def _top(scores: np.ndarray, k: int, mask: np.ndarray | None) -> list[tuple[int, float]]:
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
        k = min(k, int(mask.sum()))
        if k == 0:
            return []
    k = min(k, len(scores))
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.argsort(-scores[top], kind="stable")]
    return [(int(i), float(scores[i])) for i in top]


class Hnsw:
    """A usearch HNSW graph over matrix rows (cosine, f32)."""

    def __init__(self, index) -> None:
        self.index = index
        self._orders: dict[bool, tuple[Snapshot, np.ndarray, np.ndarray]] = {}

    @property
    def covered(self) -> int:
        """Rows 0..covered-1 are in the graph."""
        return len(self.index)

    @classmethod
    def build(cls, matrix: np.ndarray, *, threads: int = 0) -> Hnsw:
        from usearch.index import Index

        ann = cls(Index(ndim=matrix.shape[1], metric="cos", dtype="f32", connectivity=16,
                        expansion_add=64, expansion_search=64))
        ann.extend(matrix, threads=threads)
        return ann

    @classmethod
    def load(cls, path: Path, *, view: bool) -> Hnsw | None:
        """The saved graph, memory-mapped (view=True: read-only, shared between processes) or
        loaded to extend; None when the file is missing or unreadable."""
        from usearch.index import Index

        if not path.is_file():
            return None
        try:
            index = Index.restore(str(path), view=view)
        except Exception:  # a torn or foreign file: the caller rebuilds the graph
            return None
        return cls(index) if index is not None else None

    def extend(self, matrix: np.ndarray, *, threads: int = 0) -> None:
        """Adds rows covered..len(matrix)-1."""
        start = self.covered
        if start < len(matrix):
            keys = np.arange(start, len(matrix), dtype=np.uint64)
            self.index.add(keys, np.ascontiguousarray(matrix[start:], dtype=np.float32), threads=threads)

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        self.index.save(str(tmp))
        os.replace(tmp, path)

    def top(self, snap: Snapshot, q: np.ndarray, k: int, mask: np.ndarray | None = None, *,
            names: bool = False) -> list[tuple[int, float]] | None:
        """Like exact_top (or name_top, `names`) from the graph, over-fetching to make up for
        dead, masked and other-kind rows; None when the graph found fewer than k live hits (the
        caller falls back to the exact search)."""
        order, sorted_rows = self._sorted(snap, names)
        fetch = min(self.covered, max(8 * k, 128))
        matches = self.index.search(np.ascontiguousarray(q, dtype=np.float32), fetch)
        keys = np.asarray(matches.keys, dtype=np.int64)
        sims = 1.0 - np.asarray(matches.distances, dtype=np.float64)
        hits: list[tuple[int, float]] = []
        for key, sim in zip(keys.tolist(), sims.tolist()):
            lo, hi = np.searchsorted(sorted_rows, [key, key + 1])
            for pos in order[lo:hi].tolist():  # every live chunk that shares this vector
                if mask is None or mask[pos]:
                    hits.append((pos, sim))
            if len(hits) >= k:
                return hits[:k]
        # The whole graph was read, or the other kind crowded this one out: a wider graph search
        # cost more than the exact one (bench/retrieval.py), so the caller falls back to that.
        return hits if fetch >= self.covered else None

    def _sorted(self, snap: Snapshot, names: bool) -> tuple[np.ndarray, np.ndarray]:
        """The snapshot's live rows of one kind sorted (and the order that sorts them), made
        once per snapshot: sorting 50k rows on every query cost about a millisecond."""
        cached = self._orders.get(names)
        if cached is None or cached[0] is not snap:
            rows = snap.name_rows if names else snap.rows  # name rows of -1 match no key
            order = np.argsort(rows, kind="stable")
            cached = self._orders[names] = (snap, order, rows[order])
        return cached[1], cached[2]


def remove_stale(directory: Path, keep: set[str]) -> None:
    """Deletes vector and graph files of older generations (a crash can leave them behind)."""
    for path in directory.glob("*"):
        if path.suffix in (".f32", ".usearch", ".tmp") and path.name not in keep:
            with contextlib.suppress(OSError):
                path.unlink()
