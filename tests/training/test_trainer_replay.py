"""The trainer's forward replays the rollout's routing (training/trainer.py token_logprobs): its
logprobs are model.transformer.completion_logprobs with the recorded experts, not the router's
own choice."""

from __future__ import annotations

import numpy as np
import torch

from model.config import ModelConfig
from model.transformer import Transformer, completion_logprobs
from training.batch import micro_batches, prepare
from training.buffer import Group, Sample
from training.config import debug
from training.trainer import Trainer


def test_trainer_logprobs_replay_the_recorded_experts(one_thread):
    model = Transformer(ModelConfig.debug()).init_weights(seed=2)
    trainer = Trainer(debug(), model)
    tokens = torch.randint(0, 256, (30,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.no_grad():
        own = model(torch.tensor([tokens]), return_routing=True).routing_BSLk[0]
    other = (own + 1) % 4  # other experts at every position and layer, still distinct per position
    mask = [False] * 10 + [True] * 20
    logprobs = {}
    for name, routing in (("own", own), ("other", other)):
        sample = Sample(tokens=tokens, mask=mask, behaviour_logprobs=[-1.0] * 30, reward=1.0,
                        routing=routing.numpy().astype(np.uint8))
        samples = [sample, Sample(tokens=tokens, mask=mask, behaviour_logprobs=[-1.0] * 30, reward=0.0,
                                  routing=routing.numpy().astype(np.uint8))]
        [mb] = micro_batches(prepare([Group(0, 0, samples)], trainer.config.loss, trainer.config.buffer, 0),
                             4096, share_prefixes=False)
        with torch.no_grad():
            logprobs[name] = trainer.token_logprobs(trainer.model, mb)[0][mb.valid_BP[0]]
            expected = completion_logprobs(model, tokens[:10], tokens[10:], routing[:-1])
        torch.testing.assert_close(logprobs[name], expected, atol=1e-5, rtol=0)
    assert (logprobs["own"] - logprobs["other"]).abs().max() > 1e-3
