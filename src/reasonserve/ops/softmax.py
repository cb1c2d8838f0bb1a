"""Batch-invariant ``softmax`` and ``log_softmax``.

Max is exact in any order; the sum of exponentials uses the 16-lane order and the
libm-free ``exp`` of ``_csrc/fixed_order.h`` (native, CPU: the same bits on every CPU),
the fixed pairwise tree of ``_fixed_order.tree_sum`` (torch) or one program per row
with a fixed chunk order (Triton). Half inputs compute in float32 and return their own dtype.
Guarantee: bitwise batch-invariant and run-to-run deterministic. A row of all
``-inf`` gives NaN (as in torch); NaN inputs give NaN rows, alone or batched.
"""

from __future__ import annotations

import torch

from reasonserve.ops import _native_calls
from reasonserve.ops._checks import accumulation_dtype, check_tensor, normalize_dim
from reasonserve.ops._fixed_order import tree_sum
from reasonserve.ops._impl import resolve_impl

__all__ = ["log_softmax", "log_softmax_reference", "softmax", "softmax_reference"]


def _softmax_rows(rows: torch.Tensor, log: bool) -> torch.Tensor:
    """(Log-)softmax over the last dim in the accumulation dtype."""
    acc = rows.to(accumulation_dtype(rows.dtype))
    shifted = acc - acc.amax(dim=-1, keepdim=True)
    exps = torch.exp(shifted)
    total = tree_sum(exps, keepdim=True)
    return shifted - torch.log(total) if log else exps / total


def _run(x: torch.Tensor, dim: int, impl: str, log: bool) -> torch.Tensor:
    check_tensor("x", x)
    if x.dim() == 0:
        x = x.reshape(1)
        return _run(x, 0, impl, log).reshape(())
    d = normalize_dim("dim", dim, x.dim())
    rows = x.movedim(d, -1)
    if rows.shape[-1] == 0:
        return x.clone()
    which = resolve_impl(impl, x)
    if which == "native":
        flat = rows.reshape(-1, rows.shape[-1])
        out = _native_calls.softmax_rows(flat, log).reshape(rows.shape).to(x.dtype)
    elif which == "triton":
        from reasonserve.ops.triton.rowwise import softmax_triton

        flat = rows.reshape(-1, rows.shape[-1])
        out = softmax_triton(flat, log=log).reshape(rows.shape)
    else:
        out = _softmax_rows(rows, log).to(x.dtype)
    return out.movedim(-1, d)


def softmax(x: torch.Tensor, dim: int = -1, *, impl: str = "auto") -> torch.Tensor:
    """Softmax of ``x`` along ``dim``; same shape and dtype as ``x``."""
    return _run(x, dim, impl, log=False)


def log_softmax(x: torch.Tensor, dim: int = -1, *, impl: str = "auto") -> torch.Tensor:
    """Log-softmax of ``x`` along ``dim``; same shape and dtype as ``x``."""
    return _run(x, dim, impl, log=True)


def softmax_reference(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The torch reference of :func:`softmax` (defines its meaning)."""
    return softmax(x, dim, impl="torch")


def log_softmax_reference(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The torch reference of :func:`log_softmax` (defines its meaning)."""
    return log_softmax(x, dim, impl="torch")
