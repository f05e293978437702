"""The C++ decode step (model/fused_decode.py, model/csrc/fused_decode.cpp) against the eager
int4 forward: bit-identical logits on tiny random models (MoE, dense, top-1/top-3), the engine
using it only where it applies and producing the same completions, the env switch and the
fallback, and (slow) 80 greedy steps of composer-mini with identical logits at every step.

The extension compiles once per test session (about 20-60 s; cached under the Composer home
afterwards). Run: .venv/bin/python -m pytest tests/model/test_fused_decode.py [-m "not slow"]
"""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from byte_tokenizer import ByteTokenizer

import model.fused_decode as fd
from model.config import ModelConfig
from model.engine import Engine
from model.layers import KVCache
from model.quant import quantize_model, supports_int4
from model.sampling import SamplingParams
from model.transformer import Transformer

pytestmark = pytest.mark.skipif(not supports_int4(), reason="this torch has no CPU int4 kernel")


@pytest.fixture(scope="session")
def extension():
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("no C++ compiler found: the fused decode step cannot be built (the engine decodes eagerly)")
    return fd.load_extension()  # a build failure here is a test failure, not a skip


def int4_model(**changes) -> Transformer:
    config = ModelConfig.debug(**changes)
    return quantize_model(Transformer(config).init_weights(seed=3).eval(), "int4")


def eager_step(model: Transformer, cache: KVCache, token: int, pos: int) -> torch.Tensor:
    out = model(torch.tensor([[token]]), positions_BS=torch.tensor([[pos]]), cache=cache, rows=slice(0, 1), attend_len=pos + 1)
    return out.logits[0]  # (1, V)


