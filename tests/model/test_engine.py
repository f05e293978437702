"""The engine on a tiny random MoE: greedy decoding against full recomputation, speculative
decoding against plain decoding, batching, sampling seeds, stops, logprobs, routing records,
streaming and cancellation."""

from __future__ import annotations

import asyncio

import pytest
import torch
from byte_tokenizer import ByteTokenizer

from model.config import ModelConfig
from model.engine import ContextLengthError, Engine
from model.sampling import SamplingParams
from model.transformer import Transformer

PROMPTS = [list(b"def f(x): return x + 1\ndef g(x): return x"), list(b"abcabcabcabc"), list(b"z")]


@pytest.fixture(scope="module")
def model() -> Transformer:
    return Transformer(ModelConfig.debug(max_position_embeddings=128)).init_weights(seed=0).eval()


@pytest.fixture
def engine(model) -> Engine:
    engine = Engine(model, ByteTokenizer(stop_token_ids=(0,)), max_batch=4)
    yield engine
    engine.close()


def reference_greedy(model, prompt, n):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids])).logits[0, -1]
            ids.append(int(logits.argmax()))
    return ids[len(prompt) :]


def test_greedy_equals_full_recomputation(engine, model):
    outs = engine.generate(PROMPTS, SamplingParams(max_tokens=24, speculative=False, ignore_eos=True))
    for prompt, out in zip(PROMPTS, outs):
        assert out.token_ids == reference_greedy(model, prompt, 24)
        assert out.finish_reason == "length"


def test_speculative_output_equals_plain_and_accepts_drafts(engine):
    params = dict(max_tokens=40, ignore_eos=True)
    plain = engine.generate(PROMPTS, SamplingParams(speculative=False, **params))
    spec = engine.generate(PROMPTS, SamplingParams(**params))
    assert [o.token_ids for o in spec] == [o.token_ids for o in plain]
    for a, b in zip(spec, plain):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert sum(o.num_accepted_draft_tokens for o in spec) > 0
    assert all(o.num_draft_tokens == 0 for o in plain)


def test_draft_length_adapts_to_what_was_accepted():
    from model.sequence import Sequence

    seq = Sequence([1, 2], SamplingParams(max_tokens=40), [0], ByteTokenizer(stop_token_ids=(0,)), 128)
    assert seq.draft_limit == 10
    seq._adapt_drafting(accepted=0, drafted=10)  # rejected at once: pause, then a short draft
    assert (seq.draft_pause, seq.draft_limit) == (1, 2)
    seq._adapt_drafting(accepted=0, drafted=2)  # again: the pause doubles
    assert (seq.draft_pause, seq.draft_limit) == (2, 2)
    seq._adapt_drafting(accepted=2, drafted=2)  # all accepted: twice as long, no pause next time
    seq._adapt_drafting(accepted=0, drafted=4)
    assert (seq.draft_pause, seq.draft_limit) == (1, 2)
    seq._adapt_drafting(accepted=2, drafted=2)
    seq._adapt_drafting(accepted=4, drafted=4)
    assert seq.draft_limit == 8
    seq._adapt_drafting(accepted=3, drafted=8)  # partly accepted: one past what was accepted
    assert seq.draft_limit == 4


def test_more_requests_than_rows_all_finish_as_if_alone(engine):
    prompts = [list(f"prompt number {i}: ".encode()) for i in range(9)]
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    together = engine.generate(prompts, params)
    alone = [engine.generate([p], params)[0] for p in prompts]
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]


def test_seeded_sampling_is_reproducible(engine):
    params = lambda seed: SamplingParams(max_tokens=16, temperature=1.0, top_p=0.9, seed=seed, ignore_eos=True)  # noqa: E731
    a = engine.generate(PROMPTS, params(7))
    b = engine.generate(PROMPTS, params(7))
    c = engine.generate(PROMPTS, params(8))
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert [o.token_ids for o in a] != [o.token_ids for o in c]


