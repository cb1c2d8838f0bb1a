"""Batch-invariant ``matmul`` and ``linear``.

Guarantee (both implementations): bitwise batch-invariant in the rows of ``a``/``x``
and in the leading batch dimensions: a row's output bits depend only on that row and
on the other operand, never on how many rows share the call or where the row sits.
Run-to-run deterministic on the same machine, thread count and library versions.

* torch reference (any device): fixed-shape row tiles, see ``_fixed_order``.
* Triton (CUDA): persistent kernel with fixed tile sizes and no split-K.
"""

from __future__ import annotations

import torch

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.ops._checks import check_same, check_tensor
from reasonserve.ops._fixed_order import tiled_matmul_2d
from reasonserve.ops._impl import resolve_impl

__all__ = ["linear", "linear_reference", "matmul", "matmul_reference"]


def _mm_2d(a: torch.Tensor, b: torch.Tensor, impl: str) -> torch.Tensor:
    if resolve_impl(impl, a) == "triton":
        from reasonserve.ops.triton.matmul import matmul_triton

        return matmul_triton(a, b)
    return tiled_matmul_2d(a, b)


def matmul_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The torch reference of :func:`matmul` (defines its meaning)."""
    return matmul(a, b, impl="torch")


def matmul(a: torch.Tensor, b: torch.Tensor, *, impl: str = "auto") -> torch.Tensor:
    """Batch-invariant matrix product.

    Parameters
    ----------
    a : Tensor ``[..., M, K]``
    b : Tensor ``[K, N]`` or ``[..., K, N]`` (leading dimensions broadcast with ``a``'s)
    impl : ``"auto"`` | ``"torch"`` | ``"triton"``

    Returns
    -------
    Tensor ``[..., M, N]`` of ``a``'s dtype.
    """
    check_tensor("a", a, min_ndim=2)
    check_tensor("b", b, min_ndim=2)
    check_same(("a", "b"), a, b)
    if a.shape[-1] != b.shape[-2]:
        raise InvalidArgumentError(
            f"a and b have mismatched K: a is {tuple(a.shape)}, b is {tuple(b.shape)} "
            f"(a.shape[-1] must equal b.shape[-2])"
        )
    if b.dim() == 2:
        rows = a.reshape(-1, a.shape[-1])
        return _mm_2d(rows, b, impl).reshape(*a.shape[:-1], b.shape[-1])
    try:
        batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except RuntimeError as err:
        raise InvalidArgumentError(
            f"batch dimensions of a {tuple(a.shape)} and b {tuple(b.shape)} do not broadcast"
        ) from err
    a3 = a.expand(*batch, *a.shape[-2:]).reshape(-1, *a.shape[-2:])
    b3 = b.expand(*batch, *b.shape[-2:]).reshape(-1, *b.shape[-2:])
    out = [_mm_2d(a3[i], b3[i], impl) for i in range(a3.shape[0])]
    stacked = torch.stack(out) if out else a.new_zeros((0, a.shape[-2], b.shape[-1]))
    return stacked.reshape(*batch, a.shape[-2], b.shape[-1])


def linear_reference(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """The torch reference of :func:`linear` (defines its meaning)."""
    return linear(x, weight, bias, impl="torch")


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    impl: str = "auto",
) -> torch.Tensor:
    """Batch-invariant ``x @ weight.T + bias``.

    Parameters
    ----------
    x : Tensor ``[..., K]``
    weight : Tensor ``[N, K]``
    bias : Tensor ``[N]`` or None — added after the product (never fused into the
        accumulator), so the rounding is the same with and without a bias.
    impl : ``"auto"`` | ``"torch"`` | ``"triton"``

    Returns
    -------
    Tensor ``[..., N]``.
    """
    check_tensor("x", x, min_ndim=1)
    check_tensor("weight", weight, ndim=2)
    check_same(("x", "weight"), x, weight)
    if x.shape[-1] != weight.shape[1]:
        raise InvalidArgumentError(
            f"x and weight have mismatched K: x is {tuple(x.shape)}, weight is "
            f"{tuple(weight.shape)} (x.shape[-1] must equal weight.shape[1])"
        )
    if bias is not None:
        check_tensor("bias", bias, ndim=1)
        check_same(("x", "bias"), x, bias)
        if bias.shape[0] != weight.shape[0]:
            raise InvalidArgumentError(
                f"bias must have shape [{weight.shape[0]}] to match weight, got {tuple(bias.shape)}"
            )
    rows = x.reshape(-1, x.shape[-1])
    out = _mm_2d(rows, weight.t(), impl)
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], weight.shape[0])
