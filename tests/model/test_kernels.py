"""The engine's C++ kernels (model/csrc/kernels.cpp via model/kernels.py): each against an fp64
reference, and row-invariant: a row's bits do not change with the other rows of the call, the
offset it sits at, how a prompt is cut into chunks, or which sequences share the call. The torch
fallback (no extension) against the same reference.

Run: .venv/bin/python -m pytest tests/model/test_kernels.py
"""

from __future__ import annotations

import os
import shutil

import pytest
import torch

import model.cpu_ext as cpu_ext
from model.kernels import DECODE, MATRIX_BF16, MATRIX_F32, PREFILL, VECTOR, Kernels
from model.kv import dequantize_rows
from model.quant import Int4Linear

H, K, DH, MAX_LEN = 6, 2, 16, 300


@pytest.fixture(scope="module")
def kernels() -> Kernels:
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("no C++ compiler found: the extension cannot be built")
    return Kernels(cpu_ext.load_extension())


def subsets(n: int):
    """(start, length) row ranges of an n-row call: alone, at offsets, tails of tiles."""
    return [(0, 1), (3, 1), (1, 2), (5, 7), (0, 33), (7, n - 7), (0, n)]


@pytest.mark.parametrize("shape", [(64, 96), (17, 33), (96, 200)], ids=["64x96", "odd", "wide"])
def test_linear_kernels_match_fp64_and_are_row_invariant(kernels, shape):
    in_features, out_features = shape
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(out_features, in_features, generator=gen)
    x = torch.randn(70, in_features, generator=gen)
    ref = x.double() @ w.double().t()
    ext = kernels.ext
    cases = {"rowdot fp32": (lambda a: ext.linear_rowdot(a, w), 1e-5),
             "rowdot bf16 weights": (lambda a: ext.linear_rowdot(a, w.bfloat16()), 3e-2)}
    if kernels.bf16_matrix:
        packed = ext.pack_vnni(w)
        cases["vnni bf16"] = (lambda a: ext.linear_vnni(a, packed, out_features), 0.3)
    for name, (fn, tol) in cases.items():
        full = fn(x)
        assert (full.double() - ref).abs().max() < tol * in_features**0.5, name
        for start, n in subsets(len(x)):
            assert torch.equal(fn(x[start : start + n].contiguous()), full[start : start + n]), (name, start, n)


@pytest.mark.parametrize("width", [(48, 64), (33, 41)], ids=["even", "odd"])
def test_moe_kernel_equals_the_expert_by_expert_path_and_is_row_invariant(kernels, width):
    """moe_vnni (a MoE layer's routed experts in one call) gives the bits of the runner's path:
    rows grouped stably by expert, linear_vnni, F.silu(gate) * up, linear_vnni, each output times
    its weight and index_add_ into zeros; a token's bits do not depend on the other tokens."""
    if not kernels.bf16_matrix:
        pytest.skip("no bf16 matrix unit: prompts take the expert-by-expert fp32 path")
    dim, hidden = width
    num_experts, top_k = 4, 2
    gen = torch.Generator().manual_seed(1)
    w13 = [torch.randn(2 * hidden, dim, generator=gen) * 0.2 for _ in range(num_experts)]
    w2 = [torch.randn(dim, hidden, generator=gen) * 0.2 for _ in range(num_experts)]
    ext = kernels.ext
    p13, p2 = [ext.pack_vnni(w) for w in w13], [ext.pack_vnni(w) for w in w2]
    h = torch.randn(70, dim, generator=gen)
    scores = torch.randn(70, num_experts, generator=gen)
    scores[:, 1] -= 100  # expert 1 gets no row
    weights, experts = scores.softmax(-1).topk(top_k, dim=-1)

    flat = experts.flatten()
    order = flat.argsort(stable=True)
    token = order // top_k
    y = torch.empty(len(flat), dim)
    start = 0
    for e, count in enumerate(torch.bincount(flat, minlength=num_experts).tolist()):
        gate, up = ext.linear_vnni(h[token[start : start + count]], p13[e], 2 * hidden).chunk(2, dim=-1)
        y[start : start + count] = ext.linear_vnni(torch.nn.functional.silu(gate) * up, p2[e], dim)
        start += count
    expected = torch.zeros_like(h).index_add_(0, token, y * weights.flatten()[order].unsqueeze(-1))

    full = ext.moe_vnni(h, experts, weights, p13, p2)
    assert torch.equal(full, expected)
    assert torch.equal(ext.moe_vnni(h[20:65], experts[20:65], weights[20:65], p13, p2), full[20:65])
    with pytest.raises(RuntimeError, match="outside"):
        ext.moe_vnni(h, experts + 3, weights, p13, p2)
    with pytest.raises(RuntimeError, match="packed weights do not match"):
        ext.moe_vnni(h, experts, weights, p2, p13)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8], ids=["fp32", "bf16", "int8"])