def test_logprobs_are_those_of_the_sampling_distribution(engine, model):
    [out] = engine.generate([PROMPTS[0]], SamplingParams(max_tokens=6, top_logprobs=3, ignore_eos=True))
    ids = PROMPTS[0] + out.token_ids
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
    for i, (token, lp) in enumerate(zip(out.token_ids, out.logprobs)):
        expected = logprobs[len(PROMPTS[0]) - 1 + i]
        assert lp == pytest.approx(float(expected[token]), abs=1e-4)
        assert [t for t, _ in out.top_logprobs[i]] == expected.topk(3).indices.tolist()


def test_routing_is_recorded_for_every_fed_position(engine, model):
    [out] = engine.generate([PROMPTS[1]], SamplingParams(max_tokens=8, return_routing=True, ignore_eos=True))
    ids = PROMPTS[1] + out.token_ids[:-1]
    cfg = model.config
    assert out.routed_experts.shape == (len(ids), cfg.num_layers, cfg.top_k)
    with torch.no_grad():
        expected = model(torch.tensor([ids]), return_routing=True).routing_BSLk[0]
    assert torch.equal(out.routed_experts.long(), expected)


def test_stop_strings_and_tokens(engine):
    [free] = engine.generate([PROMPTS[0]], SamplingParams(max_tokens=30, ignore_eos=True))
    stop = free.text[5:8]
    [out] = engine.generate([PROMPTS[0]], SamplingParams(max_tokens=30, stop=[stop], ignore_eos=True))
    assert out.finish_reason == "stop" and out.stop_reason == stop
    assert out.text == free.text[: free.text.index(stop)]
    stop_id = free.token_ids[3]
    [out] = engine.generate([PROMPTS[0]], SamplingParams(max_tokens=30, stop_token_ids=[stop_id]))
    assert out.token_ids == free.token_ids[: free.token_ids.index(stop_id) + 1]
    assert out.finish_reason == "stop" and out.stop_reason == stop_id


def test_min_tokens_holds_back_stop_tokens_and_strings(engine):
    [free] = engine.generate([PROMPTS[0]], SamplingParams(max_tokens=12, ignore_eos=True))
    first = free.token_ids[0]
    [stopped] = engine.generate([PROMPTS[0]], SamplingParams(max_tokens=12, stop_token_ids=[first]))
    assert stopped.token_ids == [first] and stopped.finish_reason == "stop"
    [held] = engine.generate([PROMPTS[0]], SamplingParams(max_tokens=12, stop_token_ids=[first], min_tokens=4))
    assert first not in held.token_ids[:4] and len(held.token_ids) >= 4
    stop = free.text[:2]
    [out] = engine.generate([PROMPTS[0]], SamplingParams(max_tokens=12, stop=[stop], min_tokens=6, ignore_eos=True))
    assert len(out.token_ids) >= 6  # the stop string at the start did not end it
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingParams(max_tokens=3, min_tokens=4)


def test_top_k_and_repetition_penalty(engine, model):
    greedy = engine.generate(PROMPTS, SamplingParams(max_tokens=10, ignore_eos=True))
    top1 = engine.generate(PROMPTS, SamplingParams(max_tokens=10, ignore_eos=True, temperature=1.5, top_k=1, seed=3))
    assert [o.token_ids for o in top1] == [o.token_ids for o in greedy]  # the one likeliest token
    [out] = engine.generate([PROMPTS[1]], SamplingParams(max_tokens=10, ignore_eos=True, repetition_penalty=3.0))
    ids = list(PROMPTS[1])
    with torch.no_grad():  # by hand: seen tokens' logits divided (positive) or multiplied (negative)
        for _ in range(10):
            logits = model(torch.tensor([ids])).logits[0, -1]
            seen = torch.tensor(sorted(set(ids)))
            logits[seen] = torch.where(logits[seen] > 0, logits[seen] / 3.0, logits[seen] * 3.0)
            ids.append(int(logits.argmax()))
    assert out.token_ids == ids[len(PROMPTS[1]) :]
    assert out.token_ids != engine.generate([PROMPTS[1]], SamplingParams(max_tokens=10, ignore_eos=True))[0].token_ids
    with pytest.raises(ValueError, match="repetition_penalty"):
        SamplingParams(repetition_penalty=0)
    with pytest.raises(ValueError, match="top_k"):
        SamplingParams(top_k=-1)


