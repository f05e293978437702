"""The Mixtral-shaped decoder: token embedding, pre-norm blocks of grouped-query attention and a
routed SwiGLU MoE, a final RMSNorm and the output head.

    model = Transformer(ModelConfig.debug()).init_weights(seed=0)
    out = model(input_ids_BS)                                   # full causal forward (training)

Training with routing replay: `given_experts_BSLk` forces each position's experts per layer (the
rollout's `Completion.routed_experts`, model/moe.py says how the gate weights follow), the router
logits come back for an auxiliary loss, and gradient checkpointing recomputes each block in the
backward pass instead of keeping its activations:

    out = model(ids_BS, given_experts_BSLk=experts, return_router_logits=True, gradient_checkpointing=True)
    logprobs_C = completion_logprobs(model, prompt_ids, completion.token_ids, completion.routed_experts)

Legend: B rows, S positions, D width, V vocab, L layers,
k experts per token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from model.config import ModelConfig
from model.layers import Attention, ContextKeys, GradPositions, PackedRows, RMSNorm, Rotary
from model.moe import MoE, check_given_experts


@dataclass
class ForwardOutput:
    logits: torch.Tensor
    """(B, S, V), or (B, len(logits_at), V) when only some positions were asked for."""
    routing_BSLk: torch.Tensor | None = None
    """Experts each position was routed to, per layer (when asked for)."""
    router_logits_BSLE: torch.Tensor | None = None
    """The router's fp32 logits per position and layer (when asked for; MoE models only)."""


class Block(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attn = Attention(config)
        self.ffn_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.moe = MoE(config)

    def forward(self, x_BSD, rope, given_experts_BSk=None, packed=None, context=None, grad=None):
        """Returns (x_BSD, experts_BSk, router_logits_BSE or None); `context` and `grad`: see
        Attention.forward."""
        x_BSD = x_BSD + self.attn(self.attn_norm(x_BSD), rope, packed, context, grad)
        B, S, D = x_BSD.shape
        given_Nk = None if given_experts_BSk is None else given_experts_BSk.reshape(B * S, -1)
        y_ND, experts_Nk, logits_NE = self.moe(self.ffn_norm(x_BSD).view(B * S, D), given_Nk)
        logits_BSE = None if logits_NE is None else logits_NE.view(B, S, -1)
        return x_BSD + y_ND.view(B, S, D), experts_Nk.view(B, S, -1), logits_BSE


def run_block(block: Block, gradient_checkpointing: bool, *args):
    """`block(*args)`, recomputed in the backward pass instead of keeping its activations when
    `gradient_checkpointing` is on and gradients are being recorded."""
    if gradient_checkpointing and torch.is_grad_enabled():
        return checkpoint(block, *args, use_reentrant=False)
    return block(*args)


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
        logits_at: torch.Tensor | None = None,
        return_routing: bool = False,
        *,
        given_experts_BSLk: torch.Tensor | None = None,
        return_router_logits: bool = False,
        gradient_checkpointing: bool = False,
        packed: PackedRows | None = None,
        grad_at: GradPositions | None = None,
    ) -> ForwardOutput:
        """The full forward over `input_ids_BS` at `positions_BS` (default 0..S-1; packed training
        rows restart them per sample). The engine decodes incrementally with model/runner.py.
        `logits_at` (B, P): compute the head only at these positions of each row; the head is
        the largest matmul per token, so prefill asks for the last position alone.

        Training: `given_experts_BSLk` (B, S, L, k) integer experts per position and layer
        replace the router's choice (-1 on a whole (position, layer): the router's own);
        `return_router_logits` fills `router_logits_BSLE`; `gradient_checkpointing` recomputes
        each block in the backward pass; `packed` lays rows out as several samples behind one
        shared prefix (model/layers.py PackedRows, built by training/batch.py).

        `grad_at`, a detached context: only its positions are computed with gradient, and the
        logits come back at them (as `logits_at` would). A pass without gradient over every
        position records each layer's keys and values; a second pass over `grad_at`'s positions
        alone attends over them as constants, with its own keys and values (which carry the
        gradient) written in. The logits equal the full forward's; the gradient leaves out the
        paths through the other positions' activations. Training's use: the prompt and tool
        outputs are most of an agent sample's positions, and only the policy's own tokens carry
        loss (training/config.py `context_gradient`). With `grad_at`, `logits_at` (B, P) indexes
        `grad_at`'s positions: the head runs at those alone (training/config.py
        `instructions_gradient`: gradient on the whole conversation, logits at its loss positions)."""
        B, S = input_ids_BS.shape
        if positions_BS is None:
            positions_BS = torch.arange(S, device=input_ids_BS.device).expand(B, S)
        limit = self.config.max_position_embeddings
        if int(positions_BS.max()) >= limit:
            raise ValueError(f"position {int(positions_BS.max())} exceeds the model's context of {limit} tokens")
        if given_experts_BSLk is not None:
            self._check_given_experts(given_experts_BSLk, B, S)
        if grad_at is not None:
            if return_routing or return_router_logits:
                raise ValueError("a detached-context forward returns logits at `grad_at`'s positions only")
            return self._forward_detached(input_ids_BS, positions_BS, grad_at, given_experts_BSLk,
                                          gradient_checkpointing, packed, logits_at)
        x_BSD = self.embed(input_ids_BS)
        rope = self.rotary(positions_BS, x_BSD.dtype)
        routing, router_logits = [], []
        for i, layer in enumerate(self.layers):
            given = None if given_experts_BSLk is None else given_experts_BSLk[:, :, i]
            x_BSD, experts_BSk, logits_BSE = run_block(layer, gradient_checkpointing, x_BSD, rope, given, packed)
            routing.append(experts_BSk)
            router_logits.append(logits_BSE)
        if logits_at is not None:
            x_BSD = torch.gather(x_BSD, 1, logits_at.unsqueeze(-1).expand(-1, -1, x_BSD.shape[-1]))
        logits = self.lm_head(self.norm(x_BSD))
        return ForwardOutput(
            logits,
            torch.stack(routing, dim=2) if return_routing else None,
            torch.stack(router_logits, dim=2) if return_router_logits and self.config.is_moe else None,
        )

    def _forward_detached(self, input_ids_BS, positions_BS, grad: GradPositions, given_BSLk,
                          gradient_checkpointing: bool, packed: PackedRows | None,
                          logits_at: torch.Tensor | None = None) -> ForwardOutput:
        contexts = [ContextKeys() for _ in self.layers]
        with torch.no_grad():
            x_BSD = self.embed(input_ids_BS)
            rope = self.rotary(positions_BS, x_BSD.dtype)
            for i, layer in enumerate(self.layers):
                given = None if given_BSLk is None else given_BSLk[:, :, i]
                x_BSD = layer(x_BSD, rope, given, packed, contexts[i])[0]
        at_BG = grad.at_BG
        x_BGD = self.embed(input_ids_BS.gather(1, at_BG))
        rope = self.rotary(positions_BS.gather(1, at_BG), x_BGD.dtype)
        given_BGLk = None
        if given_BSLk is not None:
            index = at_BG.view(*at_BG.shape, 1, 1).expand(-1, -1, *given_BSLk.shape[2:])
            given_BGLk = given_BSLk.gather(1, index)
        for i, layer in enumerate(self.layers):
            given = None if given_BGLk is None else given_BGLk[:, :, i]
            x_BGD = run_block(layer, gradient_checkpointing, x_BGD, rope, given, None, contexts[i], grad)[0]
        if logits_at is not None:
            x_BGD = torch.gather(x_BGD, 1, logits_at.unsqueeze(-1).expand(-1, -1, x_BGD.shape[-1]))
        return ForwardOutput(self.lm_head(self.norm(x_BGD)))

    def _check_given_experts(self, given_BSLk: torch.Tensor, B: int, S: int) -> None:
        cfg = self.config
        expected = (B, S, cfg.num_layers, cfg.top_k)
        if tuple(given_BSLk.shape) != expected:
            raise ValueError(
                f"given experts have shape {tuple(given_BSLk.shape)}; expected (B, S, layers, top_k) = {expected}"
            )
        check_given_experts(given_BSLk.reshape(-1, cfg.top_k), cfg.num_experts, cfg.top_k)