@pytest.mark.parametrize(
    "changes",
    [{}, {"num_experts": 1, "top_k": 1}, {"top_k": 3}, {"top_k": 1}, {"num_heads": 6, "num_kv_heads": 1}],
    ids=["moe-top2", "dense", "top3", "top1", "gqa-6:1"],
)
def test_fused_step_logits_equal_eager_bit_for_bit(extension, changes):
    model = int4_model(**changes)
    eager_cache, fused_cache = (KVCache(model.config, 2, 48, torch.float32) for _ in range(2))
    fused = fd.FusedDecode.build(model, fused_cache)
    ids = torch.randint(0, model.config.vocab_size, (40,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.inference_mode():
        for pos, token in enumerate(ids):
            ref = eager_step(model, eager_cache, token, pos)
            got = fused.step(token, pos)
            assert got.shape == ref.shape and got.dtype == torch.float32
            assert torch.equal(got, ref), f"position {pos}: max |diff| {(got - ref).abs().max():.3g}"
    for a, b in zip(eager_cache.k + eager_cache.v, fused_cache.k + fused_cache.v):
        assert torch.equal(a[0, :, : len(ids)], b[0, :, : len(ids)])  # the same cache contents


def counting(engine: Engine) -> list[int]:
    """Counts the engine's fused steps (wraps its FusedDecode.step)."""
    calls = []
    step = engine.fused.step

    def counted(*args):
        calls.append(1)
        return step(*args)

    engine.fused.step = counted
    return calls


def test_engine_fused_completions_equal_eager(extension):
    model = int4_model(max_position_embeddings=128)
    fused = Engine(model, ByteTokenizer(), max_batch=2)
    eager = Engine(model, ByteTokenizer(), max_batch=2, fused_decode=False)
    assert fused.fused is not None and eager.fused is None
    calls = counting(fused)
    prompt = list(b"def f(x): return x + 1\n")
    for params in (
        SamplingParams(max_tokens=30, ignore_eos=True, speculative=False, top_logprobs=3),
        SamplingParams(max_tokens=30, ignore_eos=True, temperature=0.8, seed=7),
    ):
        [a], [b] = fused.generate([prompt], params), eager.generate([prompt], params)
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs and a.top_logprobs == b.top_logprobs
    assert len(calls) == 2 * 29  # every step after the prefill's token
    # Not the fused path's cases: two rows at once, routing records, speculative drafts.
    calls.clear()
    params = SamplingParams(max_tokens=12, ignore_eos=True, speculative=False)
    assert [o.token_ids for o in fused.generate([prompt, prompt[:5]], params)] == [
        o.token_ids for o in eager.generate([prompt, prompt[:5]], params)
    ]
    [routed] = fused.generate([prompt], SamplingParams(max_tokens=12, ignore_eos=True, return_routing=True))
    assert routed.routed_experts.shape[0] == len(prompt) + 12 - 1  # every fed position recorded
    assert calls == []
    # Asked-for drafts are verified on the eager path; by default a lone fused sequence skips
    # drafting (a fused step is cheaper than a verification) while the eager engine drafts.
    repetitive = [list(b"abc abc abc abc abc")]
    [a] = fused.generate(repetitive, SamplingParams(max_tokens=40, ignore_eos=True, speculative=True))
    [b] = eager.generate(repetitive, SamplingParams(max_tokens=40, ignore_eos=True, speculative=False))
    [c] = fused.generate(repetitive, SamplingParams(max_tokens=40, ignore_eos=True))
    [d] = eager.generate(repetitive, SamplingParams(max_tokens=40, ignore_eos=True))
    assert a.token_ids == b.token_ids == c.token_ids == d.token_ids
    assert a.num_accepted_draft_tokens > 0 and d.num_accepted_draft_tokens > 0 and c.num_draft_tokens == 0
    assert calls  # the plain steps between verifications ran fused
    for engine in (fused, eager):
        engine.close()


def test_switches_and_fallback(extension, monkeypatch, capsys):
    model = int4_model()
    monkeypatch.setenv(fd.ENV_VAR, "0")
    assert Engine(model, ByteTokenizer()).fused is None
    assert Engine(model, ByteTokenizer(), fused_decode=True).fused is not None  # explicit beats the env
    monkeypatch.delenv(fd.ENV_VAR)
    fp32 = Transformer(ModelConfig.debug()).init_weights(seed=0).eval()
    assert Engine(fp32, ByteTokenizer()).fused is None  # not int4: quietly eager
    with pytest.raises(fd.FusedDecodeUnavailable, match="int4"):
        Engine(fp32, ByteTokenizer(), fused_decode=True)
    # A failed build: the default falls back to the eager path and says why; True raises.
    monkeypatch.setattr(fd, "_module", None)
    monkeypatch.setattr(fd, "_error", "no C++ compiler (simulated)")
    capsys.readouterr()
    engine = Engine(model, ByteTokenizer())
    assert engine.fused is None and "simulated" in capsys.readouterr().err
    [out] = engine.generate([list(b"abc")], SamplingParams(max_tokens=5, ignore_eos=True))
    assert len(out.token_ids) == 5
    with pytest.raises(fd.FusedDecodeUnavailable, match="simulated"):
        Engine(model, ByteTokenizer(), fused_decode=True)


@pytest.mark.slow
def test_composer_mini_int4_fused_greedy_is_the_eager_greedy(extension, composer_mini_dir):
    """80 greedy steps from the chat prompt: identical logits (bit for bit) at every step, and the
    engine's completions identical with the fused step on and off."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench.workloads import chat_prompt

    engine = Engine.from_pretrained(composer_mini_dir, quantize="int4", max_batch=1)
    assert engine.fused is not None
    model, prompt = engine.model, engine.tokenizer.encode_chat(chat_prompt())
    n = len(prompt)
    eager_cache = KVCache(model.config, 1, n + 96, torch.float32)
    fused_cache = KVCache(model.config, 1, n + 96, torch.float32)
    fused = fd.FusedDecode.build(model, fused_cache)
    with torch.inference_mode():
        out = model(torch.tensor([prompt]), positions_BS=torch.arange(n).unsqueeze(0), cache=eager_cache,
                    rows=slice(0, 1), attend_len=n, logits_at=torch.tensor([[n - 1]]))
        for a, b in zip(eager_cache.k + eager_cache.v, fused_cache.k + fused_cache.v):
            b[:, :, :n].copy_(a[:, :, :n])
        token = int(out.logits[0, -1].argmax())
        for pos in range(n, n + 80):
            ref = eager_step(model, eager_cache, token, pos)
            got = fused.step(token, pos)
            assert torch.equal(got, ref), f"step {pos - n}: max |diff| {(got - ref).abs().max():.3g}"
            token = int(ref[0].argmax())
    params = SamplingParams(max_tokens=80, ignore_eos=True, speculative=False)
    [a] = engine.generate([prompt], params)
    eager = Engine(model, engine.tokenizer, max_batch=1, fused_decode=False)
    [b] = eager.generate([prompt], params)
    assert a.token_ids == b.token_ids and a.logprobs == b.logprobs
    for e in (engine, eager):
        e.close()


def test_releasing_openmp_threads_is_harmless():
    """model/openmp.py frees the calling thread's OpenMP team; torch makes a new one on demand."""
    import threading

    from model.openmp import release_openmp_threads

    a, b = torch.randn(512, 512), torch.randn(512, 512)
    expected = a @ b
    assert release_openmp_threads() in (True, False)  # False: no runtime found, a no-op
    assert torch.equal(a @ b, expected)
    done = []
    worker = threading.Thread(target=lambda: done.append(torch.equal(a @ b, expected) and release_openmp_threads() in (True, False)))
    worker.start()
    worker.join()
    assert done == [True] and torch.equal(a @ b, expected)
