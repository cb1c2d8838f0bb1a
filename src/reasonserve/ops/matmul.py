"""Batch-invariant ``matmul`` and ``linear``.

Guarantee (both implementations): bitwise batch-invariant in the rows of ``a``/``x``
and in the leading batch dimensions: a row's output bits depend only on that row and
on the other operand, never on how many rows share the call or where the row sits.
Run-to-run deterministic on the same machine, thread count and library versions.

* native (CPU, the default there): each output one in-order chain over ``K`` of
  rounded multiplies and adds (``_csrc/fixed_order.h``); identical bits on every CPU
  and instruction set. ``nn.Linear``-layout weights are packed once and cached.
* torch path, CPU: exact float64 products summed by a fixed pairwise tree
  (``_fixed_order.exact_matmul_2d``), provably invariant, slow — the fallback when
  the extension is missing. Other devices: fixed-shape BLAS row tiles, a larger tile
  only where a probe saw every slot give the one-row bits (``_fixed_order``).
* torch path, batched products with a small per-entry ``K * N``: element-wise
  float32 products summed by a fixed pairwise tree (the choice depends on ``K`` and
  ``N`` only).
* Triton (CUDA): persistent kernel with fixed tile sizes and no split-K.
"""

from __future__ import annotations

import math

import torch

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.ops import _native_calls
from reasonserve.ops._checks import check_same, check_tensor
from reasonserve.ops._fixed_order import exact_matmul_2d, tiled_matmul_2d, tree_sum
from reasonserve.ops._impl import resolve_impl

__all__ = ["k_major", "linear", "linear_reference", "matmul", "matmul_reference"]


def _mm_2d(a: torch.Tensor, b: torch.Tensor, impl: str, *, weight: bool = False) -> torch.Tensor:
    which = resolve_impl(impl, a)
    if which == "triton":
        from reasonserve.ops.triton.matmul import matmul_triton

        return matmul_triton(a, b)
    if which == "native":
        return _native_calls.matmul_2d(a, b, weight=weight).to(a.dtype)
    if a.device.type == "cpu":
        return exact_matmul_2d(a, b)
    return tiled_matmul_2d(a, b)


# On the torch path, batched products whose per-entry ``K * N`` is at most this use
# element-wise products and a pairwise tree instead of one BLAS call per tile and
# entry: attention scores and weighted values of small heads are thousands of tiny
# products, where per-call overhead dominates. The choice depends on (K, N) only,
# never on the batch. The native path runs all entries in one call.
_TREE_MAX_KN = 1 << 14
# Elements of the [E, rows, N, K] temporary per chunk of the tree form.
_TREE_CHUNK_ELEMS = 1 << 22


def _tree_bmm(a3: torch.Tensor, b3: torch.Tensor) -> torch.Tensor:
    """``a3 [E, M, K] @ b3 [E, K, N]`` as element-wise products summed by a fixed tree."""
    e, m, k = a3.shape
    bt = b3.transpose(1, 2).unsqueeze(1)  # [E, 1, N, K]
    rows = max(1, _TREE_CHUNK_ELEMS // max(1, e * b3.shape[2] * k))
    parts = [tree_sum(a3[:, i : i + rows, None, :] * bt) for i in range(0, m, rows)]
    return torch.cat(parts, dim=1) if parts else a3.new_zeros((e, 0, b3.shape[2]))


def _batched_mm(a3: torch.Tensor, b3: torch.Tensor, impl: str) -> torch.Tensor:
    k, n = b3.shape[1], b3.shape[2]
    which = resolve_impl(impl, a3)
    if which == "native":
        return _native_calls.bmm(a3, b3).to(a3.dtype)
    if k * n <= _TREE_MAX_KN and which == "torch":
        acc = a3.dtype if a3.dtype == torch.float64 else torch.float32
        return _tree_bmm(a3.to(acc), b3.to(acc)).to(a3.dtype)
    out = [_mm_2d(a3[i], b3[i], impl) for i in range(a3.shape[0])]
    return torch.stack(out) if out else a3.new_zeros((0, a3.shape[1], n))


def matmul_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The torch reference of :func:`matmul` (defines its meaning)."""
    return matmul(a, b, impl="torch")


def matmul(a: torch.Tensor, b: torch.Tensor, *, impl: str = "auto") -> torch.Tensor:
    """Batch-invariant matrix product.

    Parameters
    ----------
    a : Tensor ``[..., M, K]``
    b : Tensor ``[K, N]`` or ``[..., K, N]`` (leading dimensions broadcast with ``a``'s)
    impl : ``"auto"`` | ``"torch"`` | ``"native"`` | ``"triton"``

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
        rows = a.reshape(math.prod(a.shape[:-1]), a.shape[-1])
        return _mm_2d(rows, b, impl).reshape(*a.shape[:-1], b.shape[-1])
    try:
        batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except RuntimeError as err:
        raise InvalidArgumentError(
            f"batch dimensions of a {tuple(a.shape)} and b {tuple(b.shape)} do not broadcast"
        ) from err
    entries = math.prod(batch)  # not -1: a reshape cannot infer it when K or N is 0
    a3 = a.expand(*batch, *a.shape[-2:]).reshape(entries, *a.shape[-2:])
    b3 = b.expand(*batch, *b.shape[-2:]).reshape(entries, *b.shape[-2:])
    return _batched_mm(a3, b3, impl).reshape(*batch, a.shape[-2], b.shape[-1])


def k_major(weight: torch.Tensor) -> torch.Tensor:
    """The same ``[N, K]`` weight, stored K-major (a transposed view of a ``[K, N]`` copy).

    Values, shape and results are unchanged; only the memory layout moves. On CPU the
    batch-invariant :func:`linear` runs at close to stock speed on this layout
    (``docs/benchmarks.md``): convert weights once at load time.
    """
    check_tensor("weight", weight, ndim=2)
    return weight.t().contiguous().t()


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
    impl : ``"auto"`` | ``"torch"`` | ``"native"`` | ``"triton"``

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
    rows = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])
    out = _mm_2d(rows, weight.t(), impl, weight=True)
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], weight.shape[0])
