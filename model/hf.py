"""Checkpoints in Hugging Face layout: the name mapping between our fused parameters and the
Mixtral/Llama and Qwen3-MoE tensor names, and loading/saving a directory that transformers and
`vllm serve` read as they are.

A checkpoint directory holds `config.json`, `model.safetensors` (or `model-*.safetensors` shards
with `model.safetensors.index.json`), `generation_config.json` and the tokenizer files.

    from model.hf import load_model, save_checkpoint
    model = load_model("~/.cache/composer/models/composer-mini")

Our modules fuse what HF keeps apart (q/k/v into `qkv`, each expert's gate and up projection into
`w13_EFD`); the mapping below is the only place that knows both spellings.

Legend: E experts, F expert hidden width, D model width.
"""

from __future__ import annotations

import json
import os
import re
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


def expert_names(config: ModelConfig, layer: int) -> tuple[str, list[tuple[str, str, str]]]:
    """A layer's router name and each expert's (gate, up, down) names in the config's family:
    Mixtral's `block_sparse_moe` (w1, w3, w2), Qwen3-MoE's `mlp` (gate/up/down_proj), or the
    dense Llama `mlp` (router "", one expert)."""
    p = f"model.layers.{layer}."
    if not config.is_moe:
        return "", [(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight", p + "mlp.down_proj.weight")]
    if config.family == "qwen3_moe":
        m, parts = p + "mlp.", ("gate_proj", "up_proj", "down_proj")
    else:
        m, parts = p + "block_sparse_moe.", ("w1", "w3", "w2")
    return m + "gate.weight", [
        tuple(m + f"experts.{e}.{part}.weight" for part in parts) for e in range(config.num_experts)
    ]


def hf_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """Our parameters under Hugging Face names (the config's family: Mixtral when E > 1, else
    Llama; or Qwen3-MoE)."""
    cfg = model.config
    out: dict[str, torch.Tensor] = {"model.embed_tokens.weight": model.embed.weight}
    q_rows, kv_rows = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."
        q, k, v = layer.attn.qkv.weight.split([q_rows, kv_rows, kv_rows])
        out[p + "input_layernorm.weight"] = layer.attn_norm.weight
        out[p + "self_attn.q_proj.weight"] = q
        out[p + "self_attn.k_proj.weight"] = k
        out[p + "self_attn.v_proj.weight"] = v
        out[p + "self_attn.o_proj.weight"] = layer.attn.o_proj.weight
        out[p + "post_attention_layernorm.weight"] = layer.ffn_norm.weight
        if cfg.qk_norm:
            out[p + "self_attn.q_norm.weight"] = layer.attn.q_norm.weight
            out[p + "self_attn.k_norm.weight"] = layer.attn.k_norm.weight
        experts = layer.moe.experts
        gate_EFD, up_EFD = experts.w13_EFD.chunk(2, dim=1)
        router, names = expert_names(cfg, i)
        if router:
            out[router] = layer.moe.router.weight
        for e, (w1, w3, w2) in enumerate(names):
            out[w1], out[w3], out[w2] = gate_EFD[e], up_EFD[e], experts.w2_EDF[e]
    out["model.norm.weight"] = model.norm.weight
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = model.lm_head.weight
    return {name: t.contiguous() for name, t in out.items()}


def _take(tensors: dict[str, torch.Tensor], name: str, shape: tuple[int, ...], source: str) -> torch.Tensor:
    if name not in tensors:
        raise CheckpointError(f"{source}: tensor {name!r} is missing")
    t = tensors.pop(name)
    if tuple(t.shape) != shape:
        raise CheckpointError(f"{source}: tensor {name!r} has shape {tuple(t.shape)}, config says {shape}")
    return t


def load_hf_state_dict(model: Transformer, tensors: dict[str, torch.Tensor], source: str = "checkpoint") -> None:
    """Copies HF-named tensors into `model`; errors name missing, misshapen and unexpected tensors."""
    cfg = model.config
    tensors = dict(tensors)
    D, F, E = cfg.hidden_size, cfg.intermediate_size, cfg.num_experts
    q_rows, kv_rows = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    with torch.no_grad():
        model.embed.weight.copy_(_take(tensors, "model.embed_tokens.weight", (cfg.vocab_size, D), source))
        for i, layer in enumerate(model.layers):
            p = f"model.layers.{i}."
            layer.attn_norm.weight.copy_(_take(tensors, p + "input_layernorm.weight", (D,), source))
            qkv = [
                _take(tensors, p + "self_attn.q_proj.weight", (q_rows, D), source),
                _take(tensors, p + "self_attn.k_proj.weight", (kv_rows, D), source),
                _take(tensors, p + "self_attn.v_proj.weight", (kv_rows, D), source),
            ]
            layer.attn.qkv.weight.copy_(torch.cat(qkv))
            layer.attn.o_proj.weight.copy_(_take(tensors, p + "self_attn.o_proj.weight", (D, q_rows), source))
            layer.ffn_norm.weight.copy_(_take(tensors, p + "post_attention_layernorm.weight", (D,), source))
            if cfg.qk_norm:
                Dh = cfg.head_dim
                layer.attn.q_norm.weight.copy_(_take(tensors, p + "self_attn.q_norm.weight", (Dh,), source))
                layer.attn.k_norm.weight.copy_(_take(tensors, p + "self_attn.k_norm.weight", (Dh,), source))
            experts = layer.moe.experts
            router, names = expert_names(cfg, i)
            if router:
                layer.moe.router.weight.copy_(_take(tensors, router, (E, D), source))
            for e, (w1, w3, w2) in enumerate(names):
                experts.w13_EFD[e, :F].copy_(_take(tensors, w1, (F, D), source))
                experts.w13_EFD[e, F:].copy_(_take(tensors, w3, (F, D), source))
                experts.w2_EDF[e].copy_(_take(tensors, w2, (D, F), source))
        model.norm.weight.copy_(_take(tensors, "model.norm.weight", (D,), source))
        if not cfg.tie_word_embeddings:
            model.lm_head.weight.copy_(_take(tensors, "lm_head.weight", (cfg.vocab_size, D), source))
    tensors.pop("lm_head.weight", None)  # tied checkpoints may still carry a copy
    leftovers = sorted(n for n in tensors if not re.search(r"rotary_emb\.inv_freq$", n))
    if leftovers:
        raise CheckpointError(f"{source}: unexpected tensors {leftovers[:5]} (and {max(0, len(leftovers) - 5)} more)")


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


def _atomic_write_text(path: Path, text: str) -> None:
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
    _atomic_write_text(directory / "config.json", json.dumps(config.to_hf_dict(dtype_name), indent=2) + "\n")
    extra = [i for i in getattr(tokenizer, "stop_token_ids", []) if i != config.eos_token_id]
    _atomic_write_text(
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
