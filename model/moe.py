"""The mixture-of-experts FFN: a top-k softmax router and SwiGLU experts whose matmuls go through
one overridable seam, `grouped_mm`, so kernels/ can swap in MXFP8 without touching the model.

Routing follows Mixtral: softmax over all experts in fp32, keep the top k, renormalise the kept
weights to sum to 1. With every expert equal (an upcycled dense model) the output is therefore
exactly the dense FFN whatever the router says.

Legend: N tokens, D model width, F expert hidden width, E experts, k experts per token,
M = N * k routed rows sorted by expert.

    y_ND, experts_Nk = MoE(config)(x_ND)
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
    single decoded token reads only the k experts it was routed to.
    """
    out = x_MI.new_empty(x_MI.shape[0], w_EOI.shape[1])
    start = 0
    for e, end in enumerate(offsets_E.tolist()):
        if end > start:
            out[start:end] = F.linear(x_MI[start:end], w_EOI[e])
        start = end
    return out


def select_grouped_mm(expert_matmul: str) -> GroupedMM:
    """The seam's implementation for `ModelConfig.expert_matmul`."""
    if expert_matmul == "bf16":
        return grouped_mm_reference
    from kernels.grouped_mm import mxfp8_grouped_mm  # imported only when asked for

    return mxfp8_grouped_mm


class Router(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.top_k = config.top_k
        self.weight = nn.Parameter(torch.empty(config.num_experts, config.hidden_size))

    def forward(self, x_ND: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (weights_Nk in x's dtype, experts_Nk int64)."""
        weights_Nk, experts_Nk = route(F.linear(x_ND, self.weight), self.top_k)
        return weights_Nk.to(x_ND.dtype), experts_Nk


def route(logits_NE: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits -> (weights_Nk fp32, experts_Nk): softmax over all experts in fp32, the
    top k, renormalised to sum to 1 (the engine's runner routes with the same function)."""
    weights_Nk, experts_Nk = logits_NE.float().softmax(dim=-1).topk(top_k, dim=-1)
    return weights_Nk / weights_Nk.sum(dim=-1, keepdim=True), experts_Nk


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

    def forward(self, x_ND: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (y_ND, experts_Nk): the output and which experts each token was routed to."""
        N = x_ND.shape[0]
        if self.num_experts == 1:  # dense: the single expert's weight is exactly 1
            experts_Nk = x_ND.new_zeros(N, 1, dtype=torch.long)
            return self.experts(x_ND, torch.tensor([N])), experts_Nk
        weights_Nk, experts_Nk = self.router(x_ND)
        if N == 1:
            return self._one_token(x_ND, weights_Nk[0], experts_Nk[0]), experts_Nk
        flat_M = experts_Nk.flatten()
        order_M = flat_M.argsort(stable=True)
        token_M = order_M // self.top_k
        offsets_E = torch.bincount(flat_M, minlength=self.num_experts).cumsum(0)
        y_MD = self.experts(x_ND[token_M], offsets_E)
        y_MD = y_MD * weights_Nk.flatten()[order_M].unsqueeze(-1)
        return torch.zeros_like(x_ND).index_add_(0, token_M, y_MD), experts_Nk

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
