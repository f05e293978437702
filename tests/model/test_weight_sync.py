"""Engine.load_weights (model/engine.py, model/weights.py): afterwards the engine's logprobs are the
trainer's forward on the new weights; partial updates under Hugging Face and own names; refused
updates change nothing; int4 engines re-quantize exactly as a fresh quantization would and the
fused step follows; and the in-flight policies, driven deterministically by holding the worker
after a decoding step: a stream running during a load finishes on its version ("finish"), or is
ended and resumed on the new one ("abort"), and each completion says which version it ran on.

Run: .venv/bin/python -m pytest tests/model/test_weight_sync.py -q
"""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch
from byte_tokenizer import ByteTokenizer

from model.config import ModelConfig
from model.engine import Engine
from model.hf import CheckpointError, hf_slots, hf_state_dict, save_model
from model.quant import quantize_model, supports_int4
from model.sampling import SamplingParams
from model.transformer import Transformer, completion_logprobs
from model.weights import WeightUpdateError

PROMPT = list(b"def add(a, b):\n    return")
GREEDY = SamplingParams(max_tokens=24, ignore_eos=True, speculative=False)
needs_int4 = pytest.mark.skipif(not supports_int4(), reason="this torch has no CPU int4 kernel")


def model(seed: int, **changes) -> Transformer:
    config = ModelConfig.debug(max_position_embeddings=128, **changes)
    return Transformer(config).init_weights(seed=seed, std=0.1).eval()


def engine_for(m: Transformer, **kwargs) -> Engine:
    return Engine(m, ByteTokenizer(stop_token_ids=(0,)), max_batch=4, **kwargs)


@pytest.fixture
def engine():
    engine = engine_for(model(0))
    yield engine
    engine.close()


def snapshot(m: Transformer) -> dict[str, torch.Tensor]:
    return {name: t.clone() for name, t in m.state_dict().items()}


