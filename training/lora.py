"""LoRA for the trainer: low-rank adapters on any weight of the model, the experts' stacked
weights included, as parametrizations, so the model's code is untouched and `model.weight`
always reads the merged weight (the forward, `model.hf.hf_state_dict` and weight sync see
W + (alpha / r) * B @ A).

    add_lora(model, rank=16, alpha=32.0, targets=("qkv", "o_proj", "w13_EFD", "w2_EDF"))
    trainable = [p for p in model.parameters() if p.requires_grad]        # the A and B factors
    save_adapter(model, "run/adapter"); load_adapter(base_model, "run/adapter")
    reference = clone_factors(model)                                      # the policy now, as factors
    with adapters_replaced(model, reference): ...                          # that policy again (KL reference)

A 2-D weight (O, I) gets A (r, I) and B (O, r); a stacked expert weight (E, O, I) gets one pair
per expert, A (E, r, I) and B (E, O, r). B starts at zero, so a fresh adapter is the base model
exactly; A starts as Kaiming-uniform like PEFT's. The adapter file is `adapter_model.safetensors`
(tensors `<parameter name>.lora_A` / `.lora_B`) beside `adapter_config.json`.

Tests: .venv/bin/python -m pytest tests/training/test_lora.py
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn
from torch.nn.utils import parametrize

from model.adapter import (
    ADAPTER_CONFIG,
    ADAPTER_FILE,
    LowRank,
    read_adapter_config,
    read_adapter_tensors,
)


class LoRADelta(nn.Module):
    """weight -> weight + scale * B @ A (per expert for stacked weights)."""

    def __init__(self, shape: torch.Size, rank: int, alpha: float, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        *lead, out_features, in_features = shape
        self.scale = alpha / rank
        self.replacement: tuple[torch.Tensor, torch.Tensor] | None = None  # (A, B) used instead of the factors
        self.lora_A = nn.Parameter(torch.empty(*lead, rank, in_features, dtype=dtype, device=device))
        self.lora_B = nn.Parameter(torch.zeros(*lead, out_features, rank, dtype=dtype, device=device))
        bound = 1.0 / math.sqrt(in_features)  # kaiming_uniform(a=sqrt(5)) on (r, in), as PEFT
        nn.init.uniform_(self.lora_A, -bound, bound)

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        down, up = self.replacement or (self.lora_A, self.lora_B)
        return weight + self.scale * (up @ down)


def _targets(model: nn.Module, suffixes: Sequence[str]) -> list[tuple[str, nn.Module, str]]:
    found = []
    for module_name, module in model.named_modules():
        for pname, param in module.named_parameters(recurse=False):
            full = f"{module_name}.{pname}" if module_name else pname
            if param.dim() >= 2 and any(full == s or full.endswith("." + s) or full.endswith(s + ".weight")
                                        for s in suffixes):
                found.append((full, module, pname))
    return found


def add_lora(model: nn.Module, rank: int, alpha: float, targets: Sequence[str], seed: int = 0) -> list[str]:
    """Freezes every parameter and adds adapters to those whose name ends with a target
    (`qkv` matches `...attn.qkv.weight`); returns the adapted names. Errors if none matches."""
    if rank < 1:
        raise ValueError(f"LoRA rank must be >= 1, got {rank}")
    for p in model.parameters():
        p.requires_grad_(False)
    found = _targets(model, targets)
    if not found:
        raise ValueError(f"no parameter matches the LoRA targets {list(targets)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _, module, pname in found:
            w = getattr(module, pname)
            parametrize.register_parametrization(
                module, pname, LoRADelta(w.shape, rank, alpha, w.dtype, w.device), unsafe=True
            )
    return [name for name, _, _ in found]


def lora_modules(model: nn.Module) -> Iterator[tuple[str, LoRADelta]]:
    """(adapted parameter name, its LoRADelta) for every adapter in the model."""
    for module_name, module in model.named_modules():
        if not parametrize.is_parametrized(module):
            continue
        for pname, plist in module.parametrizations.items():
            for p in plist:
                if isinstance(p, LoRADelta):
                    yield (f"{module_name}.{pname}" if module_name else pname), p


def lora_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for name, delta in lora_modules(model):
        out[f"{name}.lora_A"] = delta.lora_A.detach()
        out[f"{name}.lora_B"] = delta.lora_B.detach()
    return out


def residuals(model: nn.Module) -> dict[str, LowRank]:
    """Each adapter as the residual an int4 engine keeps beside its base weights (model/adapter.py):
    A, and B with the scale folded in; gathered (FSDP's DTensors: every rank calls it)."""
    out = {}
    for name, delta in lora_modules(model):
        down, up = (getattr(t, "full_tensor", lambda t=t: t)().detach() for t in (delta.lora_A, delta.lora_B))
        out[name] = LowRank(down.float().contiguous(), (up.float() * delta.scale).contiguous())
    return out


def clone_factors(model: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the adapter's factors, named as `lora_state_dict` names them."""
    return {name: tensor.clone() for name, tensor in lora_state_dict(model).items()}


@contextlib.contextmanager
def adapters_replaced(model: nn.Module, factors: dict[str, torch.Tensor]) -> Iterator[None]:
    """The model with these factors (`lora_state_dict`'s names) in place of its adapter's for the
    block's duration: another adapted policy, such as the KL reference, without a second model."""
    deltas = list(lora_modules(model))
    missing = [n for name, _ in deltas for n in (f"{name}.lora_A", f"{name}.lora_B") if n not in factors]
    if missing:
        raise ValueError(f"no factors for {missing[:3]} ({len(missing)} missing)")
    for name, delta in deltas:
        delta.replacement = (factors[f"{name}.lora_A"], factors[f"{name}.lora_B"])
    try:
        yield
    finally:
        for _, delta in deltas:
            delta.replacement = None


def save_adapter(model: nn.Module, directory: str | Path, **meta) -> Path:
    """Writes the adapter atomically: the tensors, then its config (rank, alpha, targets, meta)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    deltas = list(lora_modules(model))
    if not deltas:
        raise ValueError("the model has no LoRA adapters to save")
    tmp = directory / (ADAPTER_FILE + ".tmp")
    save_file({k: v.contiguous() for k, v in lora_state_dict(model).items()}, str(tmp))
    os.replace(tmp, directory / ADAPTER_FILE)
    first = deltas[0][1]
    rank = first.lora_A.shape[-2]
    config = {"r": rank, "lora_alpha": first.scale * rank, "target_parameters": [n for n, _ in deltas], **meta}
    tmp = directory / (ADAPTER_CONFIG + ".tmp")
    tmp.write_text(json.dumps(config, indent=2) + "\n")
    os.replace(tmp, directory / ADAPTER_CONFIG)
    return directory


def load_adapter(model: nn.Module, directory: str | Path) -> nn.Module:
    """Adds the adapter saved in `directory` to `model` (which must have none yet) and loads its
    tensors; errors name a missing or misshapen tensor."""
    directory = Path(directory)
    config = read_adapter_config(directory)
    names = config["target_parameters"]
    add_lora(model, config["r"], config["lora_alpha"], names)
    tensors = read_adapter_tensors(directory)
    for name, delta in lora_modules(model):
        for part in ("lora_A", "lora_B"):
            key = f"{name}.{part}"
            param = getattr(delta, part)
            if key not in tensors or tensors[key].shape != param.shape:
                got = None if key not in tensors else tuple(tensors[key].shape)
                raise ValueError(f"{directory}: adapter tensor {key} is {got}, the model needs {tuple(param.shape)}")
            with torch.no_grad():
                param.copy_(tensors[key])
    return model
