"""Rollouts in the agent harness (training/harness_rollout.py): a task attempted by the in-process
engine through run_task, each attempt's session log read back as the trainer's Samples, token for
token, with the reward of training/rewards.py."""

from __future__ import annotations

import json
import math

import pytest
import torch
from add_task import add_task_line

from agent.session_log import read_session
from model.config import ModelConfig
from model.hf import hf_state_dict
from model.transformer import Transformer
from training.config import replace_in, smoke
from training.harness_rollout import HarnessSource, train_tasks
from training.rewards import score
from training.trajectories import session_segments


def tasks_file(tmp_path, name="tasks.jsonl"):
    path = tmp_path / name
    path.write_text(json.dumps(add_task_line(tmp_path)) + "\n")
    return path


def test_held_out_task_sets_are_refused(tmp_path):
    with pytest.raises(ValueError, match="held-out"):
        train_tasks(str(tasks_file(tmp_path, "bugfix-heldout.jsonl")))
    assert [t.instance_id for t in train_tasks(str(tasks_file(tmp_path)))] == ["dir-1"]


async def rollout_group(tokenizer, tmp_path, **rollout):
    """Job 0's group of 2 attempts on the one task of `tasks_file`, by a random debug model at
    weight version 3; the sessions' logs, sorted."""
    config = replace_in(smoke(), rollout={"tasks": str(tasks_file(tmp_path)), "group_size": 2, "max_tokens": 12,
                                          "engine_quantize": "none", **rollout})
    model_config = ModelConfig.debug(vocab_size=tokenizer.vocab_size, max_position_embeddings=8192)
    source = HarnessSource(config, tokenizer, model_config, tmp_path / "run")
    try:
        await source.sync(hf_state_dict(Transformer(model_config).init_weights(seed=5)), version=3)
        group = await source.run(job=0, version=3)
    finally:
        source.close()
    return group, sorted((tmp_path / "run" / "sessions").rglob("*.jsonl"))


async def test_attempts_become_samples_of_their_logged_tokens_with_their_reward(real_tokenizer, tmp_path):
    group, logs = await rollout_group(real_tokenizer, tmp_path, max_turns=1)
    assert len(logs) == 2 and len(group.samples) == 2
    by_tokens = {tuple(s.tokens): s for s in group.samples}
    for log in logs:
        records = read_session(log)
        assert records[0]["task_id"] == "dir-1"
        calls = [r for r in records if r["type"] == "model_call"]
        assert [c["weight_version"] for c in calls] == [3]
        [segment], _ = session_segments(records)
        sample = by_tokens[tuple(segment.token_ids)]
        assert sample.tokens == calls[0]["prompt_token_ids"] + calls[0]["completion_token_ids"]
        assert sum(sample.mask) == segment.trainable > 0
        logprobs = [lp for lp, m in zip(sample.behaviour_logprobs, sample.mask) if m]
        assert all(math.isfinite(lp) and lp <= 0 for lp in logprobs)
        assert next(r for r in records if r["type"] == "outcome")["signal"] == "task_resolved"
        assert sample.reward == pytest.approx(score(records).reward) and sample.weight_version == 3
        assert sample.routing is not None and sample.routing.shape == (len(sample.tokens), 2, 2)
        assert torch.equal(torch.from_numpy(sample.routing[:-1].astype("int64")),
                           torch.tensor(segment.routed_experts[:-1]))


async def test_an_int4_rollout_engine_keeps_the_lora_beside_its_int4_weights_across_syncs(real_tokenizer, tmp_path):
    """int4 of merged weights rounds a LoRA's change away, so the engine is built from the merged
    weights with the residuals beside them, and later syncs copy only new residuals."""
    from training.lora import add_lora
    from training.weights import sync_tensors

    config = replace_in(smoke(), rollout={"tasks": str(tasks_file(tmp_path)), "engine_quantize": "int4"})
    model_config = ModelConfig.debug(vocab_size=real_tokenizer.vocab_size, max_position_embeddings=8192)
    trained = Transformer(model_config).init_weights(seed=5)
    add_lora(trained, rank=4, alpha=8.0, targets=("qkv", "o_proj", "w13_EFD", "w2_EDF"))
    source = HarnessSource(config, real_tokenizer, model_config, tmp_path / "run")
    try:
        await source.sync(sync_tensors(trained), version=0)
        qkv = source.engine.model.layers[0].attn.qkv
        packed = qkv.packed.clone()
        assert source.adapted and qkv.lora_up is not None and not qkv.lora_up.any()  # B starts at zero
        with torch.no_grad():
            for p in trained.parameters():
                if p.requires_grad:  # an update: the adapters move
                    p.add_(0.01)
        await source.sync(sync_tensors(trained), version=1)
        expected = trained.layers[0].attn.qkv.parametrizations.weight[0]
        torch.testing.assert_close(qkv.lora_up, expected.lora_B.detach() * expected.scale)
        assert torch.equal(qkv.packed, packed) and source.engine.weight_version == 1  # the base untouched
        with pytest.raises(ValueError, match="send its residuals"):
            await source.sync(hf_state_dict(trained), version=2)
    finally:
        source.close()


async def test_a_guided_attempt_trains_only_what_the_model_wrote_after_the_gold_lead(real_tokenizer, tmp_path):
    """training/guided.py: the gold script's grep and read come first, as context only."""
    group, logs = await rollout_group(real_tokenizer, tmp_path, max_turns=3, guided=1.0)
    assert len(logs) == 2 and len(group.samples) == 2
    for log in logs:
        records = read_session(log)
        assert [r["name"] for r in records if r["type"] == "tool_call"][:2] == ["grep", "read_file"]
        assert [r["weight_version"] for r in records if r["type"] == "model_call"] == [-1, -1, 3]
        [segment], _ = session_segments(records)
        [sample] = [s for s in group.samples if s.tokens == segment.token_ids]
        model_call = segment.calls[-1]
        trained = [i for i, m in enumerate(sample.mask) if m]
        assert trained and min(trained) >= model_call["completion_start"] and max(trained) < model_call["end"]


def test_a_guided_share_outside_0_to_1_is_refused(real_tokenizer, tmp_path):
    config = replace_in(smoke(), rollout={"tasks": str(tasks_file(tmp_path)), "guided": 1.5})
    with pytest.raises(ValueError, match=r"rollout\.guided is a share"):
        HarnessSource(config, real_tokenizer, ModelConfig.debug(), tmp_path / "run")
