"""The engine's forward pass: a flat batch of tokens, each at its own (cache row, position),
through the model with the row-invariant kernels of model/kernels.py.

One call takes any mix of sequences: prefill chunks (runs of prompt tokens at consecutive
positions, role PREFILL) or decoded tokens, one or more per sequence (role DECODE). Each token
writes its keys and values into its row at its position and attends to positions [0, its own].
Because every kernel is row-invariant, a token's result does not depend on the rest of the
call: a prompt computed in chunks, or partly copied from the prefix cache, gives the same bits as
computed whole; a sequence decodes the same alone or batched. model/fused_decode.py runs the
DECODE role of this file in C++, op for op (tests/model/test_fused_decode.py holds them equal).

    runner = Runner(model, cache, Kernels.load())
    out = runner.forward(ids_N, rows_N, pos_N, PREFILL, logits_at=[n - 1])

Legend: N tokens, D width, H query heads, K key/value heads, Dh head width, V vocab, L layers,
E experts, k experts per token, M = N * k routed rows, F expert hidden width.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from model.kernels import PREFILL, Int4RoleLinear, Kernels, RoleLinear
from model.kv import KVCache
from model.layers import apply_rotary
from model.moe import route
from model.transformer import Transformer


@dataclass
class RunnerOutput:
    logits: torch.Tensor
    """(P, V) fp32 at the `logits_at` tokens (all N when not given)."""
    experts_NLk: torch.Tensor
    """Experts each token was routed to, per layer."""


@dataclass
class _Layer:
    attn_norm: torch.Tensor
    ffn_norm: torch.Tensor
    qkv: RoleLinear
    o_proj: RoleLinear
    router: RoleLinear | None
    w13: list[RoleLinear]
    w2: list[RoleLinear]
    qk_norm: tuple[nn.Module, nn.Module] | None
    """Qwen3's per-head query and key norms (applied before the rotary embedding), or None."""


