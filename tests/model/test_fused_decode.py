"""The C++ decode step (model/fused_decode.py, model/csrc/fused_decode.cpp) against the Python
DECODE role of model/runner.py: bit-identical logits, routed experts and cache contents for
several sequences at once, each at its own row and position (MoE, dense, top-1/top-3, GQA 6:1,
a LoRA adapter's residual beside the int4 matrices; fp32, bf16 and int8 KV caches); the engine
using it for what sessions ask (batches, routing records, logprobs, the tool-call constraint,
verified drafts) with the same completions as without it; the env switch and the fallback; and
(slow) 80 greedy steps of composer-mini with identical logits at every step.

The extension compiles once per machine (model/cpu_ext.py; cached under the Composer home).
Run: .venv/bin/python -m pytest tests/model/test_fused_decode.py [-m "not slow"]
"""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from byte_tokenizer import ByteTokenizer

import model.cpu_ext as cpu_ext
import model.fused_decode as fd
from model.adapter import LowRank
from model.config import ModelConfig
from model.engine import Engine
from model.kernels import DECODE, PREFILL, Kernels
from model.kv import KVCache
from model.quant import ADAPTABLE, quantize_model, supports_int4
from model.runner import Runner
from model.sampling import SamplingParams
from model.transformer import Transformer

pytestmark = pytest.mark.skipif(not supports_int4(), reason="this torch has no CPU int4 kernel")


@pytest.fixture(scope="session")
def kernels():
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("no C++ compiler found: the extension cannot be built (the engine runs torch ops)")
    return Kernels(cpu_ext.load_extension())  # a build failure here is a test failure, not a skip


def int4_model(lora: bool = False, **changes) -> Transformer:
    """`lora`: with a rank-4 adapter's residual on every int4 matrix (model/adapter.py)."""
    config = ModelConfig.debug(**changes)
    model = Transformer(config).init_weights(seed=3).eval()
    gen = torch.Generator().manual_seed(4)
    adapter = {
        f"layers.{i}.{name}": LowRank(torch.randn(*w.shape[:-2], 4, w.shape[-1], generator=gen) * 0.1,
                                      torch.randn(*w.shape[:-1], 4, generator=gen) * 0.01)
        for i in range(config.num_layers) for name in ADAPTABLE
        for w in [model.get_parameter(f"layers.{i}.{name}")]
    } if lora else None
    return quantize_model(model, "int4", adapter=adapter)


@pytest.mark.parametrize("kv", [torch.float32, torch.bfloat16, torch.int8], ids=["kv-fp32", "kv-bf16", "kv-int8"])
@pytest.mark.parametrize(
    "changes",
    [{}, {"num_experts": 1, "top_k": 1}, {"top_k": 3}, {"top_k": 1}, {"num_heads": 6, "num_kv_heads": 1},
     {"lora": True}],
    ids=["moe-top2", "dense", "top3", "top1", "gqa-6:1", "lora"],
)
def test_fused_step_equals_the_python_decode_role_bit_for_bit(kernels, changes, kv):
    model = int4_model(**changes)
    caches = [KVCache(model.config, 3, 64, kv) for _ in range(2)]
    runner, fused = Runner(model, caches[0], kernels), fd.FusedDecode.build(model, caches[1], kernels)
    gen = torch.Generator().manual_seed(0)
    prompts = {0: 9, 2: 3, 1: 17}  # row -> prompt length: rows of different lengths decode together
    with torch.inference_mode():
        for row, n in prompts.items():
            ids = torch.randint(0, model.config.vocab_size, (n,), generator=gen)
            for cache in caches:  # the same prompt in both caches (PREFILL role)
                Runner(model, cache, kernels).forward(ids, torch.full((n,), row), torch.arange(n), PREFILL)
        rows, lengths = list(prompts), list(prompts.values())
        for step in range(20):
            tokens = torch.randint(0, model.config.vocab_size, (3,), generator=gen).tolist()
            positions = [n + step for n in lengths]
            ref = runner.forward(torch.tensor(tokens), torch.tensor(rows), torch.tensor(positions), DECODE)
            logits, experts = fused.step(tokens, rows, positions, routing=True)
            assert logits.dtype == torch.float32 and logits.shape == ref.logits.shape
            assert torch.equal(logits, ref.logits), f"step {step}: max |diff| {(logits - ref.logits).abs().max():.3g}"
            assert torch.equal(experts, ref.experts_NLk)
    for a, b in zip(caches[0].k + caches[0].v, caches[1].k + caches[1].v):
        for row, n in prompts.items():
            assert torch.equal(a[row, :, : n + 20], b[row, :, : n + 20])  # the same cache contents


