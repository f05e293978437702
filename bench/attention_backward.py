"""Micro benchmark: could the trainer's attention backward run faster as chunked matmuls than as
torch's CPU flash-attention backward? One causal layer at a warm-start demonstration's length
(5,400 positions, composer-mini's 9 query heads and 3 key/value heads of 64), forward and backward
through F.scaled_dot_product_attention against a backward written as matmuls over query chunks
(scores recomputed from the forward's logsumexp, the causal mask only on each chunk's diagonal
block: 2.5x the forward's FLOPs), the same inputs in the same run, fp32 and bf16. Prints seconds
a layer, the ratio, and each backward's relative error against an fp32 SDPA backward on the same
(rounded) inputs.

    python bench/attention_backward.py [--positions 5400] [--chunk 256]

Measured once per machine kind and quoted in docs/benchmarks.md ("Trainer: what one warm-start
update costs on this CPU"); it writes nothing. Micro: the update it would change is timed by
bench/trainer.py and bench/context_gradient.py.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.machine import machine_line

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64


def chunked_backward(q, k, v, out, lse, grad_out, chunk: int):
    """dq, dk, dv of causal attention (heads first, k and v expanded to every query head)."""
    S, scale = q.shape[1], q.shape[2] ** -0.5
    dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
    row_dot = (grad_out * out).sum(-1, keepdim=True)
    neg_lse = -lse.unsqueeze(-1).to(q.dtype)
    above = torch.full((chunk, chunk), float("-inf"), dtype=q.dtype).triu(1)
    for lo in range(0, S, chunk):
        hi = min(lo + chunk, S)
        q_c, g_c, keys, values = q[:, lo:hi], grad_out[:, lo:hi], k[:, :hi], v[:, :hi]
        p = torch.baddbmm(neg_lse[:, lo:hi], q_c, keys.transpose(1, 2), alpha=scale)
        p[:, :, lo:hi] += above[:hi - lo, :hi - lo]
        p.exp_()
        dv[:, :hi].baddbmm_(p.transpose(1, 2), g_c)
        ds = p.mul_(torch.baddbmm(-row_dot[:, lo:hi], g_c, values.transpose(1, 2)))
        dq[:, lo:hi] = torch.bmm(ds, keys).mul_(scale)
        dk[:, :hi].baddbmm_(ds.transpose(1, 2), q_c, alpha=scale)
    return dq, dk, dv


def seconds(fn, reps: int = 3) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps


def compare(dtype: torch.dtype, positions: int, chunk: int) -> str:
    torch.manual_seed(0)
    group = HEADS // KV_HEADS
    q = torch.randn(1, HEADS, positions, HEAD_DIM, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(1, KV_HEADS, positions, HEAD_DIM, dtype=dtype, requires_grad=True) for _ in range(2))
    grad_out = torch.randn(1, HEADS, positions, HEAD_DIM, dtype=dtype)

    def forward() -> None:
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def forward_backward() -> None:
        q.grad = k.grad = v.grad = None
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).backward(grad_out)

    k_all, v_all = (t.detach().repeat_interleave(group, 1) for t in (k, v))
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q.detach(), k_all, v_all, 0.0, True)[:2]
    inputs = (q.detach()[0], k_all[0], v_all[0], out[0], lse[0], grad_out[0])
    t_forward, t_both = seconds(forward), seconds(forward_backward)
    t_chunked = seconds(lambda: chunked_backward(*inputs, chunk))
    sdpa = [t.grad[0] for t in (q, k, v)]
    dq, dk, dv = chunked_backward(*inputs, chunk)
    chunked = [dq, *(t.view(KV_HEADS, group, positions, HEAD_DIM).sum(1) for t in (dk, dv))]
    exact = [t.detach().float().requires_grad_() for t in (q, k, v)]
    F.scaled_dot_product_attention(*exact, is_causal=True, enable_gqa=True).backward(grad_out.float())

    def errors(grads: list[torch.Tensor]) -> str:
        return " / ".join(f"{((g.float() - e.grad[0]).norm() / e.grad[0].norm()).item():.1e}"
                          for g, e in zip(grads, exact, strict=True))

    sdpa_backward = t_both - t_forward
    return (f"| {str(dtype).removeprefix('torch.')} | {t_forward:.3f} | {sdpa_backward:.3f} | {t_chunked:.3f} | "
            f"{sdpa_backward / t_chunked:.2f}x | {errors(sdpa)} | {errors(chunked)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--positions", type=int, default=5400)
    parser.add_argument("--chunk", type=int, default=256)
    args = parser.parse_args()
    print(f"{machine_line()}; {args.positions} positions, chunks of {args.chunk} queries\n")
    print("| dtype | SDPA forward (s) | SDPA backward (s) | chunked matmul backward (s) | SDPA / chunked | "
          "SDPA's error dq / dk / dv | chunked's error dq / dk / dv |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for dtype in (torch.float32, torch.bfloat16):
        print(compare(dtype, args.positions, args.chunk))


if __name__ == "__main__":
    main()
