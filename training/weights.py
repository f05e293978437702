"""Weight sync: the trainer's weights (merged, gathered, under Hugging Face names) into the engines
that sample rollouts, each load tagged with the version the samples will record.

    push_to_engine(engine, full_tensors(trainer.model), version=trainer.step)

The in-process engine loads them with `Engine.load_weights(weights, version)` where it has it;
until then (an engine without it) the weights are copied into its model directly, which is only
safe while it serves no request: synchronous runs (max_offpolicy_steps = 0) sync between
rollouts, so that holds for them, and asynchronous runs are refused.
"""

from __future__ import annotations

import torch

from model.hf import load_hf_state_dict


def supports_live_load(engine) -> bool:
    return hasattr(engine, "load_weights")


def push_to_engine(engine, tensors: dict[str, torch.Tensor], version: int) -> None:
    if supports_live_load(engine):
        engine.load_weights(tensors, version)
        return
    load_hf_state_dict(engine.model, tensors, source="trainer weights")
    engine.weight_version = version
