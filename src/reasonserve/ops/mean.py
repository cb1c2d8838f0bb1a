"""Batch-invariant ``mean`` over one or more dimensions.

Guarantee: bitwise batch-invariant (native: the 16-lane order of
``_csrc/fixed_order.h``; the torch path sums in a fixed pairwise tree; the Triton path
gives each output its own program with a fixed chunk order) and run-to-run
deterministic. Half inputs accumulate in float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.ops import _native_calls
from reasonserve.ops._checks import accumulation_dtype, check_tensor, normalize_dim
from reasonserve.ops._fixed_order import tree_sum
from reasonserve.ops._impl import resolve_impl

__all__ = ["mean", "mean_reference"]


def _dims(dim: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    if dim is None:
        return tuple(range(ndim))
    raw = (dim,) if isinstance(dim, int) else tuple(dim)
    if not raw:
        return tuple(range(ndim))
    dims = tuple(sorted({normalize_dim("dim", d, ndim) for d in raw}))
    if len(dims) != len(raw):
        raise InvalidArgumentError(f"dim has repeated entries: {dim}")
    return dims


def _to_last(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """Move the reduced dims to the end and flatten them into one."""
    keep = [d for d in range(x.dim()) if d not in dims]
    moved = x.permute(*keep, *dims)
    return moved.reshape(*moved.shape[: len(keep)], -1)


def _restore(out: torch.Tensor, x: torch.Tensor, dims: tuple[int, ...], keepdim: bool):
    if not keepdim:
        return out
    shape = [1 if d in dims else s for d, s in enumerate(x.shape)]
    return out.reshape(shape)


def mean_reference(
    x: torch.Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False
) -> torch.Tensor:
    """The torch reference of :func:`mean` (defines its meaning)."""
    return mean(x, dim, keepdim, impl="torch")


def mean(
    x: torch.Tensor,
    dim: int | Sequence[int] | None = None,
    keepdim: bool = False,
    *,
    impl: str = "auto",
) -> torch.Tensor:
    """Mean of ``x`` over ``dim`` (all dims when None), in ``x``'s dtype.

    Parameters
    ----------
    x : Tensor ``[...]``, floating
    dim : int, sequence of ints, or None
    keepdim : keep reduced dims with size 1
    impl : ``"auto"`` | ``"torch"`` | ``"native"`` | ``"triton"``
    """
    check_tensor("x", x)
    if x.dim() == 0:
        return x.clone()
    dims = _dims(dim, x.dim())
    rows = _to_last(x, dims)
    count = rows.shape[-1]
    which = resolve_impl(impl, x)
    if which == "native" and count:
        flat = _native_calls.mean_rows(rows.reshape(-1, count))
        out = flat.reshape(rows.shape[:-1]).to(x.dtype)
    elif which == "triton":
        from reasonserve.ops.triton.rowwise import mean_triton

        flat = mean_triton(rows.reshape(-1, count))
        out = flat.reshape(rows.shape[:-1])
    else:
        # An empty reduction gives 0 / 0 = NaN, as torch.mean does.
        out = (tree_sum(rows.to(accumulation_dtype(x.dtype))) / count).to(x.dtype)
    return _restore(out, x, dims, keepdim)
