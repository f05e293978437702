"""The trainer's learning rate per update (training/trainer.py `Trainer.lr_at`): the warm start's
own rate during its steps, then the RL rate, each behind the same linear warmup."""

from __future__ import annotations

import pytest

from model.config import ModelConfig
from model.transformer import Transformer
from training.config import debug, replace_in
from training.trainer import Trainer


def trainer(**train) -> Trainer:
    config = replace_in(debug(), optim={"lr": 1e-5, "warmup_steps": 2}, train=train)
    return Trainer(config, Transformer(ModelConfig.debug()).init_weights(seed=0))


def test_the_warm_start_has_its_own_rate_then_rl_takes_the_optimizer_rate():
    rates = [trainer(warm_start_steps=3, warm_start_lr=3e-4).lr_at(step) for step in range(5)]
    assert rates == pytest.approx([1.5e-4, 3e-4, 3e-4, 1e-5, 1e-5])


def test_without_a_warm_start_rate_every_update_uses_the_optimizer_rate():
    rates = [trainer(warm_start_steps=3).lr_at(step) for step in range(5)]
    assert rates == pytest.approx([5e-6, 1e-5, 1e-5, 1e-5, 1e-5])