def counting(engine: Engine) -> list[int]:
    """Counts the engine's fused steps, by batch size (wraps its FusedDecode.step)."""
    calls = []
    step = engine.fused.step

    def counted(tokens, *args):
        calls.append(len(tokens))
        return step(tokens, *args)

    engine.fused.step = counted
    return calls


def test_engine_fused_completions_equal_python(kernels):
    model = int4_model(max_position_embeddings=128)
    fused = Engine(model, ByteTokenizer(stop_token_ids=(0,)), max_batch=3)
    python = Engine(model, ByteTokenizer(stop_token_ids=(0,)), max_batch=3, fused_decode=False)
    assert fused.fused is not None and python.fused is None
    calls = counting(fused)
    prompts = [list(b"def f(x): return x + 1\n"), list(b"abc"), list(b"tool please: ")]
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
    for params in (
        SamplingParams(max_tokens=30, ignore_eos=True, speculative=False, top_logprobs=3, return_routing=True),
        SamplingParams(max_tokens=30, ignore_eos=True, temperature=0.8, seed=7),
    ):
        a, b = fused.generate(prompts, params), python.generate(prompts, params)
        for x, y in zip(a, b):
            assert x.token_ids == y.token_ids and x.logprobs == y.logprobs and x.top_logprobs == y.top_logprobs
            assert (x.routed_experts is None) == (not params.return_routing)
            if params.return_routing:
                assert torch.equal(x.routed_experts, y.routed_experts)
                assert x.routed_experts.shape[0] == len(x.prompt_ids) + 30 - 1  # every fed position
    assert max(calls) == 3 and sum(calls) == 2 * 3 * 29  # three rows per call, every step after the first token
    # Under the tool-call constraint (model/constrained.py, applied by the sampler to the logits).
    constrained = [SamplingParams(max_tokens=40, ignore_eos=True, constraint=_constraint(e, tools, "required"))
                   for e in (fused, python)]
    [c], [d] = fused.generate([prompts[2]], constrained[0]), python.generate([prompts[2]], constrained[1])
    assert c.token_ids == d.token_ids and c.text.startswith("<tool_call>")
    # Drafts (prompt lookup, on by default for greedy decoding) are verified in the fused step,
    # as rows at the next positions: the same tokens and logprobs as plain fused decoding.
    calls.clear()
    repetitive = [list(b"abc abc abc abc abc")]
    [a] = fused.generate(repetitive, SamplingParams(max_tokens=40, ignore_eos=True, top_logprobs=3))
    [b] = python.generate(repetitive, SamplingParams(max_tokens=40, ignore_eos=True, speculative=False))
    [c] = fused.generate(repetitive, SamplingParams(max_tokens=40, ignore_eos=True, speculative=False, top_logprobs=3))
    [d] = python.generate(repetitive, SamplingParams(max_tokens=40, ignore_eos=True))
    assert a.token_ids == b.token_ids == c.token_ids == d.token_ids and a.logprobs == c.logprobs
    assert a.top_logprobs == c.top_logprobs
    assert a.num_accepted_draft_tokens > 0 and d.num_accepted_draft_tokens > 0 and c.num_draft_tokens == 0
    assert max(calls) > 1  # a verification ran fused
    # Sequences decoding together do not draft: the batch already shares the weight reads.
    calls.clear()
    fused.generate(repetitive * 2, SamplingParams(max_tokens=20, ignore_eos=True))
    assert max(calls) == 2
    for engine in (fused, python):
        engine.close()


def _constraint(engine: Engine, tools, mode):
    from model.constrained import ToolCallConstraint
    from model.token_table import TokenTable

    tok = engine.tokenizer
    strings = [bytes([i]).decode("latin-1") for i in range(256)]
    return ToolCallConstraint(TokenTable(strings, eos_token_ids=list(tok.stop_token_ids)), tools=tools, mode=mode)


