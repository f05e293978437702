"""The prefix cache's pool (model/prefix_cache.py) on its own: exact block chains, the last token
always left to compute, copies in and out of cache rows, leaf-first LRU eviction in a small pool,
namespaces (weights), and the counters it reports.

Run: .venv/bin/python -m pytest tests/model/test_prefix_cache.py
"""

from __future__ import annotations

import torch

from model.config import ModelConfig
from model.kv import KVCache
from model.prefix_cache import PrefixCache

CONFIG = ModelConfig.debug(num_layers=2)
BLOCK = 4


def cache_with(rows: int = 2, max_len: int = 64) -> KVCache:
    cache = KVCache(CONFIG, rows, max_len, torch.float32)
    for i, t in enumerate(cache.k + cache.v):  # position p of row r holds 1000 i + 100 r + p
        t.copy_((torch.arange(max_len).view(1, 1, -1, 1) + 100 * torch.arange(rows).view(-1, 1, 1, 1)
                 + 1000 * i).expand_as(t))
    return cache


def experts(n: int) -> torch.Tensor:
    return torch.arange(n * 2 * 2).view(n, 2, 2) % 4  # (positions, L, k)


def test_a_hit_is_whole_blocks_of_the_same_prefix_and_leaves_the_last_token():
    cache = cache_with()
    pool = PrefixCache(cache, capacity=64, block=BLOCK, top_k=2)
    prompt = list(range(10, 23))  # 13 tokens: 3 full blocks
    assert pool.store(prompt, 13, cache, 0, experts(13), "v0") == 3
    assert len(pool.match(prompt, "v0")) == 3
    assert len(pool.match(prompt[:12], "v0")) == 2  # 12 tokens: the last must be computed
    assert len(pool.match([*prompt[:9], 99, *prompt[10:]], "v0")) == 2  # differs in block 3
    assert len(pool.match([99, *prompt[1:]], "v0")) == 0  # a block stands for its whole prefix
    assert pool.store(prompt, 13, cache, 0, experts(13), "v0") == 0  # nothing new
    report = pool.report()
    assert (report["queries"], report["hit_tokens"], report["stored_blocks"]) == (4, 7 * BLOCK, 3)
    assert report["used_tokens"] == 12 and report["capacity_tokens"] == 64


def test_load_copies_keys_values_and_experts_into_another_row():
    cache = cache_with()
    pool = PrefixCache(cache, capacity=64, block=BLOCK, top_k=2)
    prompt = list(range(9))
    pool.store(prompt, 8, cache, 1, experts(8), "v0")  # from row 1
    nodes = pool.match(prompt, "v0")
    got = pool.load(nodes, cache, 0)  # into row 0
    assert torch.equal(got, experts(8).to(torch.int16))
    for i, t in enumerate(cache.k + cache.v):
        assert torch.equal(t[0, :, :8], t[1, :, :8])  # row 1's first 8 positions, now in row 0
        assert float(t[0, 0, 8, 0]) == 1000 * i + 8  # the rest of row 0 untouched


def test_a_row_that_holds_blocks_is_chosen_and_only_the_rest_is_copied(monkeypatch):
    cache = cache_with(rows=3)
    pool = PrefixCache(cache, capacity=64, block=BLOCK, top_k=2)
    first = list(range(13))  # 3 blocks, computed in row 1
    pool.store(first, 12, cache, 1, experts(12), "v0")
    written = []
    write_blocks = cache.write_blocks
    monkeypatch.setattr(cache, "write_blocks", lambda row, start, blocks: (written.append((row, start, len(blocks[0]))),
                                                                           write_blocks(row, start, blocks)))
    nodes = pool.match([*first, 50, 51, 52, 53], "v0")  # the session's next step
    assert pool.closest_row(nodes, [0, 1, 2]) == 1  # the row that holds them, not the last free one
    pool.load(nodes, cache, 1)
    assert written == [] and pool.report()["in_row_tokens"] == 12
    # Row 0 takes a branch of the first block: it holds that block, then its own.
    branch = [*first[:4], 90, 91, 92, 93, 94]
    pool.load(pool.match(branch, "v0"), cache, 0)
    assert written == [(0, 0, 1)]
    pool.store(branch, 8, cache, 0, experts(8), "v0")
    # Back to the first prompt in row 0: the shared first block stays, blocks 2 and 3 are copied.
    pool.load(nodes, cache, 0)
    assert written[-1] == (0, BLOCK, 2)
    for t in cache.k + cache.v:
        assert torch.equal(t[0, :, :12], t[1, :, :12])
    pool.clear()  # new weights: a row holds nothing the pool can vouch for
    pool.store(first, 12, cache, 1, experts(12), "v1")
    pool.load(pool.match(first, "v1"), cache, 2)
    assert pool.closest_row(pool.match(first, "v1"), [2, 0]) == 0  # row 2 holds them, though not the last


def test_eviction_is_least_recent_first_and_leaf_first():
    cache = cache_with()
    pool = PrefixCache(cache, capacity=4 * BLOCK, block=BLOCK, top_k=2)  # room for 4 blocks
    a = list(range(100, 113))  # 3 blocks
    b = a[:4] + list(range(200, 209))  # shares a's first block, 2 blocks of its own
    pool.store(a, 12, cache, 0, experts(12), "v0")
    assert pool.store(b, 12, cache, 1, experts(12), "v0") == 2  # one block of `a` evicted
    # a's leaf went, not the shared root: b is whole, a lost its last block.
    assert len(pool.match(b, "v0")) == 3 and len(pool.match(a, "v0")) == 2
    pool.match(a, "v0")  # a is now the more recent chain
    pool.store(list(range(300, 309)), 8, cache, 0, experts(8), "v0")  # 2 new blocks: b's 2 leaves go
    assert len(pool.match(a, "v0")) == 2 and len(pool.match(b, "v0")) == 1
    assert pool.report()["evicted_blocks"] == 3


def test_a_chain_longer_than_the_pool_keeps_its_head():
    cache = cache_with()
    pool = PrefixCache(cache, capacity=2 * BLOCK, block=BLOCK, top_k=2)
    prompt = list(range(17))
    assert pool.store(prompt, 16, cache, 0, experts(16), "v0") == 2
    assert len(pool.match(prompt, "v0")) == 2  # the first two blocks, not an orphaned tail


def test_new_weights_empty_the_pool():
    cache = cache_with()
    pool = PrefixCache(cache, capacity=64, block=BLOCK, top_k=2)
    prompt = list(range(9))
    pool.store(prompt, 8, cache, 0, experts(8), "v0")
    assert len(pool.match(prompt, "v1")) == 0
    assert pool.report()["used_tokens"] == 0 and pool.report()["resets"] == 1
    assert len(pool.match(prompt, "v0")) == 0  # gone for good, not hidden


def test_a_zero_capacity_pool_stores_nothing():
    cache = cache_with()
    pool = PrefixCache(cache, capacity=0, block=BLOCK, top_k=2)
    assert pool.store(list(range(9)), 8, cache, 0, experts(8), "v0") == 0
    assert pool.match(list(range(9)), "v0") == []
