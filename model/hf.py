"""Checkpoints in Hugging Face layout: the name mapping between our fused parameters and the
Mixtral/Llama and Qwen3-MoE tensor names, and loading/saving a directory that transformers and
`vllm serve` read as they are.

A checkpoint directory holds `config.json`, `model.safetensors` (or `model-*.safetensors` shards
with `model.safetensors.index.json`), `generation_config.json` and the tokenizer files.

    from model.hf import load_model, save_checkpoint
    model = load_model("~/.cache/composer/models/composer-mini")

Our modules fuse what HF keeps apart (q/k/v into `qkv`, each expert's gate and up projection into
`w13_EFD`); `hf_slots` is the only place that knows both spellings (weight updates use it too:
model/weights.py).

Legend: E experts, F expert hidden width, D model width.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from model.config import ModelConfig

if TYPE_CHECKING:
    from model.transformer import Transformer

SAFETENSORS_INDEX = "model.safetensors.index.json"


class CheckpointError(ValueError):
    """A checkpoint directory is missing, incomplete or inconsistent; the message names the file."""


# ---- name mapping -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """Where one named tensor lives in the model."""

    param: str
    """The model's own parameter name (as `Transformer.named_parameters()` spells it)."""
    index: tuple[int | slice, ...]
    """The tensor's place inside that parameter: () for all of it, else rows (and an expert)."""
    shape: tuple[int, ...]


def own_slots(config: ModelConfig) -> dict[str, Slot]:
    """The model's own parameter names, each a whole parameter (the dense model has no router)."""
    D, F, E, V = config.hidden_size, config.intermediate_size, config.num_experts, config.vocab_size
    q_rows, kv_rows = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    shapes: dict[str, tuple[int, ...]] = {"embed.weight": (V, D)}
    for i in range(config.num_layers):
        p = f"layers.{i}."
        shapes[p + "attn_norm.weight"] = (D,)
        shapes[p + "attn.qkv.weight"] = (q_rows + 2 * kv_rows, D)
        shapes[p + "attn.o_proj.weight"] = (D, q_rows)
        shapes[p + "ffn_norm.weight"] = (D,)
        if config.qk_norm:
            shapes[p + "attn.q_norm.weight"] = shapes[p + "attn.k_norm.weight"] = (config.head_dim,)
        if config.is_moe:
            shapes[p + "moe.router.weight"] = (E, D)
        shapes[p + "moe.experts.w13_EFD"] = (E, 2 * F, D)
        shapes[p + "moe.experts.w2_EDF"] = (E, D, F)
    shapes["norm.weight"] = (D,)
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (V, D)
    return {name: Slot(name, (), shape) for name, shape in shapes.items()}


def hf_slots(config: ModelConfig) -> dict[str, Slot]:
    """Hugging Face names (the config's family: Mixtral when E > 1, else Llama; or Qwen3-MoE,
    which adds per-head query/key norms and names its experts `mlp.experts.e.gate_proj` etc.)
    and where each sits in our fused
    parameters: q/k/v are row ranges of `qkv`, each expert's gate and up projections the two
    halves of its `w13_EFD` rows. The one place that knows both spellings."""
    D, F, E, V = config.hidden_size, config.intermediate_size, config.num_experts, config.vocab_size
    q_rows, kv_rows = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    slots = {"model.embed_tokens.weight": Slot("embed.weight", (), (V, D))}
    for i in range(config.num_layers):
        p, o = f"model.layers.{i}.", f"layers.{i}."
        slots[p + "input_layernorm.weight"] = Slot(o + "attn_norm.weight", (), (D,))
        start = 0
        for name, rows in (("q", q_rows), ("k", kv_rows), ("v", kv_rows)):
            slots[p + f"self_attn.{name}_proj.weight"] = Slot(o + "attn.qkv.weight", (slice(start, start + rows),), (rows, D))
            start += rows
        slots[p + "self_attn.o_proj.weight"] = Slot(o + "attn.o_proj.weight", (), (D, q_rows))
        slots[p + "post_attention_layernorm.weight"] = Slot(o + "ffn_norm.weight", (), (D,))
        if config.qk_norm:
            for name in ("q_norm", "k_norm"):
                slots[p + f"self_attn.{name}.weight"] = Slot(o + f"attn.{name}.weight", (), (config.head_dim,))
        if config.family == "qwen3_moe":
            slots[p + "mlp.gate.weight"] = Slot(o + "moe.router.weight", (), (E, D))
            experts = [(p + f"mlp.experts.{e}.", e, ("gate_proj", "up_proj", "down_proj")) for e in range(E)]
        elif config.is_moe:
            slots[p + "block_sparse_moe.gate.weight"] = Slot(o + "moe.router.weight", (), (E, D))
            experts = [(p + f"block_sparse_moe.experts.{e}.", e, ("w1", "w3", "w2")) for e in range(E)]
        else:
            experts = [(p + "mlp.", 0, ("gate_proj", "up_proj", "down_proj"))]
        w13, w2 = o + "moe.experts.w13_EFD", o + "moe.experts.w2_EDF"
        for prefix, e, (gate, up, down) in experts:
            slots[prefix + gate + ".weight"] = Slot(w13, (e, slice(0, F)), (F, D))
            slots[prefix + up + ".weight"] = Slot(w13, (e, slice(F, 2 * F)), (F, D))
            slots[prefix + down + ".weight"] = Slot(w2, (e,), (D, F))
    slots["model.norm.weight"] = Slot("norm.weight", (), (D,))
    if not config.tie_word_embeddings:
        slots["lm_head.weight"] = Slot("lm_head.weight", (), (V, D))
    return slots


