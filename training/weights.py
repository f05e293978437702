"""Weight sync: the trainer's weights (merged, gathered, under Hugging Face names) into the engines
that sample rollouts, each load tagged with the version the samples will record.

    push_to_engine(engine, sync_tensors(trainer.model), version=trainer.step)

A LoRA model's sync also carries the adapter's residuals (model/adapter.py's `<name>.lora_down`
and `.lora_up`): an int4 rollout engine keeps them beside its int4 base, because int4 of the
merged weights rounds a LoRA's change away; engines that serve the merged weights drop them.

The in-process engine loads them with `Engine.load_weights(weights, version)` where it has it;
until then (an engine without it) the weights are copied into its model directly, which is only
safe while it serves no request: synchronous runs (max_offpolicy_steps = 0) sync between
rollouts, so that holds for them, and asynchronous runs are refused.
"""

from __future__ import annotations

import torch

from model.adapter import residual_tensors, split_residuals
from model.hf import load_hf_state_dict
from training.checkpoint import full_tensors
from training.lora import residuals


def sync_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The merged weights and, for a LoRA model, its residuals (a collective under FSDP)."""
    return full_tensors(model) | residual_tensors(residuals(model))


def supports_live_load(engine) -> bool:
    return hasattr(engine, "load_weights")


def push_to_engine(engine, tensors: dict[str, torch.Tensor], version: int) -> None:
    """Loads the merged weights into a full-precision engine (a LoRA's residuals are dropped:
    the merged weights hold them)."""
    tensors, _ = split_residuals(tensors)
    if supports_live_load(engine):
        engine.load_weights(tensors, version)
        return
    load_hf_state_dict(engine.model, tensors, source="trainer weights")
    engine.weight_version = version
