"""Triton kernels for the MXFP8 MoE: quantisation (both orientations in one pass), token
permute/unpermute by expert, and grouped GEMMs in bf16 and MXFP8, forward and backward.

Each kernel has a pure-PyTorch twin in kernels/mxfp8_ref.py or kernels/moe_ref.py that it is
tested against (bit for bit for quantisation, with stated tolerances for matmuls). On a CUDA GPU
they compile; on a CPU they run only under Triton's interpreter (`TRITON_INTERPRET=1`, set before
triton is first imported), which is how tests/kernels checks them without a GPU.

    from kernels.triton import available
    if available(x.device): ...
"""

from __future__ import annotations

import importlib.util
import os

import torch


def interpreting() -> bool:
    """Whether Triton runs kernels with its CPU interpreter (read when a kernel is defined)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def available(device: torch.device | str) -> bool:
    """Whether the Triton kernels can run on tensors of `device`: a CUDA device with triton
    installed, or any device under the interpreter (CPU tensors)."""
    if importlib.util.find_spec("triton") is None:
        return False
    device = torch.device(device)
    if interpreting():
        return device.type == "cpu"
    return device.type == "cuda" and torch.cuda.is_available()


def native_mx_dot(device: torch.device | str) -> bool:
    """Whether `tl.dot_scaled` runs on block-scaled tensor cores (SM100/SM103 tcgen05, SM120):
    elsewhere Triton emulates it by upcasting to bf16, which is correct but no faster."""
    device = torch.device(device)
    if device.type != "cuda" or interpreting():
        return False
    return torch.cuda.get_device_capability(device)[0] >= 10