def hf_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """Our weights under Hugging Face names (the config's family). Each is read as the module's
    attribute, so a parametrized weight (training/lora.py's adapters) comes out merged."""

    slots = hf_slots(model.config)
    params = {}  # each read once: a parametrized weight is computed anew on every read
    for slot in slots.values():
        if slot.param not in params:
            module, _, leaf = slot.param.rpartition(".")
            params[slot.param] = getattr(model.get_submodule(module), leaf)
    return {name: params[slot.param][slot.index].contiguous() for name, slot in slots.items()}


def ignored_checkpoint_tensor(name: str, config: ModelConfig) -> bool:
    """Tensors a checkpoint may carry that the model does not: rotary tables, and the head's copy
    in a tied checkpoint."""
    return bool(re.search(r"rotary_emb\.inv_freq$", name)) or (config.tie_word_embeddings and name == "lm_head.weight")


def load_hf_state_dict(model: Transformer, tensors: dict[str, torch.Tensor], source: str = "checkpoint") -> None:
    """Copies HF-named tensors into `model`; errors name missing, misshapen and unexpected
    tensors, and come before the first write."""
    slots = hf_slots(model.config)
    for name, slot in slots.items():
        if name not in tensors:
            raise CheckpointError(f"{source}: tensor {name!r} is missing")
        if tuple(tensors[name].shape) != slot.shape:
            raise CheckpointError(
                f"{source}: tensor {name!r} has shape {tuple(tensors[name].shape)}, config says {slot.shape}"
            )
    leftovers = sorted(n for n in tensors if n not in slots and not ignored_checkpoint_tensor(n, model.config))
    if leftovers:
        raise CheckpointError(f"{source}: unexpected tensors {leftovers[:5]} (and {max(0, len(leftovers) - 5)} more)")
    with torch.no_grad():
        for name, slot in slots.items():
            model.get_parameter(slot.param)[slot.index].copy_(tensors[name])


# ---- files --------------------------------------------------------------------------------------


def safetensors_files(directory: Path) -> list[Path]:
    index = directory / SAFETENSORS_INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise CheckpointError(f"{index}: not a valid safetensors index ({err})") from None
        return [directory / name for name in sorted(set(weight_map.values()))]
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{directory}: no *.safetensors weights found")
    return files


def load_state_dict(directory: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint under their HF names (memory-mapped by safetensors)."""
    directory = Path(directory).expanduser()
    tensors: dict[str, torch.Tensor] = {}
    for path in safetensors_files(directory):
        if not path.is_file():
            raise CheckpointError(f"{path}: listed in the index but missing")
        try:
            tensors.update(load_file(path))
        except (SafetensorError, OSError) as err:
            raise CheckpointError(f"{path}: cannot read safetensors ({err})") from None
    return tensors


def atomic_write_text(path: Path, text: str) -> None:
    """Writes `text` to `path` through a temporary file beside it and a rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def generation_config(config: ModelConfig, extra_stop_ids: list[int] | None = None) -> dict[str, Any]:
    eos = [config.eos_token_id, *(extra_stop_ids or [])]
    return {
        "bos_token_id": config.bos_token_id,
        "eos_token_id": eos if len(eos) > 1 else eos[0],
        "pad_token_id": config.pad_token_id,
        "do_sample": False,
        "max_new_tokens": 1024,
    }


def save_checkpoint(
    directory: str | Path,
    config: ModelConfig,
    state_dict: dict[str, torch.Tensor],
    tokenizer: Any = None,
    *,
    dtype: torch.dtype = torch.float32,
) -> Path:
    """Writes an HF-layout checkpoint from HF-named tensors; each file lands atomically."""
    directory = Path(directory).expanduser()
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {name: t.detach().to(dtype).contiguous() for name, t in state_dict.items()}
    tmp = directory / "model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    os.chmod(tmp, 0o644)  # safetensors creates it owner-only; a server may run as another user
    os.replace(tmp, directory / "model.safetensors")
    dtype_name = str(dtype).removeprefix("torch.")
    atomic_write_text(directory / "config.json", json.dumps(config.to_hf_dict(dtype_name), indent=2) + "\n")
    extra = [i for i in getattr(tokenizer, "stop_token_ids", []) if i != config.eos_token_id]
    atomic_write_text(
        directory / "generation_config.json", json.dumps(generation_config(config, extra), indent=2) + "\n"
    )
    if tokenizer is not None:
        tokenizer.save(directory)
    return directory


def save_model(model: Transformer, directory: str | Path, tokenizer: Any = None, *, dtype: torch.dtype | None = None) -> Path:
    return save_checkpoint(
        directory, model.config, hf_state_dict(model), tokenizer, dtype=dtype or model.embed.weight.dtype
    )


def load_model(directory: str | Path, *, dtype: torch.dtype | None = None, device: str | torch.device = "cpu") -> Transformer:
    """Builds the model a checkpoint describes and loads its weights (Mixtral, dense Llama or
    Qwen3-MoE)."""
    from model.transformer import Transformer

    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such checkpoint directory")
    config = ModelConfig.load(directory)
    tensors = load_state_dict(directory)
    if dtype is None:
        dtype = next(iter(tensors.values())).dtype if tensors else torch.float32
    with torch.device("meta"):
        model = Transformer(config)
    model = model.to_empty(device=device).to(dtype)
    model.init_buffers()
    load_hf_state_dict(model, tensors, source=str(directory))
    return model.eval()
