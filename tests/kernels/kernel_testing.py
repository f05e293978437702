"""Helpers for the kernel tests (conftest.py has already chosen the Triton interpreter when
there is no CUDA; this module repeats it for a test module run on its own)."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
"""Where the Triton kernels run: compiled on CUDA, interpreted on the CPU."""

requires_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def report_close(actual: torch.Tensor, expected: torch.Tensor, rtol_of_max: float, what: str) -> None:
    """|actual - expected| <= rtol_of_max * max|expected| everywhere; the message reports the max
    and mean differences."""
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    assert a.shape == e.shape, f"{what}: shape {tuple(a.shape)} != {tuple(e.shape)}"
    diff = (a - e).abs()
    scale = e.abs().max().clamp(min=1e-30)
    assert diff.max() <= rtol_of_max * scale, (
        f"{what}: max diff {diff.max():.3e}, mean {diff.mean():.3e}, max |expected| {scale:.3e}, "
        f"allowed {rtol_of_max:.1e} of it"
    )
