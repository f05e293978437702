"""Vector search at scale: the exact pass (one matrix-vector product, then the code and name
top 50) against the HNSW graph (usearch; two graph searches, falling back to the exact pass when
the graph finds too few live rows of a kind), as CodebaseIndex runs them for each query.

    python bench/ann.py [--quick] [--no-write]

The vectors are synthetic with the statistics of real ones: MiniLM (with the code adapter)
embeds requests' and urllib3's chunks and definition names, and rows and queries are drawn from
a Gaussian with their mean and covariance, then normalised. (Isotropic random vectors would make
every neighbour about as near as the next, a case no graph index handles; bench/retrieval.py's
50k arm uses hashing vectors, sparse and near-orthogonal, which is close to that.) 70% of the
chunks get a name vector, about the share of definitions in real code. Sizes 50k, 100k and 200k
chunks (--quick: 20k); 200 queries each; recall@10 compares the graph's code top 10 with the
exact one. Writes bench/results/ann.json and its block in docs/benchmarks.md. About 3 minutes on
the 2-core dev box (embedding the real sample, building the 200k graph).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from agent.retrieval.store import Snapshot
from agent.retrieval.vectors import Hnsw, exact_top, name_top, row_scores
from bench.report import publish

NAMED, DEPTH = 0.7, 50
SITE = Path(sysconfig.get_path("purelib"))


class Gaussian:
    """The mean and covariance of real embedding rows; draws unit vectors like them."""

    def __init__(self, real: np.ndarray) -> None:
        self.mean = real.mean(0)
        eigenvalues, self.basis = np.linalg.eigh(np.cov(real - self.mean, rowvar=False))
        self.scale = np.sqrt(np.clip(eigenvalues, 0.0, None))

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        rows = self.mean + (rng.normal(size=(n, len(self.scale))) * self.scale) @ self.basis.T
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def real_sample() -> np.ndarray:
    """MiniLM vectors of requests' and urllib3's chunks and definition names."""
    from agent.retrieval.chunking import chunk_text
    from agent.retrieval.embedder import MiniLMEmbedder

    texts = []
    for package in ("requests", "urllib3"):
        for src in sorted((SITE / package).rglob("*.py")):
            for chunk in chunk_text(src.relative_to(SITE).as_posix(), src.read_text(errors="replace")):
                texts += [chunk.embedding_text] + ([chunk.name_text] if chunk.name_text else [])
    return MiniLMEmbedder().embed(texts)


def snapshot(rng: np.random.Generator, n: int, law: Gaussian) -> Snapshot:
    """n live chunks: code rows 0..n-1, name rows after them for a random 70%."""
    named = int(NAMED * n)
    name_rows = np.full(n, -1, np.int64)
    name_rows[rng.choice(n, named, replace=False)] = np.arange(n, n + named)
    return Snapshot(ids=np.arange(n, dtype=np.int64), rows=np.arange(n, dtype=np.int64), name_rows=name_rows,
                    file_of=np.zeros(n, np.int32), paths=["synthetic.py"], matrix=law.draw(rng, n + named))


def exact(snap: Snapshot, q: np.ndarray) -> None:
    scores = row_scores(snap, q)
    exact_top(snap, q, DEPTH, scores=scores)
    name_top(snap, q, DEPTH, scores=scores)


def percentiles(seconds: list[float]) -> dict[str, float]:
    return {"p50_ms": 1000 * float(np.percentile(seconds, 50)), "p95_ms": 1000 * float(np.percentile(seconds, 95))}


def measure(n: int, queries: int, rng: np.random.Generator, law: Gaussian) -> dict:
    snap = snapshot(rng, n, law)
    started = time.perf_counter()
    ann = Hnsw.build(snap.matrix)
    build_s = time.perf_counter() - started
    qs = law.draw(rng, queries)
    exact_s, graph_s, fallbacks, overlap = [], [], 0, []
    for q in qs:
        started = time.perf_counter()
        exact(snap, q)
        exact_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        code, names = ann.top(snap, q, DEPTH), ann.top(snap, q, DEPTH, names=True)
        if code is None or names is None:
            fallbacks += 1
            exact(snap, q)
        graph_s.append(time.perf_counter() - started)
        if code is not None:  # recall of the graph's code top 10 against the exact one
            truth = {pos for pos, _ in exact_top(snap, q, 10)}
            overlap.append(len(truth & {pos for pos, _ in code[:10]}) / 10)
    res = {"chunks": n, "rows": len(snap.matrix), "hnsw_build_s": build_s, "exact": percentiles(exact_s),
           "hnsw": percentiles(graph_s), "fallbacks": fallbacks, "queries": queries,
           "hnsw_recall@10": float(np.mean(overlap)) if overlap else 0.0}
    print(f"{n:,} chunks: exact p50/p95 {res['exact']['p50_ms']:.1f}/{res['exact']['p95_ms']:.1f} ms, HNSW "
          f"{res['hnsw']['p50_ms']:.1f}/{res['hnsw']['p95_ms']:.1f} ms, recall@10 {res['hnsw_recall@10']:.3f}, "
          f"{fallbacks} fallbacks (graph built in {build_s:.0f} s)", flush=True)
    return res


def tables(res: dict) -> str:
    out = ["| chunks (matrix rows) | exact p50 / p95 | HNSW p50 / p95 | exact / HNSW, p95 | HNSW recall@10 | "
           "fallbacks to exact | graph build |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in res["sizes"]:
        out.append(f"| {r['chunks']:,} ({r['rows']:,}) | {r['exact']['p50_ms']:.1f} / {r['exact']['p95_ms']:.1f} ms | "
                   f"{r['hnsw']['p50_ms']:.1f} / {r['hnsw']['p95_ms']:.1f} ms | "
                   f"{r['exact']['p95_ms'] / r['hnsw']['p95_ms']:.2f}x | {r['hnsw_recall@10']:.3f} | "
                   f"{r['fallbacks']} of {r['queries']} | {r['hnsw_build_s']:.0f} s |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="20k chunks only: a smoke run")
    ap.add_argument("--no-write", action="store_true", help="print only; leave results and docs alone")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    sizes = (20_000,) if args.quick else (50_000, 100_000, 200_000)
    load = os.getloadavg()[0]
    real = real_sample()
    law = Gaussian(real)
    res = {"real_sample": len(real), "sizes": [measure(n, 200, rng, law) for n in sizes]}
    res["meta"] = (f"Synthetic 384-d vectors with the mean and covariance of {len(real):,} MiniLM vectors (requests and "
                   f"urllib3 chunks and names), depth {DEPTH}, code and name rankings per query; Python "
                   f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, load average "
                   f"{load:.1f} at the start and {os.getloadavg()[0]:.1f} at the end; {datetime.date.today()}.")
    publish("ann", "Vector search at scale", res, tables(res), res["meta"], write=not (args.no_write or args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
