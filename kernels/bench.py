"""MXFP8 MoE kernel benchmark: the quantiser's bandwidth and the grouped GEMMs' throughput at MoE
shapes, each beside torch's bf16 grouped matmul (or a copy, for the quantiser) in the same run.

    python -m kernels.bench [--quick] [--no-write]

On CUDA it times the Triton kernels (triton.testing.do_bench: median ms, L2 flushed between
runs) at Composer-like shapes (hidden 2048-4096, expert FFN 1024-1536, 64-128 experts, top-8,
8k-16k tokens) and composer-mini's (hidden 576, FFN 1536, 8 experts, top-2). On a CPU it runs the
PyTorch references at small shapes and says so: those numbers are the cost of emulating MXFP8, not
a speed claim.

What is counted:
  quantise   x (M, K) bf16 -> both orientations: bytes = read 2MK + write 2 * (MK + MK/32);
             the baseline is a bf16 copy of x (read 2MK + write 2MK), the bandwidth a pass over
             the data can reach
  forward    out = x @ w13[e].T per expert (x (M, D), w13 (E, 2F, D)): 2 * M * D * 2F FLOPs;
             MXFP8 with operands already quantised (per mode) and with x's quantisation included
  wgrad      dw13[e] = dy[g_e].T @ x[g_e]: the same FLOPs, K-grouped
  fwd+bwd    the autograd function (quantisation included) against bf16 autograd: 3x the FLOPs
Routing is uniform top-k with each expert's group padded to a multiple of 32 rows (as torchtitan
pads for MXFP8); every variant sees the same groups. Ratios are baseline time / our time (>1:
faster than the baseline). On an H200 (SM90) MXFP8 is emulated (there is no block-scaled MMA),
so only SM100+ can show MXFP8 speed-ups.

Prints the table, writes bench/results/kernels.json and the table in docs/benchmarks.md (between
the kernels markers).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kernels import moe_ref  # noqa: E402
from kernels.grouped_mm import hp_grouped_mm, mxfp8_grouped_mm  # noqa: E402
from kernels.mxfp8_ref import quantize, quantize_colwise  # noqa: E402


@dataclass(frozen=True)
class Shape:
    name: str
    tokens: int
    top_k: int
    experts: int
    hidden: int
    ffn: int


CUDA_SHAPES = [
    Shape("composer-mini", 8192, 2, 8, 576, 1536),
    Shape("moe-d2048", 8192, 8, 64, 2048, 1024),
    Shape("moe-d4096", 16384, 8, 128, 4096, 1536),
]
CPU_SHAPES = [
    Shape("composer-mini (128 tokens)", 128, 2, 8, 576, 1536),
    Shape("small moe", 256, 8, 16, 256, 128),
]


def timed_ms(fn: Callable[[], object], device: torch.device, budget_s: float = 1.0) -> float:
    """Milliseconds of fn: on CUDA the median of do_bench; on a CPU the fastest of a few runs
    (this is a shared two-core machine: the minimum is the least noisy estimate)."""
    if device.type == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median"))
    fn()  # warm up (first-touch allocations, thread pools)
    fn()
    times, start = [], time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget_s and len(times) < 20):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return min(times)


def offsets_for(shape: Shape, device: torch.device) -> torch.Tensor:
    """Uniform top-k routing, every expert's group padded to a multiple of 32 rows."""
    g = torch.Generator().manual_seed(0)
    scores = torch.rand(shape.tokens, shape.experts, generator=g)
    experts = scores.topk(shape.top_k, dim=-1).indices
    counts = torch.bincount(experts.flatten(), minlength=shape.experts)
    return ((counts + 31) // 32 * 32).cumsum(0).to(device)


def torch_grouped(x: torch.Tensor, w_ENK: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """torch's grouped matmul when this build has it (CUTLASS on SM90+), else a loop of linears."""
    if hasattr(torch, "_grouped_mm"):
        return torch._grouped_mm(x, w_ENK.transpose(-2, -1), offs=offsets.to(torch.int32))
    return moe_ref.grouped_mm(x, w_ENK, offsets)


def torch_grouped_wgrad(dy: torch.Tensor, x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    if hasattr(torch, "_grouped_mm"):
        return torch._grouped_mm(dy.t(), x, offs=offsets.to(torch.int32))
    return moe_ref.grouped_mm_wgrad(dy.t(), x.t(), offsets)


class Runner:
    """Collects rows; a variant that fails records its error instead of ending the run (a device
    run is one shot: one broken variant must not lose the others' numbers)."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.rows = device, []

    def add(self, shape: Shape, op: str, variant: str, fn: Callable[[], object], *, flops: float = 0.0,
            nbytes: float = 0.0, baseline: str | None = None) -> None:
        row = {"shape": shape.name, "op": op, "variant": variant, "baseline": baseline}
        try:
            ms = timed_ms(fn, self.device)
            row.update(ms=ms)
            if flops:
                row["tflops"] = flops / ms / 1e9
            if nbytes:
                row["gbps"] = nbytes / ms / 1e6
        except Exception as err:  # recorded in the results, see the class doc
            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
        self.rows.append(row)
        print(_line(row, self.rows), flush=True)


def _line(row: dict, rows: list[dict]) -> str:
    if "error" in row:
        return f"{row['shape']:28} {row['op']:10} {row['variant']:32} ERROR {row['error']}"
    rate = f"{row['tflops']:8.2f} TFLOP/s" if "tflops" in row else f"{row.get('gbps', 0):8.1f} GB/s   "
    return f"{row['shape']:28} {row['op']:10} {row['variant']:32} {row['ms']:9.3f} ms {rate} {_ratio(row, rows)}"


def _ratio(row: dict, rows: list[dict]) -> str:
    if row.get("baseline") is None or "ms" not in row:
        return "(baseline)" if row.get("baseline") is None else "-"
    base = next((r for r in rows if r["shape"] == row["shape"] and r["op"] == row["op"]
                 and r["variant"] == row["baseline"] and "ms" in r), None)
    return f"{base['ms'] / row['ms']:.2f}x" if base else "-"


def bench_shape(run: Runner, shape: Shape, modes: list[str]) -> None:
    dev, cuda = run.device, run.device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    offsets = offsets_for(shape, dev)
    M, D, F2, E = int(offsets[-1]), shape.hidden, 2 * shape.ffn, shape.experts
    x = torch.randn(M, D, device=dev, dtype=dtype)
    w = torch.randn(E, F2, D, device=dev, dtype=dtype) * D**-0.5
    dy = torch.randn(M, F2, device=dev, dtype=dtype)
    flops = 2.0 * M * D * F2
    base = "torch bf16 grouped_mm" if cuda else f"torch {str(dtype)[6:]} grouped_mm (CPU)"

    # quantiser: x (M, D) -> both orientations
    qbytes = M * D * x.element_size() + 2 * (M * D + M * D / 32)
    run.add(shape, "quantise", "copy x (baseline)", lambda: x.clone(), nbytes=4.0 * M * D)
    if cuda:
        from kernels.triton.quant import quantize_mxfp8

        run.add(shape, "quantise", "triton both orientations", lambda: quantize_mxfp8(x), nbytes=qbytes,
                baseline="copy x (baseline)")
        run.add(shape, "quantise", "triton row-wise only", lambda: quantize_mxfp8(x, colwise=False),
                nbytes=M * D * x.element_size() + M * D * 33 / 32, baseline="copy x (baseline)")
    else:
        run.add(shape, "quantise", "reference both orientations", lambda: (quantize(x), quantize_colwise(x)),
                nbytes=qbytes, baseline="copy x (baseline)")

    # forward (M-grouped)
    run.add(shape, "forward", base, lambda: torch_grouped(x, w, offsets), flops=flops)
    xq, wq = quantize(x), quantize(w)
    if cuda:
        from kernels.triton import grouped_gemm as gg

        run.add(shape, "forward", "triton bf16", lambda: gg.grouped_mm(x, w, offsets), flops=flops, baseline=base)
        for mode in modes:
            run.add(shape, "forward", f"triton mxfp8 {mode} (pre-quantised)",
                    lambda mode=mode: gg.mx_grouped_mm(xq, wq, offsets, dtype, mode), flops=flops, baseline=base)
    else:
        run.add(shape, "forward", "reference mxfp8 emulated (pre-quantised)",
                lambda: moe_ref.mx_grouped_mm(xq, wq, offsets, dtype), flops=flops, baseline=base)

    # weight gradient (K-grouped)
    run.add(shape, "wgrad", base, lambda: torch_grouped_wgrad(dy, x, offsets), flops=flops)
    dyc, xc = quantize_colwise(dy), quantize_colwise(x)
    if cuda:
        run.add(shape, "wgrad", "triton bf16", lambda: gg.grouped_mm_wgrad(dy.t(), x.t(), offsets), flops=flops,
                baseline=base)
        for mode in modes:
            run.add(shape, "wgrad", f"triton mxfp8 {mode} (pre-quantised)",
                    lambda mode=mode: gg.mx_grouped_mm_wgrad(dyc, xc, offsets, torch.float32, mode),
                    flops=flops, baseline=base)
    else:
        run.add(shape, "wgrad", "reference mxfp8 emulated (pre-quantised)",
                lambda: moe_ref.mx_grouped_mm_wgrad(dyc, xc, offsets, torch.float32), flops=flops, baseline=base)

    # forward + backward through autograd, quantisation included
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()

    def step(fn, **kwargs):
        def go():
            xg.grad = wg.grad = None
            fn(xg, wg, offsets, **kwargs).backward(dy)
        return go

    def torch_autograd(a, b, offs):
        return torch_grouped(a, b, offs)

    run.add(shape, "fwd+bwd", base, step(torch_autograd), flops=3 * flops)
    if cuda:
        run.add(shape, "fwd+bwd", "triton bf16", step(hp_grouped_mm), flops=3 * flops, baseline=base)
        for mode in modes:
            run.add(shape, "fwd+bwd", f"triton mxfp8 {mode}", step(mxfp8_grouped_mm, mode=mode),
                    flops=3 * flops, baseline=base)
    else:
        run.add(shape, "fwd+bwd", "reference mxfp8 emulated", step(mxfp8_grouped_mm, backend="ref"),
                flops=3 * flops, baseline=base)


def environment(device: torch.device) -> dict:
    env = {"device": device.type, "torch": torch.__version__, "python": platform.python_version(),
           "date": datetime.date.today().isoformat(), "cpus": torch.get_num_threads(),
           "load_average": round(os.getloadavg()[0], 1)}
    if device.type == "cuda":
        import triton

        from kernels.triton import native_mx_dot

        env.update(gpu=torch.cuda.get_device_name(), capability=".".join(map(str, torch.cuda.get_device_capability())),
                   triton=triton.__version__, native_mx_dot=native_mx_dot(device))
    return env


def render(rows: list[dict], env: dict) -> tuple[str, str]:
    if env["device"] == "cuda":
        meta = (f"{env['gpu']} (SM {env['capability']}), torch {env['torch']}, Triton {env['triton']}; "
                f"MXFP8 MMAs {'native (tl.dot_scaled on tcgen05)' if env['native_mx_dot'] else 'emulated (no block-scaled MMA on this GPU): correctness, not speed'}; {env['date']}.")
    else:
        meta = (f"CPU only ({env['cpus']} torch threads, load average {env['load_average']} at the end: a shared "
                f"machine, so times are noisy), torch {env['torch']}: the PyTorch references at small shapes; "
                f"MXFP8 is emulated (dequantise + fp32 matmul), so these rows measure the emulation's cost, "
                f"not kernel speed. Run on CUDA for the Triton kernels; {env['date']}.")
    lines = ["| shape | op | variant | ms | rate | vs baseline |", "| --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['shape']} | {row['op']} | {row['variant']} | error | {row['error']} | - |")
            continue
        rate = f"{row['tflops']:.2f} TFLOP/s" if "tflops" in row else f"{row.get('gbps', 0):.1f} GB/s"
        lines.append(f"| {row['shape']} | {row['op']} | {row['variant']} | {row['ms']:.3f} | {rate} | {_ratio(row, rows)} |")
    return "\n".join(lines) + "\n", meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the first shape only")
    ap.add_argument("--no-write", action="store_true", help="print only; leave results and docs alone")
    ap.add_argument("--modes", default=None, help="comma-separated MXFP8 modes (default: all three)")
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        print("No CUDA device: running the PyTorch references at small shapes (emulated MXFP8).", flush=True)
    shapes = CUDA_SHAPES if device.type == "cuda" else CPU_SHAPES
    modes = args.modes.split(",") if args.modes else ["dequant", "fp8", "scaled"]
    run = Runner(device)
    for shape in shapes[:1] if args.quick else shapes:
        bench_shape(run, shape, modes)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    env = environment(device)
    text, meta = render(run.rows, env)
    results = {"meta": env, "shapes": [s.__dict__ for s in shapes], "rows": run.rows}
    from bench.report import RESULTS, publish, save_results

    previous = RESULTS / "kernels.json"
    gpu_results = previous.exists() and '"device": "cuda"' in previous.read_text()
    if args.no_write:
        print("\n" + meta + "\n\n" + text)
    elif device.type == "cpu" and gpu_results:  # never replace a GPU run's numbers with a CPU run's
        print("\n" + meta + "\n\n" + text)
        print(f"kept {previous} (a GPU run); wrote {save_results('kernels_cpu', results)}")
    else:
        publish("kernels", "Kernels", results, text, meta)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