def test_rotary_store_equals_apply_rotary_and_store_rows(kernels, dtype):
    """The runner's and the fused step's rotary embedding and cache write, in one call: the bits
    of layers.apply_rotary and Kernels.store_rows at each token's (row, position), nothing else
    written; positions outside the cache refused."""
    from model.layers import Rotary, apply_rotary

    gen = torch.Generator().manual_seed(2)
    n, rows_total = 40, 3
    rotary = Rotary(DH, MAX_LEN, 10000.0)
    qkv = torch.randn(n, (H + 2 * K) * DH, generator=gen)
    rows, pos = torch.randint(0, rows_total, (n,), generator=gen), torch.randperm(MAX_LEN, generator=gen)[:n]
    width = DH + 4 if dtype == torch.int8 else DH
    cache_k, cache_v = (torch.zeros(rows_total, K, MAX_LEN, width, dtype=dtype) for _ in range(2))
    q = kernels.ext.rotary_store(qkv, rotary.cos, rotary.sin, rows, pos, cache_k, cache_v, H)

    qk, v = qkv.split([(H + K) * DH, K * DH], dim=-1)
    expected_q, k = apply_rotary(qk.view(1, n, H + K, DH), rotary.cos[pos][None], rotary.sin[pos][None])[0].split([H, K], dim=1)
    want_k, want_v = torch.zeros_like(cache_k), torch.zeros_like(cache_v)
    want_k[rows, :, pos] = kernels.store_rows(k, dtype)
    want_v[rows, :, pos] = kernels.store_rows(v.view(n, K, DH), dtype)
    assert torch.equal(q, expected_q) and torch.equal(cache_k, want_k) and torch.equal(cache_v, want_v)
    with pytest.raises(RuntimeError, match="outside the cache"):
        kernels.ext.rotary_store(qkv[:1], rotary.cos, rotary.sin, rows[:1], torch.tensor([MAX_LEN]), cache_k, cache_v, H)


def test_role_linears_pick_the_kernel_per_role(kernels):
    layer = Int4Linear(torch.randn(64, 96) * 0.05)
    linear = kernels.linear(layer)
    x = torch.randn(5, 96)
    decode = torch.ops.aten._weight_int4pack_mm_for_cpu(x.bfloat16(), layer.packed, 32, layer.scales_and_zeros).float()
    assert torch.equal(linear(x, DECODE), decode)  # torch's int4 kernel, bf16 activations
    prefill = linear(x, PREFILL)  # the dense bf16 copy
    assert not torch.equal(prefill, decode) and (prefill - decode).abs().max() < 0.05


def reference_attention(q, cache_k, cache_v, rows, pos):
    out = torch.empty(q.shape, dtype=torch.float64)
    for n in range(len(q)):
        group, dh = q.shape[1] // cache_k.shape[1], q.shape[2]
        keys = dequantize_rows(cache_k[rows[n], :, : pos[n] + 1]).double().repeat_interleave(group, 0)
        values = dequantize_rows(cache_v[rows[n], :, : pos[n] + 1]).double().repeat_interleave(group, 0)
        scores = (q[n].double().unsqueeze(1) @ keys.transpose(1, 2)).squeeze(1) / dh**0.5
        out[n] = (scores.softmax(-1).unsqueeze(1) @ values).squeeze(1)
    return out


def run(kernels, q, cache_k, cache_v, rows, pos, mode):
    out = torch.empty_like(q)
    kernels.ext.attention(q.contiguous(), cache_k, cache_v, torch.tensor(rows), torch.tensor(pos), out, mode)
    return out


# (query heads, key/value heads, head width): decoding has a register path where the width is 2,
# 4, 8 or 16 vectors (8 or 16 lanes), groups of up to four heads, and a path for any other width.
GEOMETRIES = [(6, 2, 16), (6, 2, 64), (12, 2, 32), (5, 1, 24)]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "h{}-kv{}-d{}".format(*g))
@pytest.mark.parametrize("kv", [torch.float32, torch.bfloat16, torch.int8], ids=["kv-fp32", "kv-bf16", "kv-int8"])
@pytest.mark.parametrize("mode", [VECTOR, MATRIX_F32, MATRIX_BF16], ids=["vector", "matrix-fp32", "matrix-bf16"])
def test_attention_matches_fp64_and_is_invariant_to_chunks_and_batches(kernels, mode, kv, geometry):
    if mode == MATRIX_BF16 and not kernels.bf16_matrix:
        pytest.skip("no bf16 matrix unit on this CPU")
    H, K, DH = geometry
    gen = torch.Generator().manual_seed(1)
    cache_k = kernels.store_rows(torch.randn(3, K, MAX_LEN, DH, generator=gen), kv)
    cache_v = kernels.store_rows(torch.randn(3, K, MAX_LEN, DH, generator=gen), kv)
    # Row 1: a chunk at positions 100..229 (the first 100 "cached"); row 2: a prompt from 0.
    rows = [1] * 130 + [2] * 70
    pos = list(range(100, 230)) + list(range(70))
    q = torch.randn(len(rows), H, DH, generator=gen)
    full = run(kernels, q, cache_k, cache_v, rows, pos, mode)
    tol = 2e-2 if mode == MATRIX_BF16 else 1e-5
    assert (full.double() - reference_attention(q, cache_k, cache_v, rows, pos)).abs().max() < tol
    # The same queries cut differently: later chunks, single tokens, another sequence alone.
    for start, end in [(0, 1), (40, 130), (129, 130), (130, 200), (60, 150), (5, 6)]:
        part = run(kernels, q[start:end], cache_k, cache_v, rows[start:end], pos[start:end], mode)
        assert torch.equal(part, full[start:end]), (start, end)
    # Whatever lies after a query's position (later tokens, garbage, NaN) does not reach it.
    poisoned_k, poisoned_v = cache_k.clone(), cache_v.clone()
    for poisoned in (poisoned_k, poisoned_v):
        if kv == torch.int8:  # values that decode to NaN: the rows' scales
            poisoned[1, :, 180:, DH:] = torch.tensor([float("nan")]).view(torch.int8)
        else:
            poisoned[1, :, 180:] = float("nan")
    part = run(kernels, q[:80], poisoned_k, poisoned_v, rows[:80], pos[:80], mode)
    assert torch.equal(part, full[:80])


