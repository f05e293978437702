"""The mixture-of-experts FFN: a top-k softmax router and SwiGLU experts whose matmuls go through
one overridable seam, `grouped_mm`, so kernels/ can swap in MXFP8 without touching the model.

Routing follows Mixtral: softmax over all experts in fp32, keep the top k, renormalise the kept
weights to sum to 1. With every expert equal (an upcycled dense model) the output is therefore
exactly the dense FFN whatever the router says. Qwen3-MoE may skip the renormalisation
(`config.norm_topk_prob=False`): the kept weights are then the plain softmax probabilities.

Routing replay (RL, "R3"): given experts replace the top-k choice and their weights are the same
softmax renormalised over the given experts (equal to a softmax of the router logits restricted
to them; without renormalisation, `norm_topk_prob=False`, their plain softmax probabilities: the
family's own rule either way), so the router still gets gradients; given the router's own choice, the weights are
bit-identical to plain routing. A position given -1 is routed by the router. The router logits
come back for a load-balancing or z-loss (`load_balancing_loss`, `router_z_loss`).

Legend: N tokens, D model width, F expert hidden width, E experts, k experts per token,
M = N * k routed rows sorted by expert.

    y_ND, experts_Nk, router_logits_NE = MoE(config)(x_ND)
    y_ND, experts_Nk, router_logits_NE = MoE(config)(x_ND, given_experts_Nk)   # replay
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from model.config import ModelConfig

GroupedMM = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def grouped_mm_reference(x_MI: torch.Tensor, w_EOI: torch.Tensor, offsets_E: torch.Tensor) -> torch.Tensor:
    """out[rows of group e] = x[rows of group e] @ w[e].T, where group e is the rows
    [offsets[e-1], offsets[e]) of x (rows sorted by expert; offsets are cumulative ends).

    One linear per non-empty group, on views of the stacked weights: no weight is copied, so a
    single decoded token reads only the k experts it was routed to. Under autograd the pieces
    come from one `split` of x and one `unbind` of w and the outputs are concatenated: indexing
    or slice writes would each cost a zero-filled gradient of the whole tensor in the backward
    pass (a stacked-weight gradient per expert: most of a training step's time).
    """
    ends = offsets_E.tolist()
    sizes = [end - start for start, end in zip([0, *ends[:-1]], ends, strict=True)]
    parts = [F.linear(x, w) for x, w, n in zip(x_MI.split(sizes), w_EOI.unbind(0), sizes, strict=True) if n]
    if not parts:
        return x_MI.new_empty(x_MI.shape[0], w_EOI.shape[1])
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def select_grouped_mm(expert_matmul: str) -> GroupedMM:
    """The seam's implementation for `ModelConfig.expert_matmul`."""
    if expert_matmul == "bf16":
        return grouped_mm_reference
    from kernels.grouped_mm import mxfp8_grouped_mm  # imported only when asked for

    return mxfp8_grouped_mm


class Router(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.top_k, self.norm_topk_prob = config.top_k, config.norm_topk_prob
        self.weight = nn.Parameter(torch.empty(config.num_experts, config.hidden_size))

    def forward(
        self, x_ND: torch.Tensor, given_experts_Nk: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns (weights_Nk in x's dtype, experts_Nk int64, logits_NE fp32). With
        `given_experts_Nk` (int, -1 for "the router's choice" on whole rows), those experts."""
        logits_NE = F.linear(x_ND, self.weight).float()
        probs_NE = logits_NE.softmax(dim=-1)
        weights_Nk, experts_Nk = probs_NE.topk(self.top_k, dim=-1)
        if given_experts_Nk is not None:
            given = given_experts_Nk.to(experts_Nk.device, torch.long)
            experts_Nk = torch.where(given[:, :1] >= 0, given, experts_Nk)
            weights_Nk = probs_NE.gather(-1, experts_Nk)
        if self.norm_topk_prob:
            weights_Nk = weights_Nk / weights_Nk.sum(dim=-1, keepdim=True)
        return weights_Nk.to(x_ND.dtype), experts_Nk, logits_NE


def check_given_experts(given_Nk: torch.Tensor, num_experts: int, top_k: int) -> None:
    """Raises ValueError unless each row holds k distinct experts in [0, E), or is all -1."""
    if given_Nk.dtype.is_floating_point or given_Nk.dtype == torch.bool or given_Nk.shape[-1] != top_k:
        raise ValueError(f"given experts must be integers with {top_k} per position, got {given_Nk.dtype} {tuple(given_Nk.shape)}")
    routed = given_Nk[:, 0] >= 0
    if bool((given_Nk[~routed] != -1).any()):
        raise ValueError("a position's given experts are all -1 (the router chooses) or none is")
    chosen = given_Nk[routed].long().sort(dim=-1).values
    if chosen.numel() and (int(chosen.max()) >= num_experts or int(chosen.min()) < 0):
        raise ValueError(f"given experts must be in [0, {num_experts}), got {int(chosen.min())}..{int(chosen.max())}")
    if bool((chosen[:, 1:] == chosen[:, :-1]).any()):
        raise ValueError("a position was given the same expert twice")


def load_balancing_loss(router_logits_NE: torch.Tensor, experts_Nk: torch.Tensor, num_experts: int) -> torch.Tensor:
    """The Switch/Mixtral auxiliary loss of one layer, E * sum_e f_e * P_e: f_e the share of tokens
    routed to expert e (among their k; the f_e sum to k), P_e the mean router probability of e
    (transformers' `load_balancing_loss_func` for one layer, no padding mask). Gradients reach
    the router through P only."""
    probs_NE = router_logits_NE.float().softmax(dim=-1)
    tokens_E = F.one_hot(experts_Nk.long(), num_experts).float().sum(dim=1).mean(dim=0)
    return num_experts * (tokens_E * probs_NE.mean(dim=0)).sum()


def router_z_loss(router_logits_NE: torch.Tensor) -> torch.Tensor:
    """ST-MoE's z-loss: the mean squared log-sum-exp of the router logits."""
    return router_logits_NE.float().logsumexp(dim=-1).square().mean()


def route(logits_NE: torch.Tensor, top_k: int, renormalise: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits -> (weights_Nk fp32, experts_Nk): softmax over all experts in fp32, the
    top k, renormalised to sum to 1 unless `renormalise` is False (Qwen3-MoE's
    norm_topk_prob=False); the engine's runner routes with this function."""
    weights_Nk, experts_Nk = logits_NE.float().softmax(dim=-1).topk(top_k, dim=-1)
    if renormalise:
        weights_Nk = weights_Nk / weights_Nk.sum(dim=-1, keepdim=True)
    return weights_Nk, experts_Nk


class Experts(nn.Module):
    """E SwiGLU FFNs stored stacked: w13 holds each expert's gate rows then its up rows."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        E, F_, D = config.num_experts, config.intermediate_size, config.hidden_size
        self.w13_EFD = nn.Parameter(torch.empty(E, 2 * F_, D))
        self.w2_EDF = nn.Parameter(torch.empty(E, D, F_))
        self.grouped_mm: GroupedMM = select_grouped_mm(config.expert_matmul)

    def forward(self, x_MD: torch.Tensor, offsets_E: torch.Tensor) -> torch.Tensor:
        gate_MF, up_MF = self.grouped_mm(x_MD, self.w13_EFD, offsets_E).chunk(2, dim=-1)
        return self.grouped_mm(F.silu(gate_MF) * up_MF, self.w2_EDF, offsets_E)


class MoE(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_experts, self.top_k = config.num_experts, config.top_k
        self.router = Router(config)
        self.experts = Experts(config)

    def forward(
        self, x_ND: torch.Tensor, given_experts_Nk: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Returns (y_ND, experts_Nk, router_logits_NE): the output, which experts each token was
        routed to, and the router's logits (None for a dense model, which has no router)."""
        N = x_ND.shape[0]
        if self.num_experts == 1:  # dense: the single expert's weight is exactly 1
            experts_Nk = x_ND.new_zeros(N, 1, dtype=torch.long)
            return self.experts(x_ND, torch.tensor([N])), experts_Nk, None
        weights_Nk, experts_Nk, logits_NE = self.router(x_ND, given_experts_Nk)
        if N == 1:
            return self._one_token(x_ND, weights_Nk[0], experts_Nk[0]), experts_Nk, logits_NE
        flat_M = experts_Nk.flatten()
        order_M = flat_M.argsort(stable=True)
        token_M = order_M // self.top_k
        offsets_E = torch.bincount(flat_M, minlength=self.num_experts).cumsum(0)
        y_MD = self.experts(x_ND[token_M], offsets_E)
        y_MD = y_MD * weights_Nk.flatten()[order_M].unsqueeze(-1)
        return torch.zeros_like(x_ND).index_add_(0, token_M, y_MD), experts_Nk, logits_NE

    def _one_token(self, x_1D: torch.Tensor, weights_k: torch.Tensor, experts_k: torch.Tensor) -> torch.Tensor:
        """Decoding one token: the same grouped matmul, with the bookkeeping done in Python."""
        chosen = experts_k.tolist()
        order = sorted(range(self.top_k), key=chosen.__getitem__)
        counts = [0] * self.num_experts
        for e in chosen:
            counts[e] += 1
        offsets_E = torch.tensor(counts).cumsum(0)
        y_kD = self.experts(x_1D.repeat(self.top_k, 1), offsets_E)
        return weights_k[order].unsqueeze(0) @ y_kD