def assert_same_tensors(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert actual.keys() == expected.keys()
    for name, t in expected.items():
        assert torch.equal(actual[name], t), name


def test_after_a_load_the_engine_agrees_with_the_trainers_forward(engine):
    trainer = model(7)
    params = SamplingParams(max_tokens=24, temperature=1.0, top_p=1.0, seed=3, return_routing=True, ignore_eos=True)
    [before] = engine.generate([PROMPT], params)
    done = engine.load_weights(hf_state_dict(trainer), version=7)
    assert (done.version, done.tensors, done.aborted) == (7, len(hf_slots(trainer.config)), 0)
    assert engine.weight_version == 7 and engine.cache.weight_version == 7 and engine.cache.resets == 1
    [after] = engine.generate([PROMPT], params)
    assert (before.weight_version, after.weight_version) == (0, 7)
    with torch.no_grad():
        new = completion_logprobs(trainer, PROMPT, after.token_ids, after.routed_experts)
        stale = completion_logprobs(trainer, PROMPT, before.token_ids, before.routed_experts)
    print(f"\nfp32 after load_weights: max |engine - trainer| logprob {float((new - torch.tensor(after.logprobs)).abs().max()):.2e}")
    assert float((new - torch.tensor(after.logprobs)).abs().max()) < 1e-4
    assert float((stale - torch.tensor(before.logprobs)).abs().max()) > 1e-2  # the old weights do not agree
    assert_same_tensors(engine.model.state_dict(), trainer.state_dict())


def test_a_partial_update_under_own_and_hf_names_changes_only_those_weights(engine):
    donor, expected = model(7), model(0)
    F = donor.config.intermediate_size
    update = {
        "layers.0.attn.qkv.weight": donor.layers[0].attn.qkv.weight,
        "model.layers.1.block_sparse_moe.experts.2.w3.weight": donor.layers[1].moe.experts.w13_EFD[2, F:],
        "model.norm.weight": donor.norm.weight.to(torch.bfloat16),  # any float dtype, converted
    }
    with torch.no_grad():
        expected.layers[0].attn.qkv.weight.copy_(donor.layers[0].attn.qkv.weight)
        expected.layers[1].moe.experts.w13_EFD[2, F:].copy_(donor.layers[1].moe.experts.w13_EFD[2, F:])
        expected.norm.weight.copy_(donor.norm.weight.to(torch.bfloat16))
    assert engine.load_weights(update).version == 1  # the default: the current version + 1
    assert_same_tensors(engine.model.state_dict(), expected.state_dict())


def test_a_checkpoint_directory_loads_by_path(engine, tmp_path):
    trainer = model(7)
    save_model(trainer, tmp_path)
    engine.load_weights(tmp_path, version=2)
    assert_same_tensors(engine.model.state_dict(), trainer.state_dict())
    with pytest.raises(CheckpointError, match=r"no .*safetensors"):
        engine.load_weights(tmp_path / "missing")


def bad_updates(m: Transformer) -> list[tuple[dict, str]]:
    qkv = m.layers[0].attn.qkv.weight
    nan = qkv.clone()
    nan[3, 5] = float("nan")
    good_norm = torch.full_like(m.norm.weight, 2.0)
    return [
        ({}, "no tensors"),
        ({"model.layers.9.self_attn.q_proj.weight": qkv}, r"unknown tensor names \['model\.layers\.9"),
        ({"layers.0.attn.qkv.weight": qkv[:-1]}, r"'layers\.0\.attn\.qkv\.weight' has shape"),
        ({"layers.0.attn.qkv.weight": qkv.to(torch.int32)}, "floating point"),
        ({"model.norm.weight": good_norm, "layers.0.attn.qkv.weight": nan}, "NaN"),  # the good one is not applied
        ({"model.norm.weight": [1.0] * 64}, "not a tensor"),
        ({"layers.0.attn.qkv.weight": qkv, "model.layers.0.self_attn.k_proj.weight": qkv[64:96]},
         r"both write layers\.0\.attn\.qkv\.weight"),
        ({"layers.1.moe.experts.w13_EFD": m.layers[1].moe.experts.w13_EFD,
          "model.layers.1.block_sparse_moe.experts.3.w1.weight": m.layers[1].moe.experts.w13_EFD[3, :96]},
         "both write"),
        ({"lm_head.weight": m.lm_head.weight, "model.lm_head.weight": m.lm_head.weight}, "unknown"),
    ]


def test_refused_updates_name_the_tensor_and_change_nothing(engine):
    before = snapshot(engine.model)
    [reference] = engine.generate([PROMPT], GREEDY)
    for update, message in bad_updates(engine.model):
        with pytest.raises(WeightUpdateError, match=message):
            engine.load_weights(update)
        assert_same_tensors(engine.model.state_dict(), before)
    with pytest.raises(ValueError, match="weight version"):
        engine.load_weights({"model.norm.weight": engine.model.norm.weight}, version=-1)
    with pytest.raises(ValueError, match="in_flight"):
        engine.load_weights({"model.norm.weight": engine.model.norm.weight}, in_flight="later")
    assert engine.weight_version == 0 and engine.cache.resets == 0
    [again] = engine.generate([PROMPT], GREEDY)
    assert again.token_ids == reference.token_ids


def test_a_tied_head_is_accepted_only_beside_its_embedding():
    engine = engine_for(model(0, tie_word_embeddings=True))
    donor = model(7, tie_word_embeddings=True)
    with pytest.raises(WeightUpdateError, match="ties its output head"):
        engine.load_weights({"lm_head.weight": donor.embed.weight})
    engine.load_weights({"model.embed_tokens.weight": donor.embed.weight, "lm_head.weight": donor.embed.weight})
    assert torch.equal(engine.model.lm_head.weight, donor.embed.weight)
    engine.close()


# ---- int4 -----------------------------------------------------------------------------------------


def quantized(m: Transformer) -> Transformer:
    return quantize_model(m, "int4")


@needs_int4
@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_int4_loads_equal_a_fresh_quantization_and_the_fused_step_follows(tied):
    engine = engine_for(quantized(model(0, tie_word_embeddings=tied)))
    fused_before = engine.fused
    trainer = model(7, tie_word_embeddings=tied)
    engine.load_weights(hf_state_dict(trainer), version=1)
    fresh = engine_for(quantized(model(7, tie_word_embeddings=tied)))
    assert_same_tensors(engine.model.state_dict(), fresh.model.state_dict())
    assert (engine.fused is None) == (fresh.fused is None) and (fused_before is None or engine.fused is not fused_before)
    [ours], [theirs] = engine.generate([PROMPT], GREEDY), fresh.generate([PROMPT], GREEDY)
    assert ours.token_ids == theirs.token_ids and ours.logprobs == theirs.logprobs
    engine.close()
    fresh.close()


@needs_int4
def test_int4_partial_update_requantizes_only_the_rows_it_names():
    engine = engine_for(quantized(model(0)))
    donor, expected = model(7), model(0)
    F, names = donor.config.intermediate_size, hf_state_dict(donor)
    update = {n: names[n] for n in ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.v_proj.weight",
                                    "model.layers.1.block_sparse_moe.experts.1.w3.weight", "lm_head.weight")}
    with torch.no_grad():
        qkv, experts = expected.layers[0].attn.qkv.weight, expected.layers[1].moe.experts.w13_EFD
        qkv[:64].copy_(update["model.layers.0.self_attn.q_proj.weight"])
        qkv[96:].copy_(update["model.layers.0.self_attn.v_proj.weight"])
        experts[1, F:].copy_(update["model.layers.1.block_sparse_moe.experts.1.w3.weight"])
        expected.lm_head.weight.copy_(update["lm_head.weight"])
    engine.load_weights(update)
    want = quantized(expected)
    assert_same_tensors(engine.model.state_dict(), want.state_dict())
    # the prompt path's dense copies of the layers written follow too: prefill and decode as fresh
    fresh = engine_for(want)
    [ours], [theirs] = engine.generate([PROMPT], GREEDY), fresh.generate([PROMPT], GREEDY)
    assert ours.token_ids == theirs.token_ids and ours.logprobs == theirs.logprobs
    engine.close()
    fresh.close()


