"""Prefix reuse in the engine, as a property: random interleavings of requests whose prompts share
prefixes (a random tree: branches, repeats, a prompt extending another) give the same tokens,
logits, logprobs and routed experts, bit for bit, as a cache-less engine serving each request
alone; in fp32 and in int4 (bf16 and int8 KV caches), with a small prefix cache (eviction), small prefill chunks, several
rows at once, cancellation mid-prefill, and new weights between requests. The counters must show
hits and evictions, so the property cannot hold vacuously.

Run: .venv/bin/python -m pytest tests/model/test_prefix_reuse.py
"""

from __future__ import annotations

import random
import threading

import pytest
import torch
from byte_tokenizer import ByteTokenizer

import model.sequence as sequence_module
from model.config import ModelConfig
from model.engine import Engine
from model.kernels import PREFILL
from model.kv import kv_dtype, stored_width
from model.quant import quantize_model, supports_int4
from model.sampling import SamplingParams
from model.transformer import Transformer

pytestmark = pytest.mark.skipif(not supports_int4(), reason="this torch has no CPU int4 kernel")

PARAMS = SamplingParams(max_tokens=6, ignore_eos=True, top_logprobs=3, return_routing=True, speculative=False)


def prompt_tree(rng: random.Random, n: int) -> list[list[int]]:
    """Prompts that share prefixes: each new one takes a random prefix of an earlier one (or is
    the same request again, or its next step) and appends random bytes."""
    prompts = [[rng.randrange(256) for _ in range(rng.randrange(20, 60))] for _ in range(2)]
    while len(prompts) < n:
        base, kind = rng.choice(prompts), rng.random()
        if kind < 0.15:
            prompts.append(list(base))  # the same request again
        elif kind < 0.3:
            prompts.append(base + [rng.randrange(256) for _ in range(rng.randrange(1, 30))])  # the next step
        else:
            cut = rng.randrange(1, len(base))
            prompts.append(base[:cut] + [rng.randrange(256) for _ in range(rng.randrange(1, 40))])  # a branch
    rng.shuffle(prompts)
    return prompts


class Recorder:
    """Every Sequence's logits rows (wraps Sequence.accept), so logits can be compared too."""

    def __init__(self, monkeypatch) -> None:
        self.seqs: list[sequence_module.Sequence] = []
        accept = sequence_module.Sequence.accept

        def recording(seq, logits_SV, drafts):
            used = accept(seq, logits_SV, drafts)
            if not hasattr(seq, "logits_seen"):
                seq.logits_seen = []
                self.seqs.append(seq)
            seq.logits_seen.append(logits_SV[:used].clone())
            return used

        monkeypatch.setattr(sequence_module.Sequence, "accept", recording)

    def take(self) -> list[tuple[sequence_module.Sequence, torch.Tensor]]:
        out = [(seq, torch.cat(seq.logits_seen)) for seq in self.seqs]
        self.seqs.clear()
        return out


def make_model(quantize: str) -> Transformer:
    model = Transformer(ModelConfig.debug(max_position_embeddings=256)).init_weights(seed=11).eval()
    return quantize_model(model, quantize)


def reference(model: Transformer, prompts: list[list[int]], recorder: Recorder, kv: str) -> dict[tuple, tuple]:
    """A cache-less engine serving one request at a time: prompt -> (completion, logits)."""
    engine = Engine(model, ByteTokenizer(), max_batch=1, prefix_cache_gb=0, kv_cache_dtype=kv)
    assert engine.prefix is None
    out = {}
    for prompt in map(tuple, prompts):
        if prompt not in out:
            [done] = engine.generate([list(prompt)], PARAMS)
            [(_, logits)] = recorder.take()
            out[prompt] = (done, logits)
    engine.close()
    return out


def serve_interleaved(engine: Engine, prompts: list[list[int]], victim: int, rng: random.Random) -> list:
    """Submits the prompts from this thread while the engine runs, some in bursts; request
    `victim` is cancelled while part of its prompt is prefilled. Returns the completions."""
    results: list = [None] * len(prompts)
    done = threading.Semaphore(0)
    cancels, cancelled_mid_prefill = [], []
    victim_cancel_known = threading.Event()  # the engine may prefill the victim before submit returns
    forward = engine.runner.forward

    def cancelling_forward(ids_N, rows_N, pos_N, role, logits_at=None):
        out = forward(ids_N, rows_N, pos_N, role, logits_at)
        for pending in engine._active:
            seq = pending.seq
            if role == PREFILL and seq.prompt_ids == prompts[victim] and 0 < seq.length < len(seq.prompt_ids):
                cancelled_mid_prefill.append(seq.length)
                victim_cancel_known.wait()
                cancels[victim]()
        return out

    engine.runner.forward = cancelling_forward
    for i, prompt in enumerate(prompts):
        def on_done(result, i=i):
            results[i] = result
            done.release()
        cancels.append(engine.submit(prompt, PARAMS, on_done=on_done))
        if i == victim:
            victim_cancel_known.set()
        if rng.random() < 0.3:  # let the engine run: requests arrive mid-prefill and mid-decode
            done.acquire()
            done.release()
    for _ in prompts:
        done.acquire()
    engine.runner.forward = forward
    assert cancelled_mid_prefill and results[victim].finish_reason == "cancelled"
    return results


