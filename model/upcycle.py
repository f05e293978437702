"""Sparse upcycling: a dense Llama checkpoint becomes a Mixtral-shaped MoE whose experts all start as
copies of the dense FFN.

    from model.upcycle import upcycle
    moe_config, moe_state_dict = upcycle(config, dense_state_dict, num_experts=8, top_k=2)
    python -m model.convert upcycle --out DIR     # the same, from the bundled SmolLM2 weights

Why it is exact at step 0: Mixtral softmaxes the router logits, keeps the top-k and renormalises
them to sum to one. When every expert is the same function f, the layer computes
sum_k w_k f(x) = f(x) whatever the router says, so the MoE equals the dense model (to float
rounding). The router starts small and random (seeded) so that training can break the symmetry;
`noise > 0` breaks it at once by perturbing each expert copy, and then the MoE is no longer exactly
the dense model.

Legend: E experts, F expert hidden width, D model width, V vocabulary.
"""

from __future__ import annotations

import torch

from model.config import ModelConfig

ROUTER_STD = 0.02
"""Standard deviation of the router's initial weights (the model's initializer_range)."""


def check_upcycle_args(num_experts: int, top_k: int, noise: float) -> None:
    """Raises ValueError, naming the values, unless E >= 2, 1 <= top_k <= E and noise >= 0."""
    if not isinstance(num_experts, int) or num_experts < 2:
        raise ValueError(
            f"num_experts must be an integer >= 2 (1 expert is the dense model), got {num_experts!r} "
            f"(with top_k={top_k!r})"
        )
    if not isinstance(top_k, int) or not 1 <= top_k <= num_experts:
        raise ValueError(f"top_k must be between 1 and num_experts ({num_experts}), got {top_k!r}")
    if not noise >= 0.0:  # also rejects NaN
        raise ValueError(f"noise must be >= 0.0 (a relative standard deviation), got {noise!r}")


def _take(state_dict: dict[str, torch.Tensor], name: str, shape: tuple[int, ...]) -> torch.Tensor:
    if name not in state_dict:
        raise ValueError(f"dense state dict has no tensor {name!r}")
    tensor = state_dict[name]
    if tuple(tensor.shape) != shape:
        raise ValueError(f"dense tensor {name!r} has shape {tuple(tensor.shape)}, config says {shape}")
    return tensor


def _expert_copy(weight: torch.Tensor, noise: float, generator: torch.Generator) -> torch.Tensor:
    """A fresh copy of `weight`; with noise, plus Gaussian noise of std `noise * weight.std()`."""
    copy = weight.detach().clone()
    if noise > 0.0:
        scale = noise * weight.float().std()
        jitter = torch.randn(weight.shape, generator=generator, dtype=torch.float32) * scale
        copy += jitter.to(copy.dtype)
    return copy


def upcycle(
    config: ModelConfig,
    dense_state_dict: dict[str, torch.Tensor],
    num_experts: int = 8,
    top_k: int = 2,
    noise: float = 0.0,
    seed: int = 0,
) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """(MoE config, state dict in HF Mixtral names) from a dense config and HF Llama state dict.

    Every expert is a copy of the dense FFN (w1 = gate_proj, w3 = up_proj, w2 = down_proj), the
    router `gate.weight` [E, D] is N(0, 0.02^2) from `seed`, attention and norms are shared as they
    are, and the output head is untied (a copy of the embeddings when the dense model ties them).
    With `noise=0` the MoE computes the dense model exactly; `noise > 0` does not.
    """
    check_upcycle_args(num_experts, top_k, noise)
    if config.is_moe:
        raise ValueError(
            f"upcycle needs a dense config (num_experts=1), got num_experts={config.num_experts} "
            f"with top_k={config.top_k}"
        )
    moe = config.replace(num_experts=num_experts, top_k=top_k, tie_word_embeddings=False)
    D, F, V = config.hidden_size, config.intermediate_size, config.vocab_size
    q_rows, kv_rows = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    # Two streams, so that the router does not depend on whether noise is drawn.
    router_gen = torch.Generator().manual_seed(seed)
    noise_gen = torch.Generator().manual_seed(seed + 1)
    embed_VD = _take(dense_state_dict, "model.embed_tokens.weight", (V, D))
    out: dict[str, torch.Tensor] = {"model.embed_tokens.weight": embed_VD}
    for i in range(config.num_layers):
        p = f"model.layers.{i}."
        shared = {
            "input_layernorm.weight": (D,), "post_attention_layernorm.weight": (D,),
            "self_attn.q_proj.weight": (q_rows, D), "self_attn.k_proj.weight": (kv_rows, D),
            "self_attn.v_proj.weight": (kv_rows, D), "self_attn.o_proj.weight": (D, q_rows),
        }
        for name, shape in shared.items():
            out[p + name] = _take(dense_state_dict, p + name, shape)
        gate_FD = _take(dense_state_dict, p + "mlp.gate_proj.weight", (F, D))
        up_FD = _take(dense_state_dict, p + "mlp.up_proj.weight", (F, D))
        down_DF = _take(dense_state_dict, p + "mlp.down_proj.weight", (D, F))
        m = p + "block_sparse_moe."
        router_ED = torch.randn((num_experts, D), generator=router_gen) * ROUTER_STD
        out[m + "gate.weight"] = router_ED.to(gate_FD.dtype)
        for e in range(num_experts):
            out[m + f"experts.{e}.w1.weight"] = _expert_copy(gate_FD, noise, noise_gen)
            out[m + f"experts.{e}.w3.weight"] = _expert_copy(up_FD, noise, noise_gen)
            out[m + f"experts.{e}.w2.weight"] = _expert_copy(down_DF, noise, noise_gen)
    out["model.norm.weight"] = _take(dense_state_dict, "model.norm.weight", (D,))
    head = dense_state_dict.get("lm_head.weight")
    if head is None or config.tie_word_embeddings:
        head = embed_VD
    out["lm_head.weight"] = _take({"lm_head.weight": head}, "lm_head.weight", (V, D)).detach().clone()
    return moe, out
