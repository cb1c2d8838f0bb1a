"""Choosing between the torch reference path and the Triton kernels.

``impl="auto"`` picks Triton only for CUDA tensors when Triton imports, and falls back
to the torch reference silently otherwise. ``impl="triton"`` raises
:class:`ImplementationUnavailableError` when it cannot run: Triton missing, or CPU
tensors without the Triton interpreter (``TRITON_INTERPRET=1``, read at call time).
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

from reasonserve.core.errors import ImplementationUnavailableError, InvalidArgumentError

IMPLS = ("auto", "torch", "triton")
#: Dtypes the Triton kernels accept; float64 always takes the torch path.
TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@functools.cache
def triton_installed() -> bool:
    """Whether the ``triton`` package can be imported (checked once per process)."""
    return importlib.util.find_spec("triton") is not None


def triton_interpreting() -> bool:
    """Whether Triton kernels run in the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def resolve_impl(impl: str, tensor: torch.Tensor) -> str:
    """Return ``"torch"`` or ``"triton"`` for an op about to run on ``tensor``."""
    if impl not in IMPLS:
        raise InvalidArgumentError(f"impl must be one of {IMPLS}, got {impl!r}")
    if impl == "torch":
        return "torch"
    device = tensor.device
    runnable = (
        triton_installed()
        and tensor.dtype in TRITON_DTYPES
        and (device.type == "cuda" if not triton_interpreting() else device.type == "cpu")
    )
    if impl == "auto":
        return "triton" if runnable and device.type == "cuda" else "torch"
    if not runnable:
        raise ImplementationUnavailableError(
            "impl='triton' needs the triton package and float32/float16/bfloat16 CUDA "
            "tensors (or CPU tensors with TRITON_INTERPRET=1); "
            f"triton installed={triton_installed()}, device={device}, dtype={tensor.dtype}"
        )
    return "triton"