def check_against(expected: dict[tuple, tuple], recorded: list) -> int:
    """Each finished request equals the reference bit for bit; returns how many were compared."""
    compared = 0
    for seq, logits in recorded:
        if seq.finish_reason == "cancelled":
            continue
        ref, ref_logits = expected[tuple(seq.prompt_ids)]
        got = seq.completion()
        assert got.token_ids == ref.token_ids
        assert torch.equal(logits, ref_logits), f"max |diff| {(logits - ref_logits).abs().max():.3g}"
        assert got.logprobs == ref.logprobs and got.top_logprobs == ref.top_logprobs
        assert torch.equal(got.routed_experts, ref.routed_experts)
        compared += 1
    return compared


# (weights, KV cache dtype): the checkpoint's fp32 with an fp32 cache; int4 with bf16 and with
# int8 rows (the default).
WEIGHTS_AND_KV = [("none", "fp32"), ("int4", "bf16"), ("int4", "int8")]


@pytest.mark.parametrize(("quantize", "kv"), WEIGHTS_AND_KV, ids=["fp32", "int4-kv-bf16", "int4-kv-int8"])
@pytest.mark.parametrize("seed", [0, 1])
def test_interleaved_requests_with_prefix_reuse_equal_cache_less_ones(monkeypatch, quantize, kv, seed):
    rng = random.Random(seed)
    recorder = Recorder(monkeypatch)
    model = make_model(quantize)
    prompts = prompt_tree(rng, 14)
    victim = rng.randrange(len(prompts))  # a long prompt of its own, cancelled mid-prefill
    prompts.insert(victim, prompts[0][:10] + [rng.randrange(256) for _ in range(100)])
    expected = reference(model, prompts, recorder, kv)
    config = model.config
    dtype = kv_dtype(kv)
    kv_bytes = 2 * config.num_layers * config.num_kv_heads * stored_width(dtype, config.head_dim) * dtype.itemsize
    engine = Engine(
        model, ByteTokenizer(), max_batch=rng.choice([2, 3, 4]), prefix_block=rng.choice([4, 8]),
        prefill_chunk=rng.choice([8, 16, 32]), idle_prefill_chunk=rng.choice([16, 64]),
        prefix_cache_gb=128 * kv_bytes / 2**30,  # about 128 positions: evictions
        kv_cache_dtype=kv,
    )
    assert engine.prefix is not None and 64 <= engine.prefix.num_blocks * engine.prefix.block <= 128
    results = serve_interleaved(engine, prompts, victim, rng)
    assert [r.finish_reason == "cancelled" for r in results].count(True) == 1
    assert check_against(expected, recorder.take()) == len(prompts) - 1
    report = engine.prefix_cache_report()
    assert report["hit_tokens"] > 0 and report["evicted_blocks"] > 0, report
    assert sum(r.cached_tokens for r in results) == report["hit_tokens"]
    # The same request twice in a row: the second is served from the cache, with the same bits.
    for prompt in prompts[:3]:
        engine.generate([prompt], PARAMS)
        [again] = engine.generate([prompt], PARAMS)
        assert again.cached_tokens > 0 or len(prompt) <= engine.prefix.block
    assert check_against(expected, recorder.take()) == 6
    assert engine.prefix_cache_report()["in_row_tokens"] > 0  # rows reused in place, not only copied into
    engine.close()


@pytest.mark.parametrize(("quantize", "kv"), WEIGHTS_AND_KV, ids=["fp32", "int4-kv-bf16", "int4-kv-int8"])
def test_a_weight_load_empties_the_prefix_cache(monkeypatch, quantize, kv):
    """After load_weights (also under the same version number) nothing cached is reused: the
    next requests equal a cache-less engine on the new weights, and only then hit again."""
    recorder = Recorder(monkeypatch)
    rng = random.Random(5)
    prompts = [[rng.randrange(256) for _ in range(40)] for _ in range(2)]
    new_weights = Transformer(ModelConfig.debug(max_position_embeddings=256)).init_weights(seed=12).eval()
    state = {name: t.clone() for name, t in new_weights.state_dict().items()}  # quantize_model works in place
    expected = reference(quantize_model(new_weights, quantize), prompts, recorder, kv)
    engine = Engine(make_model(quantize), ByteTokenizer(), max_batch=2, prefix_block=8, kv_cache_dtype=kv)
    for version in (1, 1):  # a reload under the same number is new weights too
        engine.generate(prompts, PARAMS)
        assert engine.generate(prompts[:1], PARAMS)[0].cached_tokens > 0
        recorder.take()
        engine.load_weights(state, version=version)
        assert engine.prefix_cache_report()["used_tokens"] == 0
        after = [engine.generate([p], PARAMS)[0] for p in prompts]
        assert [a.cached_tokens for a in after] == [0, 0] and {a.weight_version for a in after} == {1}
        assert check_against(expected, recorder.take()) == 2
    [again] = engine.generate(prompts[:1], PARAMS)
    assert again.cached_tokens > 0 and check_against(expected, recorder.take()) == 1
    engine.close()
