"""The MoE data movement and grouped matmuls in plain PyTorch: the references the Triton kernels
are tested against, and the path the MXFP8 experts take on a CPU.

Tokens routed to experts are laid out sorted by expert: rows [offsets[e-1], offsets[e]) belong
to expert e (offsets_E are cumulative ends, as torch._grouped_mm takes them). MXFP8's weight
gradient contracts over each expert's rows in blocks of 32, so those layouts can pad every
expert's group to a multiple of `align` rows with zero rows ("padded layout", P rows).

Legend: N tokens, k experts per token, M = N * k routed rows, P padded rows, E experts,
K contraction width, O output width.

    src_P, dst_Nk, offsets_E = route(experts_Nk, num_experts, align=32)
    x_PD = permute(x_ND, src_P)                     # zero rows where src is -1
    y_ND = unpermute(y_PD, dst_Nk, weights_Nk)      # sum_k weight * y[dst]
"""

from __future__ import annotations

import torch

from kernels.mxfp8_ref import MX, dequantize


def route(experts_Nk: torch.Tensor, num_experts: int, align: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Routing -> (src_P: the token each padded row reads, -1 for padding; dst_Nk: the row each
    (token, choice) went to; offsets_E: padded cumulative group ends). Within an expert, rows keep
    token order (a stable sort, as model.moe does). One host sync, for P."""
    N, k = experts_Nk.shape
    flat_M = experts_Nk.flatten()
    order_M = flat_M.argsort(stable=True)
    counts_E = torch.bincount(flat_M, minlength=num_experts)
    rows_M, offsets_E = _padded_rows(counts_E, align)
    src_P = torch.full((int(offsets_E[-1]) if num_experts else 0,), -1, dtype=torch.long, device=experts_Nk.device)
    src_P[rows_M] = order_M // k
    dst_M = torch.empty_like(rows_M)
    dst_M[order_M] = rows_M
    return src_P, dst_M.view(N, k), offsets_E


def _padded_rows(counts_E: torch.Tensor, align: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For rows sorted by expert with these group sizes: (each row's index in the padded layout,
    padded offsets_E)."""
    padded_E = (counts_E + align - 1) // align * align
    offsets_E = torch.cumsum(padded_E, 0)
    starts_E, pstarts_E = torch.cumsum(counts_E, 0) - counts_E, offsets_E - padded_E
    group_M = torch.repeat_interleave(torch.arange(counts_E.numel(), device=counts_E.device), counts_E)
    rank_M = torch.arange(group_M.numel(), device=counts_E.device) - starts_E[group_M]
    return pstarts_E[group_M] + rank_M, offsets_E


def pad_groups(offsets_E: torch.Tensor, align: int) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """Rows already sorted by expert (group ends offsets_E) -> (src_P or None when every group is
    already aligned, dst_M: where each row goes, padded offsets_E)."""
    counts_E = torch.diff(offsets_E, prepend=offsets_E.new_zeros(1))
    dst_M, padded = _padded_rows(counts_E, align)
    if torch.equal(padded, offsets_E):
        return None, dst_M, padded
    src_P = torch.full((int(padded[-1]),), -1, dtype=torch.long, device=offsets_E.device)
    src_P[dst_M] = torch.arange(dst_M.numel(), device=offsets_E.device)
    return src_P, dst_M, padded


def permute(x_ND: torch.Tensor, src_P: torch.Tensor) -> torch.Tensor:
    """out[p] = x[src[p]], or zeros where src[p] < 0."""
    out = x_ND[src_P.clamp(min=0)]
    return out.masked_fill_((src_P < 0).unsqueeze(-1), 0)


def unpermute(y_PD: torch.Tensor, dst_Nk: torch.Tensor, weights_Nk: torch.Tensor | None = None) -> torch.Tensor:
    """out[n] = sum_k weight[n, k] * y[dst[n, k]] (fp32 accumulation; weights default to 1)."""
    y_NkD = y_PD[dst_Nk].float()
    if weights_Nk is not None:
        y_NkD = y_NkD * weights_Nk.float().unsqueeze(-1)
    return y_NkD.sum(1).to(y_PD.dtype)


def _groups(offsets_E: torch.Tensor):
    start = 0
    for e, end in enumerate(offsets_E.tolist()):
        yield e, start, end
        start = end


def grouped_mm(a_MK: torch.Tensor, b_ENK: torch.Tensor, offsets_E: torch.Tensor,
               out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """out[g_e] = a[g_e] @ b[e].T, accumulated in fp32; rows past offsets[-1] are zero."""
    out = torch.zeros(a_MK.shape[0], b_ENK.shape[1], dtype=torch.float32, device=a_MK.device)
    for e, start, end in _groups(offsets_E):
        if end > start:
            out[start:end] = a_MK[start:end].float() @ b_ENK[e].float().T
    return out.to(out_dtype or a_MK.dtype)


def grouped_mm_wgrad(a_NM: torch.Tensor, b_PM: torch.Tensor, offsets_E: torch.Tensor,
                     out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """out[e] = a[:, g_e] @ b[:, g_e].T -> (E, N, P), zeros for an expert without rows."""
    out = torch.zeros(offsets_E.numel(), a_NM.shape[0], b_PM.shape[0], dtype=torch.float32, device=a_NM.device)
    for e, start, end in _groups(offsets_E):
        if end > start:
            out[e] = a_NM[:, start:end].float() @ b_PM[:, start:end].float().T
    return out.to(out_dtype or a_NM.dtype)


def mx_grouped_mm(a: MX, b: MX, offsets_E: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """MXFP8 M-grouped, emulated: decode both operands to fp32 (exact) and multiply in fp32.
    a (M, K) and b (E, N, K) quantised along K."""
    return grouped_mm(dequantize(a), dequantize(b), offsets_E, out_dtype)


def mx_grouped_mm_wgrad(a: MX, b: MX, offsets_E: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """MXFP8 K-grouped, emulated: a (N1, M), b (N2, M) quantised along M -> (E, N1, N2)."""
    return grouped_mm_wgrad(dequantize(a), dequantize(b), offsets_E, out_dtype)
