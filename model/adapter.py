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

A compact adapter (`compact_adapter`) stores the factors as int8 with one fp32 scale per rank
component (`<key>.scale`): a quarter of the trainer's fp32 file, small enough to commit, and
the product B @ A moves by about 0.6% of its norm (w11rl's adapter). Every reader here and
training/lora.py's `load_adapter` dequantizes through `read_adapter_tensors`.

    python -m model.adapter compact runs/w11rl/final/adapter model/trained/composer-mini-rl
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from model.hf import atomic_write_text

ADAPTER_DIR = "adapter"
ADAPTER_FILE = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
SCALE_SUFFIX = ".scale"


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
    tensors = read_adapter_tensors(directory)
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


def read_adapter_tensors(directory: str | Path) -> dict[str, torch.Tensor]:
    """The adapter file's factors by key, fp32; int8 ones come back multiplied by their scales."""
    path = Path(directory) / ADAPTER_FILE
    tensors = load_file(path)
    factors = {}
    for key, value in tensors.items():
        if key.endswith(SCALE_SUFFIX):
            continue
        if value.dtype == torch.int8:
            if key + SCALE_SUFFIX not in tensors:
                raise ValueError(f"{path}: {key} is int8 but its {key + SCALE_SUFFIX} is missing")
            value = value.float() * tensors[key + SCALE_SUFFIX].float()
        factors[key] = value.float()
    return factors


def quantize_factor(key: str, factor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 values, fp32 scales) with one scale per rank component: per row of A (..., r, I),
    per column of B (..., O, r)."""
    dim = -1 if key.endswith("lora_A") else -2
    scale = factor.float().abs().amax(dim=dim, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny) / 127
    return (factor.float() / scale).round().clamp(-127, 127).to(torch.int8), scale


def compact_adapter(source: str | Path, target: str | Path) -> Path:
    """Writes `source`'s adapter to `target` with int8 factors (`quantize_factor`), atomically
    per file; the config is copied with `"factors": "int8"` added."""
    source, target = Path(source), Path(target)
    config = read_adapter_config(source)
    compact = {}
    for key, factor in read_adapter_tensors(source).items():
        compact[key], compact[key + SCALE_SUFFIX] = quantize_factor(key, factor)
    target.mkdir(parents=True, exist_ok=True)
    tmp = target / (ADAPTER_FILE + ".tmp")
    save_file({k: v.contiguous() for k, v in compact.items()}, str(tmp))
    os.chmod(tmp, 0o644)
    os.replace(tmp, target / ADAPTER_FILE)
    atomic_write_text(target / ADAPTER_CONFIG, json.dumps({**config, "factors": "int8"}, indent=2) + "\n")
    return target


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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3 or argv[0] != "compact":
        print("usage: python -m model.adapter compact SOURCE_ADAPTER_DIR TARGET_DIR", file=sys.stderr)
        return 2
    try:
        target = compact_adapter(argv[1], argv[2])
    except (OSError, ValueError) as err:
        print(f"model.adapter: {err}", file=sys.stderr)
        return 2
    print(target, f"({(target / ADAPTER_FILE).stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
