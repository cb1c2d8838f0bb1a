"""Choosing between the native CPU kernels, the Triton kernels and the torch path.

``impl="auto"`` picks Triton for CUDA tensors when Triton imports, the native
fixed-order kernels for float32/float16/bfloat16 CPU tensors, and the torch path
otherwise. The native kernels are the compiled extension or, where it was not built,
their torch transcription (``_native_torch``: the same bits, slower, with a one-time
warning). ``impl="native"`` / ``impl="triton"`` raise
:class:`ImplementationUnavailableError` when they cannot run: wrong device or dtype;
Triton missing, or CPU tensors without the Triton interpreter (``TRITON_INTERPRET=1``,
read at call time).
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

from reasonserve.core.errors import ImplementationUnavailableError, InvalidArgumentError

IMPLS = ("auto", "torch", "native", "triton")
#: Dtypes the native CPU kernels accept (computed in float32); float64 takes the torch path.
NATIVE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: Dtypes the Triton kernels accept; float64 always takes the torch path.
TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@functools.cache
def triton_installed() -> bool:
    """Whether the ``triton`` package can be imported (checked once per process)."""
    return importlib.util.find_spec("triton") is not None


def triton_interpreting() -> bool:
    """Whether Triton kernels run in the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _native_ok(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cpu" and tensor.dtype in NATIVE_DTYPES


def _resolve_native(impl: str, tensor: torch.Tensor) -> str:
    if impl == "native" and not _native_ok(tensor):
        raise ImplementationUnavailableError(
            "impl='native' needs float32/float16/bfloat16 CPU tensors; "
            f"device={tensor.device}, dtype={tensor.dtype}"
        )
    return "native"


def resolve_impl(impl: str, tensor: torch.Tensor) -> str:
    """Return ``"torch"``, ``"native"`` or ``"triton"`` for an op about to run on ``tensor``."""
    if impl not in IMPLS:
        raise InvalidArgumentError(f"impl must be one of {IMPLS}, got {impl!r}")
    if impl == "torch":
        return "torch"
    if impl == "native" or (impl == "auto" and _native_ok(tensor)):
        return _resolve_native(impl, tensor)
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
