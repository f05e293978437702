"""The decoding step of B sequences as one C++ call, for int4 models on the CPU.

Python decoding of composer-mini issues about 2,000 small ATen ops a token, and at 10-15 us each
they cost more than the int4 matmuls themselves. model/csrc/fused_decode.cpp runs the same step
(model/runner.py's DECODE role: embedding, 30 layers of norm / int4 qkv (plus a LoRA residual
where the checkpoint has an adapter) / rotary / cache write /
attention / int4 output projection / router / the chosen experts, final norm and int8 head) for
every decoding sequence in one call: the reductions and matmuls are the ops the Python path calls
and the elementwise work is plain loops, so its logits are bit-identical to the Python path's
(tests/model/test_fused_decode.py). It serves what sessions ask for: several sequences at once,
each in its own cache row, routed experts recorded, logprobs and the tool-call constraint (both
applied by the sampler to the logits it returns).

The extension is model/cpu_ext.py's (compiled on first use). `COMPOSER_FUSED_DECODE=0` turns the
fused step off.

    from model.fused_decode import FusedDecode
    fused = FusedDecode.build(model, cache, kernels)     # model quantized with quantize_model(.., "int4")
    logits_BV, experts_BLk = fused.step(tokens, rows, positions, routing=True)

Legend: B sequences, V vocab, L layers, k experts per token.
"""

from __future__ import annotations

import os

import torch

from model.kernels import Kernels
from model.kv import KVCache
from model.transformer import Transformer

ENV_VAR = "COMPOSER_FUSED_DECODE"


class FusedDecodeUnavailable(RuntimeError):
    """The extension cannot be built or loaded here, or the model is not one it runs."""


def enabled_by_env() -> bool:
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


def unsupported_reason(model: Transformer) -> str | None:
    """Why the fused step cannot run this model (None when it can): it handles model/quant.py's
    int4 layers with fp32 activations on the CPU, as `quantize_model(model, "int4")` leaves them."""
    from model.quant import Int4Linear, Int8Linear, QuantizedExperts

    if getattr(model, "quantization", "none") != "int4":
        return "the model is not quantized to int4"
    if model.config.qk_norm or not model.config.norm_topk_prob:
        return f"the fused step computes Mixtral's block only, not {model.config.architecture}'s"
    if model.embed.weight.dtype != torch.float32 or model.embed.weight.device.type != "cpu":
        return "the fused step runs fp32 activations on the CPU"
    if not isinstance(model.lm_head, Int8Linear):
        return "the output head is not int8"
    for layer in model.layers:
        attn, moe = layer.attn, layer.moe
        if not (isinstance(attn.qkv, Int4Linear) and isinstance(attn.o_proj, Int4Linear)):
            return "an attention projection is not int4"
        if not isinstance(moe.experts, QuantizedExperts):
            return "the experts are not int4"
        sizes = {w.group_size for w in [attn.qkv, attn.o_proj, *moe.experts.w13, *moe.experts.w2]}
        if len(sizes) != 1:
            return "int4 group sizes differ between matrices"
    return None


class FusedDecode:
    """The C++ decoder bound to one model's weights and one KV cache (no copies: it holds
    references to the same tensors, so the cache it writes is the engine's)."""

    def __init__(self, decoder) -> None:
        self._decoder = decoder

    @classmethod
    def build(cls, model: Transformer, cache: KVCache, kernels: Kernels) -> FusedDecode:
        reason = unsupported_reason(model) or (None if kernels.ext is not None else kernels.reason)
        if reason is not None:
            raise FusedDecodeUnavailable(reason)
        config = model.config
        decoder = kernels.ext.FusedDecoder(
            config.num_heads, config.num_kv_heads, config.head_dim, config.top_k, config.rms_norm_eps,
            model.embed.weight.detach(), model.rotary.cos, model.rotary.sin, model.norm.weight.detach(),
            model.lm_head.q_OI, model.lm_head.scale_O,
        )
        none = torch.empty(0)

        def matrix(w) -> list[torch.Tensor]:  # an Int4Linear, its adapter's residual (empty if none)
            low_rank = [none, none] if w.lora_down is None else [w.lora_down, w.lora_up]
            return [w.packed, w.scales_and_zeros, *low_rank]

        for layer, cache_k, cache_v in zip(model.layers, cache.k, cache.v):
            attn, experts = layer.attn, layer.moe.experts
            router = layer.moe.router.weight.detach() if config.num_experts > 1 else torch.empty(0)
            decoder.add_layer(
                layer.attn_norm.weight.detach(), matrix(attn.qkv), matrix(attn.o_proj),
                layer.ffn_norm.weight.detach(), router,
                [matrix(w) for w in experts.w13], [matrix(w) for w in experts.w2],
                attn.qkv.group_size, cache_k, cache_v,
            )
        return cls(decoder)

    def step(self, tokens: list[int], rows: list[int], positions: list[int],
             routing: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Feeds tokens[b] at positions[b] of cache row rows[b], each attending to positions
        [0, positions[b]] of its row; returns the logits (B, V) fp32 and, with `routing`, the
        routed experts (B, L, k). Releases the GIL while it runs."""
        logits, experts = self._decoder.step(torch.tensor(tokens), torch.tensor(rows), torch.tensor(positions), routing)
        return logits, (experts if routing else None)

    def profile(self, on: bool = True) -> dict[str, float] | None:
        """Turns per-part timing on or off; returns the seconds accumulated since the last call
        (norm, int4_mm, rotary_cache, attention, router, expert_glue, head)."""
        out = self._decoder.take_profile()
        self._decoder.set_profiling(on)
        return out
