"""The two building blocks that make the torch reference path batch-invariant.

* :func:`tiled_matmul_2d` never hands BLAS a shape that depends on the batch: rows
  are padded to a multiple of :data:`ROW_TILE` and every tile is one BLAS call of the
  same shape ``[N, K] x [K, ROW_TILE]``. A fixed shape means a fixed kernel, fixed
  blocking and a fixed reduction order over ``K``, so a row's bits cannot depend on
  how many rows (or which rows) share its batch. (Stock CPU ``mm`` picks different
  kernels by row count; measured in ``docs/determinism.md``.)
* :func:`tree_sum` reduces with element-wise additions in a fixed pairwise tree
  whose shape depends only on the reduced length. Element-wise IEEE additions are
  exact per element, so the result does not depend on threads, vector width or
  batch layout.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Rows per BLAS call. Fixed: it must never depend on the batch size. 32 is the
# cheapest tile measured for the `W @ tile.T` form on a 2-core AVX-512 CPU
# (benchmarks/ops.py); any constant keeps the guarantee.
ROW_TILE = 32


def tiled_matmul_2d(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for ``a [M, K]``, ``b [K, N]`` with fixed-shape row tiles.

    Each tile is computed as ``(b.T @ tile.T).T``: with the large operand first, BLAS
    streams ``b`` once per tile at a better rate than ``tile @ b`` for small tiles.
    """
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return a.new_zeros((m, n))
    padded_rows = -(-m // ROW_TILE) * ROW_TILE
    # A fresh contiguous buffer: every tile starts at the same alignment.
    buf = a.new_zeros((padded_rows, k))
    buf[:m] = a
    bt = b.t()
    out = a.new_empty((padded_rows, n))
    for start in range(0, padded_rows, ROW_TILE):
        tile = buf[start : start + ROW_TILE]
        out[start : start + ROW_TILE] = torch.mm(bt, tile.t()).t()
    return out[:m]


def tree_sum(x: torch.Tensor, *, keepdim: bool = False) -> torch.Tensor:
    """Sum over the last dimension in a fixed pairwise order.

    ``x [..., n]`` -> ``[...]`` (or ``[..., 1]`` with ``keepdim``). The row is
    zero-padded to the next power of two and folded in half until one element is
    left: element ``i`` is always added to element ``i + half``.
    """
    n = x.shape[-1]
    if n == 0:
        out = x.new_zeros(x.shape[:-1])
        return out.unsqueeze(-1) if keepdim else out
    width = 1 << (n - 1).bit_length()
    if width != n:
        x = F.pad(x, (0, width - n))
    while width > 1:
        width //= 2
        x = x[..., :width] + x[..., width:]
    return x if keepdim else x.squeeze(-1)
