"""Prefix reuse: the keys, values and routed experts of prompt positions the engine has already
computed, kept in a bounded pool of blocks and copied into a new request's cache row.

A prompt is cut into blocks of `block` tokens. Like vLLM's automatic prefix caching, block i is
found by its parent (the block before it) and its own tokens, so a block stands for the whole
prefix up to its end; unlike a hash, the key holds the tokens themselves (a Python dict compares
them), so two different prefixes can never share a block. Only full blocks of prompt positions
computed in prefill enter the pool (never decoded tokens, whose kernels differ: model/kernels.py),
and a hit leaves at least the prompt's last token to compute, which gives the first logits.
Because the engine's kernels are row-invariant, a prompt served from the pool gives the same bits
as one computed whole.

Memory is bounded (`capacity` positions; pages are touched as they fill, or ahead of use:
model/prefault.py); when full, the least recently used block goes. Every lookup and insert
touches a chain leaf first and root last, so a parent is always more recent than its children and
eviction takes leaves first, as vLLM frees a request's blocks tail first. The pool belongs to one set of weights (`namespace`: the engine's
weight version and KV dtype); a new namespace empties it.

A cache row keeps its positions when its sequence ends, so the pool remembers which blocks each
row holds (those it loaded or stored: a row holds what it computed bit for bit, the kernels being
row-invariant). A session's next request is given the row that holds the most of its blocks, and
only the others are copied (7k positions of int8 rows are ~85 MB: 12-19 ms a follow-up step).

    pool = PrefixCache(cache, capacity=65536, block=32)
    nodes = pool.match(prompt, namespace)             # the longest cached prefix, in blocks
    row = free_rows.pop(pool.closest_row(nodes, free_rows))
    pool.load(nodes, cache, row)                      # in the row: len(nodes) * 32 positions
    pool.store(prompt, upto, cache, row, experts_TLk) # after prefill: blocks of prompt[:upto]

Legend: L layers, K key/value heads, P positions per block, Dh head width, k experts per token.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch

from model.kv import KVCache

DEFAULT_BLOCK = 32


@dataclass(eq=False)
class Node:
    id: int
    slot: int
    key: tuple
    """(parent node id, the block's tokens); the root's parent is -1."""


@dataclass
class PrefixStats:
    queries: int = 0
    query_tokens: int = 0
    hit_tokens: int = 0
    in_row_tokens: int = 0
    """Of the hits, positions the request's row held already (not copied)."""
    stored_blocks: int = 0
    evicted_blocks: int = 0
    resets: int = 0


class PrefixCache:
    def __init__(self, cache: KVCache, capacity: int, block: int = DEFAULT_BLOCK, top_k: int = 1) -> None:
        if block < 1 or capacity < 0:
            raise ValueError(f"prefix cache: block must be positive and capacity non-negative, got {block}, {capacity}")
        self.block = block
        self.num_blocks = capacity // block
        k = cache.k[0]
        shape = (self.num_blocks, k.shape[1], block, k.shape[3])
        self._kv = [torch.empty(shape, dtype=k.dtype, device=k.device) for _ in range(2 * len(cache.k))]
        self._experts = torch.empty((self.num_blocks, block, len(cache.k), top_k), dtype=torch.int16)
        self._bytes_per_block = block * (cache.bytes_per_position + len(cache.k) * top_k * 2)
        self._by_key: dict[tuple, Node] = {}
        self._lru: OrderedDict[int, Node] = OrderedDict()
        self._free = list(range(self.num_blocks - 1, -1, -1))
        self._ids = itertools.count()
        self._namespace: Any = None
        self._held: dict[int, list[int]] = {}
        """Per cache row, the ids of the blocks its first positions hold, in order."""
        self.stats = PrefixStats()

    # ---- lookup -------------------------------------------------------------------------------

    def match(self, tokens: list[int], namespace: Any, *, count: bool = True) -> list[Node]:
        """The cached blocks of the longest prefix of `tokens`, leaving at least the last token
        uncached; `count`: record it in the stats (a request admitted, not a probe)."""
        self._enter(namespace)
        nodes, parent = [], -1
        for start in range(0, len(tokens) - 1 - self.block + 1, self.block):
            node = self._by_key.get((parent, tuple(tokens[start : start + self.block])))
            if node is None:
                break
            nodes.append(node)
            parent = node.id
        self._touch(nodes)
        if count:
            self.stats.queries += 1
            self.stats.query_tokens += len(tokens)
            self.stats.hit_tokens += len(nodes) * self.block
        return nodes

    def closest_row(self, nodes: list[Node], rows: list[int]) -> int:
        """The index in `rows` of the row that already holds the most of `nodes`' blocks (on a
        tie the last: the most recently freed)."""
        ids = [n.id for n in nodes]
        return max(range(len(rows)), key=lambda i: (self._held_of(ids, rows[i]), i))

    def _held_of(self, ids: list[int], row: int) -> int:
        held = self._held.get(row, [])
        return next((i for i, (a, b) in enumerate(zip(ids, held)) if a != b), min(len(ids), len(held)))

    def load(self, nodes: list[Node], cache: KVCache, row: int) -> torch.Tensor:
        """Puts the blocks' keys and values at positions [0, len(nodes) * block) of `row` (copying
        those it does not hold already); returns their routed experts, (positions, L, k) int16.
        The row's later positions are the caller's to overwrite."""
        ids = [n.id for n in nodes]
        held, self._held[row] = self._held_of(ids, row), ids
        self.stats.in_row_tokens += held * self.block
        slots = torch.tensor([n.slot for n in nodes], dtype=torch.long)
        if held < len(nodes):
            cache.write_blocks(row, held * self.block, [pool.index_select(0, slots[held:]) for pool in self._kv])
        return self._experts.index_select(0, slots).flatten(0, 1)

    # ---- insertion ----------------------------------------------------------------------------

    def store(self, tokens: list[int], upto: int, cache: KVCache, row: int, experts_TLk: torch.Tensor,
              namespace: Any) -> int:
        """Adds the full blocks of `tokens[:upto]` that are not cached yet, from `row` of the
        cache (its positions [0, upto) must hold them) and `experts_TLk` (the routed experts of
        positions [0, upto)). Returns how many blocks it added."""
        self._enter(namespace)
        if self.num_blocks == 0:
            return 0
        chain, new, parent = [], [], -1
        for start in range(0, upto - self.block + 1, self.block):
            key = (parent, tuple(tokens[start : start + self.block]))
            node = self._by_key.get(key)
            if node is None:
                slot = self._take_slot(protect=chain)
                if slot is None:
                    break
                node = Node(next(self._ids), slot, key)
                self._by_key[key] = node
                new.append((start, node))
            chain.append(node)
            parent = node.id
        self._copy_out(new, cache, row, experts_TLk)
        self._held[row] = [n.id for n in chain]
        self._touch(chain)
        self.stats.stored_blocks += len(new)
        return len(new)

    def _copy_out(self, new: list[tuple[int, Node]], cache: KVCache, row: int, experts_TLk: torch.Tensor) -> None:
        # Runs of consecutive new blocks are copied together (one indexed write per layer).
        for _, run in itertools.groupby(enumerate(new), key=lambda item: item[1][0] - item[0] * self.block):
            run = [item for _, item in run]
            start, slots = run[0][0], torch.tensor([node.slot for _, node in run])
            for pool, blocks in zip(self._kv, cache.read_blocks(row, start, len(run), self.block)):
                pool.index_copy_(0, slots, blocks)
            end = start + len(run) * self.block
            self._experts.index_copy_(0, slots, experts_TLk[start:end].to(torch.int16).unflatten(0, (len(run), self.block)))

    def _take_slot(self, protect: list[Node]) -> int | None:
        if self._free:
            return self._free.pop()
        protected = {n.id for n in protect}
        for node_id, node in self._lru.items():  # least recent first: a leaf (see the docstring)
            if node_id not in protected:
                self._evict(node)
                return self._free.pop()
        return None

    def _evict(self, node: Node) -> None:
        del self._lru[node.id]
        del self._by_key[node.key]
        self._free.append(node.slot)
        self.stats.evicted_blocks += 1

    def _touch(self, chain: list[Node]) -> None:
        for node in reversed(chain):  # leaf first, root last: the root ends most recent
            self._lru[node.id] = node
            self._lru.move_to_end(node.id)

    def _enter(self, namespace: Any) -> None:
        if namespace != self._namespace:
            if self._by_key or self._held:
                self.clear()
            self._namespace = namespace

    def clear(self) -> None:
        """Drops every block (new weights: nothing cached may be reused)."""
        self._by_key.clear()
        self._lru.clear()
        self._held.clear()
        self._free = list(range(self.num_blocks - 1, -1, -1))
        self.stats.resets += 1

    def memory_regions(self, parts: int) -> list[list[torch.Tensor]]:
        """The pool's memory in `parts` runs of slots, lowest first (the order slots are taken):
        each run as one view per pool tensor (model/prefault.py walks them)."""
        bounds = [self.num_blocks * i // parts for i in range(parts + 1)]
        return [[t[a:b] for t in (*self._kv, self._experts)] for a, b in itertools.pairwise(bounds) if b > a]

    # ---- reporting ----------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        s = self.stats
        return {
            "block_tokens": self.block,
            "capacity_tokens": self.num_blocks * self.block,
            "capacity_bytes": self.num_blocks * self._bytes_per_block,
            "used_tokens": len(self._lru) * self.block,
            "used_bytes": len(self._lru) * self._bytes_per_block,
            "queries": s.queries,
            "query_tokens": s.query_tokens,
            "hit_tokens": s.hit_tokens,
            "hit_rate": s.hit_tokens / s.query_tokens if s.query_tokens else 0.0,
            "in_row_tokens": s.in_row_tokens,
            "stored_blocks": s.stored_blocks,
            "evicted_blocks": s.evicted_blocks,
            "resets": s.resets,
        }