@pytest.mark.parametrize("kv", [torch.float32, torch.bfloat16, torch.int8], ids=["kv-fp32", "kv-bf16", "kv-int8"])
def test_decoding_several_tokens_of_one_row_equals_each_alone(kernels, kv):
    """A draft's tokens share their sequence's cache row, and decoding reads each split of it once
    for all of them: interleaved with another row, across a split's boundary (512 positions),
    every token's output is the one it gets alone."""
    gen = torch.Generator().manual_seed(4)
    cache_k = kernels.store_rows(torch.randn(3, 2, 1100, 64, generator=gen), kv)
    cache_v = kernels.store_rows(torch.randn(3, 2, 1100, 64, generator=gen), kv)
    rows = [0, 0, 2, 0, 0, 2, 1, 0]
    pos = [509, 510, 40, 511, 512, 41, 1030, 513]
    q = torch.randn(len(rows), 6, 64, generator=gen)
    together = run(kernels, q, cache_k, cache_v, rows, pos, VECTOR)
    for n in range(len(rows)):
        assert torch.equal(run(kernels, q[n:n + 1], cache_k, cache_v, rows[n:n + 1], pos[n:n + 1], VECTOR), together[n:n + 1]), n
    assert (together.double() - reference_attention(q, cache_k, cache_v, rows, pos)).abs().max() < 1e-5


def test_int8_rows_are_their_values_over_a_per_row_scale(kernels):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(40, K, DH, generator=gen) * torch.logspace(-3, 3, 40).view(40, 1, 1)
    x[7, 1] = 0.0  # an all-zero row
    stored = kernels.store_rows(x, torch.int8)
    assert stored.shape == (40, K, DH + 4) and stored.dtype == torch.int8
    scale = x.abs().amax(-1, keepdim=True) / 127
    assert torch.equal(stored[..., DH:].contiguous().view(torch.float32), scale)
    values = stored[..., :DH].float()
    assert values.abs().max() <= 127 and torch.equal(values.abs().amax(-1)[x.abs().amax(-1) > 0], torch.full((79,), 127.0))
    assert not values[7, 1].any()
    error = (dequantize_rows(stored) - x).abs()
    assert (error <= scale / 2 * (1 + 1e-6)).all()  # rounded to nearest


def test_the_kernels_run_on_torchs_threads(kernels):
    """Built without OpenMP, ATen's parallel_for (a header `#pragma omp parallel`) runs every
    task on the calling thread, whatever torch's thread count."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert kernels.ext.parallel_width() == 2
        torch.set_num_threads(1)
        assert kernels.ext.parallel_width() == 1
    finally:
        torch.set_num_threads(threads)


def test_a_build_with_other_flags_gets_its_own_directory(monkeypatch):
    here = cpu_ext.build_directory()
    cflags, ldflags = cpu_ext.compile_flags()
    monkeypatch.setattr(cpu_ext, "compile_flags", lambda: ([f for f in cflags if f != "-fopenmp"], ldflags))
    assert cpu_ext.build_directory() != here


def test_the_torch_fallback_matches_the_reference():
    fallback = Kernels(None, "no extension (test)")
    gen = torch.Generator().manual_seed(2)
    cache_k, cache_v = (torch.randn(2, K, 64, DH, generator=gen) for _ in range(2))
    rows, pos = [0, 0, 0, 1], [5, 6, 7, 30]
    q = torch.randn(4, H, DH, generator=gen)
    out = fallback.attention(q, cache_k, cache_v, torch.tensor(rows), torch.tensor(pos), PREFILL, bf16=False)
    assert (out.double() - reference_attention(q, cache_k, cache_v, rows, pos)).abs().max() < 1e-5