class Runner:
    def __init__(self, model: Transformer, cache: KVCache, kernels: Kernels) -> None:
        from model.quant import QuantizedExperts

        self.model, self.cache, self.kernels = model, cache, kernels
        self.config = config = model.config
        self.int4 = getattr(model, "quantization", "none") == "int4"
        self.layers = []
        for layer in model.layers:
            experts = layer.moe.experts
            if isinstance(experts, QuantizedExperts):
                w13, w2 = list(experts.w13), list(experts.w2)
            else:
                w13, w2 = list(experts.w13_EFD.detach()), list(experts.w2_EDF.detach())
            self.layers.append(_Layer(
                layer.attn_norm.weight.detach(), layer.ffn_norm.weight.detach(),
                kernels.linear(layer.attn.qkv), kernels.linear(layer.attn.o_proj),
                kernels.linear(layer.moe.router.weight) if config.num_experts > 1 else None,
                [kernels.linear(w) for w in w13], [kernels.linear(w) for w in w2],
                (layer.attn.q_norm, layer.attn.k_norm) if config.qk_norm else None,
            ))
        self.head = kernels.linear(model.lm_head)

    def refresh(self, written: Iterable[torch.Tensor]) -> int:
        """After a weight update wrote the tensors `written` in place: rebuilds the dense prompt
        copies of the int4 layers that read them (every other role linear reads the live tensors).
        A LoRA-shaped update touches a few layers, so this is far cheaper than a new Runner.
        Returns how many it rebuilt."""
        storages = {t.untyped_storage().data_ptr() for t in written}
        linears = [self.head, *(x for layer in self.layers for x in (layer.qkv, layer.o_proj, *layer.w13, *layer.w2))]
        stale = [x for x in linears if isinstance(x, Int4RoleLinear) and x.reads(storages)]
        for linear in stale:
            linear.refresh()
        return len(stale)

    def forward(self, ids_N: torch.Tensor, rows_N: torch.Tensor, pos_N: torch.Tensor, role: str,
                logits_at: list[int] | None = None) -> RunnerOutput:
        config = self.config
        if int(pos_N.max()) >= config.max_position_embeddings:
            raise ValueError(f"position {int(pos_N.max())} exceeds the model's context of "
                             f"{config.max_position_embeddings} tokens")
        x_ND = self.model.embed.weight.detach()[ids_N]
        experts = []
        for i, layer in enumerate(self.layers):
            x_ND = x_ND + self._attention(i, layer, x_ND, rows_N, pos_N, role)
            y_ND, experts_Nk = self._moe(layer, self.kernels.rms_norm(x_ND, layer.ffn_norm, config.rms_norm_eps), role)
            x_ND = x_ND + y_ND
            experts.append(experts_Nk)
        if logits_at is not None:
            x_ND = x_ND[logits_at]
        h_ND = self.kernels.rms_norm(x_ND, self.model.norm.weight.detach(), config.rms_norm_eps)
        return RunnerOutput(self.head(h_ND, role), torch.stack(experts, dim=1))

    def _attention(self, i, layer: _Layer, x_ND, rows_N, pos_N, role) -> torch.Tensor:
        config, N = self.config, x_ND.shape[0]
        H, K, Dh = config.num_heads, config.num_kv_heads, config.head_dim
        h_ND = self.kernels.rms_norm(x_ND, layer.attn_norm, config.rms_norm_eps)
        qkv = layer.qkv(h_ND, role)
        cache_k, cache_v = self.cache.k[i], self.cache.v[i]
        if self._rotary_in_cpp(layer, qkv):  # the same arithmetic in one call, parallel over tokens
            rotary = self.model.rotary
            q = self.kernels.ext.rotary_store(qkv.contiguous(), rotary.cos, rotary.sin, rows_N, pos_N, cache_k, cache_v, H)
            out = self.kernels.attention(q, cache_k, cache_v, rows_N, pos_N, role, bf16=self.int4)
            return layer.o_proj(out.view(N, H * Dh), role)
        qk, v = qkv.split([(H + K) * Dh, K * Dh], dim=-1)
        qk = qk.view(1, N, H + K, Dh)
        if layer.qk_norm is not None:
            with torch.no_grad():
                q, k = qk.split([H, K], dim=2)
                qk = torch.cat([layer.qk_norm[0](q), layer.qk_norm[1](k)], dim=2)
        cos_NDh, sin_NDh = self.model.rotary.cos[pos_N], self.model.rotary.sin[pos_N]
        q, k = apply_rotary(qk, cos_NDh[None], sin_NDh[None])[0].split([H, K], dim=1)
        # Advanced indices around a slice put N first: the value is (N, K, Dh).
        cache_k[rows_N, :, pos_N] = self.kernels.store_rows(k, cache_k.dtype)
        cache_v[rows_N, :, pos_N] = self.kernels.store_rows(v.view(N, K, Dh), cache_v.dtype)
        out = self.kernels.attention(q, cache_k, cache_v, rows_N, pos_N, role, bf16=self.int4)
        return layer.o_proj(out.view(N, H * Dh), role)

    def _rotary_in_cpp(self, layer: _Layer, qkv: torch.Tensor) -> bool:
        """Whether the extension's rotary_store can rotate these heads and store their keys and
        values: fp32 activations, no per-head norms (Qwen3's go between the projection and the
        rotary embedding)."""
        return (self.kernels.ext is not None and layer.qk_norm is None and qkv.dtype == torch.float32
                and self.model.rotary.cos.dtype == torch.float32)

    def _moe(self, layer: _Layer, h_ND: torch.Tensor, role: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens grouped by expert (stable), one matmul per expert, each token's outputs summed
        in ascending expert order: the arithmetic of a token is the same in any batch."""
        N = h_ND.shape[0]
        if layer.router is None:  # dense: the single expert's weight is exactly 1
            return _expert(layer, 0, h_ND, role), torch.zeros(N, 1, dtype=torch.long)
        k = self.config.top_k
        weights_Nk, experts_Nk = route(layer.router(h_ND, role), k, self.config.norm_topk_prob)
        packed = self._packed_experts(layer) if role == PREFILL else None
        if packed is not None:
            return self.kernels.ext.moe_vnni(h_ND, experts_Nk, weights_Nk, *packed), experts_Nk
        flat_M = experts_Nk.flatten()
        order_M = flat_M.argsort(stable=True)
        token_M = order_M // k
        counts = torch.bincount(flat_M, minlength=self.config.num_experts).tolist()
        x_MD = h_ND[token_M]
        y_MD = torch.empty_like(x_MD)
        start = 0
        for e, count in enumerate(counts):
            if count:
                y_MD[start : start + count] = _expert(layer, e, x_MD[start : start + count], role)
            start += count
        y_MD = y_MD * weights_Nk.flatten()[order_M].unsqueeze(-1)
        return torch.zeros_like(h_ND).index_add_(0, token_M, y_MD), experts_Nk

    def _packed_experts(self, layer: _Layer) -> tuple[list[torch.Tensor], list[torch.Tensor]] | None:
        """The experts' dense prompt copies in pack_vnni's blocks (int4 weights on a CPU with a
        bf16 matrix unit), for the one-call MoE kernel; None where the layer has none."""
        linears = [*layer.w13, *layer.w2]
        if not self.kernels.bf16_matrix or not all(isinstance(w, Int4RoleLinear) and w.dense is not None
                                                   for w in linears):
            return None
        return [w.dense for w in layer.w13], [w.dense for w in layer.w2]


def _expert(layer: _Layer, e: int, x_MD: torch.Tensor, role: str) -> torch.Tensor:
    gate_MF, up_MF = layer.w13[e](x_MD, role).chunk(2, dim=-1)
    return layer.w2[e](F.silu(gate_MF) * up_MF, role)

