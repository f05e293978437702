"""Rollout sources (training/rollout.py): the Ray backend runs the same code as in-process."""

from __future__ import annotations

import asyncio

import pytest

from model.config import ModelConfig
from model.transformer import Transformer
from training.checkpoint import full_tensors
from training.config import debug, replace_in
from training.rollout import make_source
from training.toy import byte_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


def _groups(backend: str, weights, model_config) -> list:
    config = replace_in(debug(), rollout={"backend": backend, "workers": 1})
    source = make_source(config, byte_tokenizer(), model_config)

    async def go():
        await source.sync(weights, 0)
        return [await source.run(job, 0) for job in (0, 1)]

    try:
        return asyncio.run(go())
    finally:
        source.close()


@pytest.mark.slow
def test_ray_actors_sample_what_the_in_process_engine_samples():
    tok = byte_tokenizer()
    model = Transformer(ModelConfig.debug(vocab_size=tok.vocab_size, max_position_embeddings=1024)).init_weights(3)
    weights = full_tensors(model)
    local = _groups("engine", weights, model.config)
    remote = _groups("ray", weights, model.config)
    assert [[s.tokens for s in g.samples] for g in remote] == [[s.tokens for s in g.samples] for g in local]
    for g_remote, g_local in zip(remote, local):
        for a, b in zip(g_remote.samples, g_local.samples):
            assert [x for x in a.behaviour_logprobs if x == x] == pytest.approx(
                [x for x in b.behaviour_logprobs if x == x], abs=1e-5)
    assert len({tuple(s.tokens) for g in local for s in g.samples}) > 1  # sampled, not one fixed reply


def test_unknown_task_sets_and_backends_are_refused():
    model_config = ModelConfig.debug()
    with pytest.raises(ValueError, match="unknown task set"):
        make_source(replace_in(debug(), rollout={"tasks": "nope"}), byte_tokenizer(), model_config)
    with pytest.raises(ValueError, match="does not run"):
        make_source(replace_in(debug(), rollout={"backend": "vllm"}), byte_tokenizer(), model_config)
