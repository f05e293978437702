"""Committing the engine's KV memory ahead of use (model/prefault.py): pages are faulted in
without a byte changing, and an engine that prefaults serves exactly as one that does not."""

from __future__ import annotations

import resource

import pytest
import torch
from byte_tokenizer import ByteTokenizer

from model.config import ModelConfig
from model.engine import Engine
from model.prefault import populate
from model.sampling import SamplingParams
from model.transformer import Transformer


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def test_populate_faults_pages_in_and_keeps_what_was_written():
    t = torch.empty(16 * 2**20, dtype=torch.float32)  # 64 MiB of fresh, untouched pages
    head = torch.arange(1000, dtype=torch.float32)
    t[:1000] = head
    if not populate(t):
        pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux 5.14+)")
    assert torch.equal(t[:1000], head)
    before = _minor_faults()
    t.fill_(1.0)  # every page written: none should fault now
    pages = t.numel() * t.element_size() // 4096
    assert _minor_faults() - before < pages // 10


def test_an_engine_that_prefaults_serves_the_same_tokens():
    model = Transformer(ModelConfig.debug(max_position_embeddings=256)).init_weights(seed=0).eval()
    prompts = [list(b"def f(x): return x + 1\n" * 3), list(b"abcabc")]
    params = SamplingParams(max_tokens=16, ignore_eos=True, speculative=False)
    plain = Engine(model, ByteTokenizer(stop_token_ids=(0,)), max_batch=2)
    committed = Engine(model, ByteTokenizer(stop_token_ids=(0,)), max_batch=2, prefault=True)
    try:
        assert plain.prefault_report() is None
        outs = committed.generate(prompts, params)  # while the prefaulter may still be walking
        assert committed.prefaulter.ready.wait(60)
        report = committed.prefault_report()
        memory = [*committed.cache.k, *committed.cache.v]
        if committed.prefix is not None:
            memory += [*committed.prefix._kv, committed.prefix._experts]
        assert report["total_bytes"] == sum(t.numel() * t.element_size() for t in memory)
        if report["supported"]:
            assert report["ready"] and report["populated_bytes"] == report["total_bytes"]
        assert [o.token_ids for o in outs] == [o.token_ids for o in plain.generate(prompts, params)]
    finally:
        plain.close()
        committed.close()