# ---- requests in flight ---------------------------------------------------------------------------


def hold_after_first_step(engine: Engine) -> tuple[threading.Event, threading.Event]:
    """Makes the worker wait after its first decoding step until `release` is set; `held` is set
    while it waits. A test hook: the engine's own step runs unchanged."""
    held, release = threading.Event(), threading.Event()
    step = engine._decode_step

    def held_step(*args):
        step(*args)
        if not held.is_set():
            held.set()
            release.wait()

    engine._decode_step = held_step
    return held, release


def reference_greedy(m: Transformer, prompt: list[int], n: int) -> list[int]:
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(m(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


async def start_load(engine: Engine, weights, in_flight: str) -> asyncio.Future:
    """load_weights on another thread; returns once the engine has the swap pending."""
    loading = asyncio.ensure_future(asyncio.to_thread(engine.load_weights, weights, 1, in_flight=in_flight))
    while engine._swap is None:
        await asyncio.sleep(0.01)
    return loading


async def test_a_stream_running_during_a_load_finishes_on_its_version(engine):
    old, new = model(0), model(7)
    held, release = hold_after_first_step(engine)
    order: list[str] = []
    waiting: list = []
    stream = engine.stream(PROMPT, GREEDY)
    streamed = list((await anext(stream)).token_ids)
    await asyncio.to_thread(held.wait)  # the stream is mid-way: one step done, the worker waits
    loading = await start_load(engine, hf_state_dict(new), "finish")
    engine.submit(PROMPT, GREEDY, on_done=lambda c: (order.append("queued request done"), waiting.append(c)))
    release.set()
    streamed += [token async for event in stream for token in event.token_ids]
    order.append("stream done")
    done = await loading
    order.append("load returned")
    await asyncio.to_thread(lambda: [engine.generate([[1]], GREEDY)])  # the queued request has run
    assert streamed == reference_greedy(old, PROMPT, 24)  # all of it on the old weights
    assert order == ["stream done", "load returned", "queued request done"]
    assert waiting[0].weight_version == 1 and waiting[0].token_ids == reference_greedy(new, PROMPT, 24)
    assert done.aborted == 0 and engine.weight_version == 1


async def test_abort_ends_running_requests_which_resume_on_the_new_weights(engine):
    old, new = model(0), model(7)
    held, release = hold_after_first_step(engine)
    finished = []
    engine.submit(PROMPT, GREEDY, on_done=finished.append)
    await asyncio.to_thread(held.wait)
    loading = await start_load(engine, hf_state_dict(new), "abort")
    release.set()
    done = await loading
    [first] = finished
    assert done.aborted == 1 and first.finish_reason == "abort" and first.weight_version == 0
    assert 1 <= len(first.token_ids) < 24
    assert first.token_ids == reference_greedy(old, PROMPT, len(first.token_ids))
    resumed_prompt = PROMPT + first.token_ids
    [rest] = engine.generate([resumed_prompt], SamplingParams(max_tokens=24 - len(first.token_ids), ignore_eos=True))
    assert rest.weight_version == 1
    assert rest.token_ids == reference_greedy(new, resumed_prompt, len(rest.token_ids))


def test_load_weights_from_the_engines_own_thread_is_refused(engine):
    errors = []

    def on_done(_):
        try:
            engine.load_weights({"model.norm.weight": torch.ones(64)})
        except RuntimeError as err:
            errors.append(str(err))

    engine.generate([PROMPT], SamplingParams(max_tokens=2))
    done = threading.Event()
    engine.submit(PROMPT, SamplingParams(max_tokens=2), on_done=lambda c: (on_done(c), done.set()))
    done.wait()
    assert errors and "engine's own thread" in errors[0]
