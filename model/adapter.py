"""A checkpoint's LoRA adapter, read for serving: the trainer's `adapter/` directory
(training/lora.py writes it beside the merged weights) as low-rank residuals that model/quant.py's
int4 layers add in fp32.

Why the engine needs the adapter and not only the merged weights: a trainer's checkpoint holds
W + scale * B @ A merged, which full precision serves as it is, but int4 erases most of the
change. A warm start's change is about the size of int4's rounding error, and re-quantizing the
merged matrix keeps 6% of it (bench/adapter_quantization.py; the tool calls the model learned
vanish). So an int4 engine quantizes the base W (the merged weight less the adapter's product;
for composer-mini, whose weights come from a Q4_1 GGUF, that base lies on int4's grid, so it is
kept nearly exactly) and adds scale * B (A x) beside the int4 matmul, in fp32.

    adapter = read_adapter(checkpoint / ADAPTER_DIR)    # None when the checkpoint has none
    quantize_model(model, "int4", adapter=adapter)      # model/quant.py

A trainer syncs a live adapter into an int4 rollout engine the same way: beside the merged
weights it sends each residual as two tensors, `<parameter name>.lora_down` and `.lora_up`
(`residual_tensors`); the engine built from them keeps the adapter, and later updates copy only
the residuals (model/weights.py), a few MB instead of re-quantizing every matrix.

Layout: `adapter_config.json` ({"r", "lora_alpha", "target_parameters": [model parameter names]})
and `adapter_model.safetensors` (tensors `<parameter name>.lora_A` (r, I) and `.lora_B` (O, r),
one more leading expert dimension for the experts' stacked weights).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

ADAPTER_DIR = "adapter"
ADAPTER_FILE = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"


@dataclass
class LowRank:
    """One adapted weight's residual, scale folded in: delta = up @ down."""

    down: torch.Tensor
    """A: (r, I), or (E, r, I) for stacked experts; fp32."""
    up: torch.Tensor
    """scale * B: (O, r), or (E, O, r); fp32."""

    def delta(self) -> torch.Tensor:
        return self.up @ self.down

    def expert(self, e: int) -> LowRank:
        return LowRank(self.down[e].contiguous(), self.up[e].contiguous())


def read_adapter_config(directory: str | Path) -> dict:
    path = Path(directory) / ADAPTER_CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no adapter config; is {directory} a LoRA adapter?")
    return json.loads(path.read_text())


def read_adapter(directory: str | Path) -> dict[str, LowRank] | None:
    """{model parameter name: its residual} from a saved adapter, None when `directory` does not
    exist. Errors name a missing tensor or a malformed config."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    config = read_adapter_config(directory)
    try:
        rank, alpha, names = int(config["r"]), float(config["lora_alpha"]), list(config["target_parameters"])
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{directory / ADAPTER_CONFIG}: needs r, lora_alpha and target_parameters ({err})") from None
    tensors = load_file(directory / ADAPTER_FILE)
    adapter = {}
    for name in names:
        for part in ("lora_A", "lora_B"):
            if f"{name}.{part}" not in tensors:
                raise ValueError(f"{directory / ADAPTER_FILE}: {name}.{part} is missing")
        down, up = tensors[f"{name}.lora_A"].float(), tensors[f"{name}.lora_B"].float()
        if down.shape[-2] != rank or up.shape[-1] != rank or down.shape[:-2] != up.shape[:-2]:
            raise ValueError(f"{directory}: {name}'s factors {tuple(down.shape)} and {tuple(up.shape)} "
                             f"are not a rank-{rank} pair")
        adapter[name] = LowRank(down.contiguous(), (up * (alpha / rank)).contiguous())
    return adapter


RESIDUAL_PARTS = ("lora_down", "lora_up")


def residual_tensors(adapter: dict[str, LowRank]) -> dict[str, torch.Tensor]:
    """The adapter as named tensors for a weight sync: `<name>.lora_down` and `<name>.lora_up`."""
    out = {}
    for name, low_rank in adapter.items():
        out[f"{name}.lora_down"], out[f"{name}.lora_up"] = low_rank.down, low_rank.up
    return out


def split_residuals(tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, LowRank]]:
    """(the weights, the residuals) of a sync's tensors; ValueError names a half-sent residual."""
    weights, parts = {}, {}
    for key, value in tensors.items():
        name, _, part = key.rpartition(".")
        if part in RESIDUAL_PARTS:
            parts.setdefault(name, {})[part] = value
        else:
            weights[key] = value
    for name, pair in parts.items():
        if len(pair) != 2:
            missing = next(p for p in RESIDUAL_PARTS if p not in pair)
            raise ValueError(f"{name}.{missing} is missing: a residual is sent as both of {RESIDUAL_PARTS}")
    return weights, {name: LowRank(pair["lora_down"], pair["lora_up"]) for name, pair in parts.items()}