def test_context_limits(engine, model):
    limit = model.config.max_position_embeddings
    with pytest.raises(ContextLengthError, match=f"context holds {limit}"):
        engine.generate([[1] * limit], SamplingParams(max_tokens=1))
    [out] = engine.generate([[1] * (limit - 5)], SamplingParams(max_tokens=50, ignore_eos=True))
    assert len(out.token_ids) == 5 and out.finish_reason == "length"
    with pytest.raises(ValueError, match=r"must be in \[0, 256\)"):
        engine.generate([[10_000]], SamplingParams())
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams(max_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=1.0, speculative=True)


async def test_streaming_matches_generate_and_holds_back_stop_prefixes(engine):
    [full] = engine.generate([PROMPTS[0]], SamplingParams(max_tokens=30, ignore_eos=True))
    stop = full.text[10:14]
    params = SamplingParams(max_tokens=30, stop=[stop], ignore_eos=True)
    events = [e async for e in engine.stream(PROMPTS[0], params)]
    assert events[-1].finished and events[-1].finish_reason == "stop"
    assert "".join(e.text for e in events) == full.text[: full.text.index(stop)]
    assert [t for e in events for t in e.token_ids] == full.token_ids[: len([t for e in events for t in e.token_ids])]


async def test_closing_the_stream_cancels_the_request(engine):
    params = SamplingParams(max_tokens=100, ignore_eos=True, speculative=False)
    stream = engine.stream(PROMPTS[2], params)
    got = 0
    async for _event in stream:
        got += 1
        if got == 3:
            break
    await stream.aclose()
    for _ in range(200):  # the worker notices at its next step (no timing assumed: up to 10 s)
        if not engine._active:
            break
        await asyncio.sleep(0.05)
    assert not engine._active  # the row was released
    [out] = engine.generate([PROMPTS[2]], SamplingParams(max_tokens=4, ignore_eos=True))
    assert len(out.token_ids) == 4


@pytest.mark.parametrize("speculative", [False, True])
def test_never_written_cache_memory_cannot_leak_into_batched_rows(model, speculative):
    """Rows of different lengths attend (masked) past the shorter rows' ends. The cache comes from
    torch.empty, which may hand back freed NaN bits, and a masked NaN still poisons the output
    (0 * NaN): the engine zeroes such positions before they are read."""
    engine = Engine(model, ByteTokenizer(stop_token_ids=(0,)), max_batch=4)
    for t in engine.cache.k + engine.cache.v:
        t.fill_(float("nan"))  # the worst memory torch.empty could return
    outs = engine.generate(PROMPTS, SamplingParams(max_tokens=24, ignore_eos=True, speculative=speculative))
    for prompt, out in zip(PROMPTS, outs):
        assert out.token_ids == reference_greedy(model, prompt, 24)
        assert all(lp == lp for lp in out.logprobs)  # no NaN
    engine.close()


def test_a_failing_step_fails_its_requests_logs_why_and_keeps_serving(engine, caplog, monkeypatch):
    forward = engine.runner.forward

    def failing_forward(*args, **kwargs):
        raise MemoryError("no room for the activations")

    monkeypatch.setattr(engine.runner, "forward", failing_forward)
    with caplog.at_level("ERROR", logger="model.engine"), pytest.raises(MemoryError):
        engine.generate(PROMPTS[:2], SamplingParams(max_tokens=4, ignore_eos=True))
    assert "an engine step failed; its 2 requests fail with it" in caplog.text
    assert "no room for the activations" in caplog.text  # the traceback, for whoever runs the server
    monkeypatch.setattr(engine.runner, "forward", forward)
    [out] = engine.generate([PROMPTS[2]], SamplingParams(max_tokens=4, ignore_eos=True))
    assert len(out.token_ids) == 4  # the rows were given back
