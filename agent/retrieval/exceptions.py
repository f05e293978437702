"""Named exceptions of the retrieval package (embedders, the codebase index). Messages say what
failed and what to do next.

    try:
        hits = index.search("where are retries handled")
    except IndexNotReadyError:
        ...  # fall back to grep while the first build runs
"""

from __future__ import annotations


class RetrievalError(Exception):
    """Base of the retrieval package's errors."""


class EmbeddingError(RetrievalError):
    """An embedder could not produce vectors (weights missing, endpoint failed, wrong shape)."""


class StaleIndexError(RetrievalError):
    """An index on disk cannot be used as is (corrupt files, another schema or embedder); the
    message is the reason. CodebaseIndex catches it, warns with the reason and rebuilds."""


class IndexNotReadyError(RetrievalError):
    """No complete index yet (the first build is running or has not started)."""
