"""Kernel tests: the MXFP8 reference against golden vectors and properties, the Triton kernels
against the reference, the autograd functions and the model's mxfp8 path.

Run: .venv/bin/python -m pytest -q tests/kernels          (CPU: Triton under its interpreter)
     .venv/bin/python -m pytest -q -m gpu tests/kernels   (a CUDA machine: compiled kernels)

Without CUDA the Triton kernels run under the interpreter, which must be chosen before any kernel
is defined, so this file sets TRITON_INTERPRET=1 before the tests import kernels.triton.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