def test_switches_and_fallback(kernels, monkeypatch, capsys):
    model = int4_model()
    monkeypatch.setenv(fd.ENV_VAR, "0")
    assert Engine(model, ByteTokenizer()).fused is None
    assert Engine(model, ByteTokenizer(), fused_decode=True).fused is not None  # explicit beats the env
    monkeypatch.delenv(fd.ENV_VAR)
    assert Engine(model, ByteTokenizer()).kv_dtype == torch.int8  # int4 with the kernels: int8 rows
    fp32 = Transformer(ModelConfig.debug()).init_weights(seed=0).eval()
    fp32_engine = Engine(fp32, ByteTokenizer())
    assert fp32_engine.fused is None and fp32_engine.kv_dtype == torch.float32  # not int4: quietly Python
    with pytest.raises(fd.FusedDecodeUnavailable, match="int4"):
        Engine(fp32, ByteTokenizer(), fused_decode=True)
    # A failed build: the engine runs torch ops without prefix reuse and says why; True raises.
    monkeypatch.setattr(cpu_ext, "_module", None)
    monkeypatch.setattr(cpu_ext, "_error", "no C++ compiler (simulated)")
    capsys.readouterr()
    engine = Engine(model, ByteTokenizer())
    assert engine.fused is None and engine.prefix is None and "simulated" in capsys.readouterr().err
    assert engine.kv_dtype == torch.bfloat16  # int8 rows need the kernels
    with pytest.raises(ValueError, match=r"int8 needs the C\+\+ kernels"):
        Engine(model, ByteTokenizer(), kv_cache_dtype="int8")
    assert engine.prefix_cache_report() == {"enabled": False, "reason": "no C++ compiler (simulated)"}
    [out] = engine.generate([list(b"abc")], SamplingParams(max_tokens=5, ignore_eos=True))
    assert len(out.token_ids) == 5
    with pytest.raises(fd.FusedDecodeUnavailable, match="simulated"):
        Engine(model, ByteTokenizer(), fused_decode=True)


@pytest.mark.slow
def test_composer_mini_int4_fused_greedy_is_the_python_greedy(kernels, composer_mini_dir):
    """80 greedy steps from the chat prompt: identical logits (bit for bit) at every step, and the
    engine's completions identical with the fused step on and off, and with drafts verified."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench.workloads import chat_prompt

    engine = Engine.from_pretrained(composer_mini_dir, quantize="int4", max_batch=1)
    assert engine.fused is not None
    model, prompt = engine.model, engine.tokenizer.encode_chat(chat_prompt())
    n = len(prompt)
    caches = [KVCache(model.config, 1, n + 96, torch.bfloat16) for _ in range(2)]
    runner, fused = Runner(model, caches[0], kernels), fd.FusedDecode.build(model, caches[1], kernels)
    with torch.inference_mode():
        out = runner.forward(torch.tensor(prompt), torch.zeros(n, dtype=torch.long), torch.arange(n), PREFILL,
                             logits_at=[n - 1])
        for a, b in zip(caches[0].k + caches[0].v, caches[1].k + caches[1].v):
            b[:, :, :n].copy_(a[:, :, :n])
        token = int(out.logits[0].argmax())
        for pos in range(n, n + 80):
            ref = runner.forward(torch.tensor([token]), torch.tensor([0]), torch.tensor([pos]), DECODE).logits
            got, _ = fused.step([token], [0], [pos])
            assert torch.equal(got, ref), f"step {pos - n}: max |diff| {(got - ref).abs().max():.3g}"
            token = int(ref[0].argmax())
    params = SamplingParams(max_tokens=80, ignore_eos=True, speculative=False)
    [a] = engine.generate([prompt], params)
    python = Engine(model, engine.tokenizer, max_batch=1, fused_decode=False)
    [b] = python.generate([prompt], params)
    assert a.token_ids == b.token_ids and a.logprobs == b.logprobs
    # Prompt-lookup drafts verified in the fused step (the default for greedy decoding): the same.
    [c] = engine.generate([prompt], SamplingParams(max_tokens=80, ignore_eos=True))
    assert c.num_draft_tokens > 0 and c.token_ids == a.token_ids and c.logprobs == a.logprobs
    for e in (engine, python):
        e.close()
