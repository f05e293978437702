"""The Mixtral-shaped decoder: token embedding, pre-norm blocks of grouped-query attention and a
routed SwiGLU MoE, a final RMSNorm and the output head.

    model = Transformer(ModelConfig.debug()).init_weights(seed=0)
    out = model(input_ids_BS)                                   # full causal forward (training)
    out = model(ids_BS, positions_BS=pos, cache=kv, attend_len=T, logits_at=idx)   # engine

Legend: B rows, S positions this call, T attended cache positions, D width, V vocab, L layers,
k experts per token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from model.config import ModelConfig
from model.layers import Attention, KVCache, RMSNorm, Rotary
from model.moe import MoE


@dataclass
class ForwardOutput:
    logits: torch.Tensor
    """(B, S, V), or (B, len(logits_at), V) when only some positions were asked for."""
    routing_BSLk: torch.Tensor | None = None
    """Experts each position was routed to, per layer (when asked for)."""


class Block(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attn = Attention(config)
        self.ffn_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.moe = MoE(config)

    def forward(self, x_BSD, rope, cache=None, positions_BS=None, attend_len=0):
        x_BSD = x_BSD + self.attn(self.attn_norm(x_BSD), rope, cache, positions_BS, attend_len)
        B, S, D = x_BSD.shape
        y_ND, experts_Nk = self.moe(self.ffn_norm(x_BSD).view(B * S, D))
        return x_BSD + y_ND.view(B, S, D), experts_Nk.view(B, S, -1)


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.rotary = Rotary(config.head_dim, config.max_position_embeddings, config.rope_theta)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.tie_weights()

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.embed.weight

    def init_buffers(self) -> None:
        """After construction on the meta device and moving: fills the non-persistent buffers and
        re-ties the head (moving off meta may replace parameters one module at a time)."""
        self.rotary.init_buffers()
        self.tie_weights()

    @torch.no_grad()
    def init_weights(self, seed: int = 0, std: float = 0.02) -> Transformer:
        """Random initialisation for tests and from-scratch training (normal(0, std), norms 1)."""
        gen = torch.Generator().manual_seed(seed)
        for name, param in self.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=gen) * std)
        return self

    def forward(
        self,
        input_ids_BS: torch.Tensor,
        positions_BS: torch.Tensor | None = None,
        cache: KVCache | None = None,
        rows: slice | None = None,
        attend_len: int = 0,
        write_at_BS: torch.Tensor | None = None,
        logits_at: torch.Tensor | None = None,
        return_routing: bool = False,
    ) -> ForwardOutput:
        """`cache` with `positions_BS` and `attend_len`: incremental decoding into the cache rows
        `rows` (default the first B); `write_at_BS` redirects cache writes (see Attention).
        `logits_at` (B, P): compute the head only at these positions of each row; the head is
        the largest matmul per token, so prefill asks for the last position alone."""
        B, S = input_ids_BS.shape
        if positions_BS is None:
            positions_BS = torch.arange(S, device=input_ids_BS.device).expand(B, S)
        limit = self.config.max_position_embeddings
        if int(positions_BS.max()) >= limit:
            raise ValueError(f"position {int(positions_BS.max())} exceeds the model's context of {limit} tokens")
        x_BSD = self.embed(input_ids_BS)
        rope = self.rotary(positions_BS, x_BSD.dtype)
        routing = []
        for i, layer in enumerate(self.layers):
            layer_cache = None
            if cache is not None:
                rows = rows or slice(0, B)
                layer_cache = (cache.k[i][rows], cache.v[i][rows], write_at_BS)
            x_BSD, experts_BSk = layer(x_BSD, rope, layer_cache, positions_BS, attend_len)
            routing.append(experts_BSk)
        if logits_at is not None:
            x_BSD = torch.gather(x_BSD, 1, logits_at.unsqueeze(-1).expand(-1, -1, x_BSD.shape[-1]))
        logits = self.lm_head(self.norm(x_BSD))
        return ForwardOutput(logits, torch.stack(routing, dim=2) if return_routing else None)