def completion_logprobs(
    model: Transformer,
    prompt_ids: list[int],
    completion_ids: list[int],
    routed_experts: torch.Tensor | None = None,
    *,
    temperature: float = 1.0,
    gradient_checkpointing: bool = False,
) -> torch.Tensor:
    """The trainer's logprob of each completion token: log_softmax(logits / T) at the position
    before it, from one full forward over prompt + completion (all but the last token, which
    is never fed), as the engine's sampler computes them (model/sampling.py). `routed_experts`
    (positions, L, k) replays a rollout's routing (`Completion.routed_experts`, recorded with
    `return_routing`). Returns (C,) fp32, differentiable when grad is enabled."""
    logprobs_CV = completion_distributions(model, prompt_ids, completion_ids, routed_experts,
                                           temperature=temperature, gradient_checkpointing=gradient_checkpointing)
    targets = torch.tensor(completion_ids, device=logprobs_CV.device)
    return logprobs_CV.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def completion_distributions(
    model: Transformer,
    prompt_ids: list[int],
    completion_ids: list[int],
    routed_experts: torch.Tensor | None = None,
    *,
    temperature: float = 1.0,
    gradient_checkpointing: bool = False,
) -> torch.Tensor:
    """completion_logprobs' whole distributions: (C, V) fp32 log_softmax(logits / T) at the
    position before each completion token."""
    if not completion_ids:
        raise ValueError("the completion is empty")
    fed = list(prompt_ids) + list(completion_ids)[:-1]
    given = None
    if routed_experts is not None:
        if routed_experts.shape[0] != len(fed):
            raise ValueError(
                f"routed_experts covers {routed_experts.shape[0]} positions; prompt + completion - 1 "
                f"= {len(fed)} were fed"
            )
        given = routed_experts.unsqueeze(0)
    device = model.embed.weight.device
    out = model(
        torch.tensor([fed], device=device), given_experts_BSLk=given, gradient_checkpointing=gradient_checkpointing
    )
    logits_CV = out.logits[0, len(prompt_ids) - 1 :].float() / (temperature or 1.0)
    return logits_CV.log_softmax(dim=-1)
