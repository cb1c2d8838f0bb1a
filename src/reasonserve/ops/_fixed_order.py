"""The building blocks that make the torch path batch-invariant.

* :func:`exact_matmul_2d` (the CPU fallback when the native kernels are missing):
  products of float32/half operands are exact in float64, and they are summed by
  :func:`tree_sum`, so a row's bits are fixed by its values alone — proven, not
  observed, on any CPU. Slow (element-wise work and a float64 temporary).
* :func:`tiled_matmul_2d` (other devices) never lets the batch choose a BLAS kernel:
  rows are padded into calls of exactly :data:`ROW_TILE` rows, so every row of every
  batch is computed by the same call shape, and the layout of the weight picks the call
  form. The tile is a constant — never probed per process. What remains is an
  assumption about the library: that a row's bits do not depend on its slot inside a
  fixed-shape call (true of cuBLAS as tested in ``tests/test_gpu.py``; not of MKL's
  generic CPU kernel, which is why CPU never takes this path).
* :func:`tree_sum` reduces with element-wise additions in a fixed pairwise tree
  whose shape depends only on the reduced length. Element-wise IEEE additions are
  exact per element, so the result does not depend on threads, vector width or
  batch layout.
"""

from __future__ import annotations

import torch

# Rows per BLAS call on other devices: every call has exactly this many rows. 64 keeps a
# one-row batch near GEMV cost on a GPU (the weight read dominates) and large batches
# near stock speed.
ROW_TILE = 64
# Elements of the float64 temporary per chunk of exact_matmul_2d.
_EXACT_CHUNK_ELEMS = 1 << 21


def _weight_first(b: torch.Tensor) -> bool:
    """``b`` is the transpose of a row-major matrix: multiply with it first."""
    return b.stride(1) != 1 and b.stride(0) == 1


def _blas_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The stock ATen ``mm`` kernel, even inside ``deterministic_mode()``.

    The mode overrides ``aten::mm`` but never its ``out=`` overload; going through
    the override here would re-tile an already fixed-shape call.
    """
    return torch.ops.aten.mm.out(a, b, out=a.new_empty(0))


def _product(tile: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """One BLAS call computing ``tile @ b``, in the form ``b``'s layout runs fastest."""
    if _weight_first(b):
        return _blas_mm(b.t(), tile.t()).t()
    return _blas_mm(tile, b)


def _tile_rows(a: torch.Tensor, start: int, tile: int) -> torch.Tensor:
    """Rows ``start .. start + tile`` of ``a`` in a fresh zero-padded buffer.

    Fresh buffers start at the allocator's alignment, so BLAS sees every tile at the
    same alignment whatever its position in the batch.
    """
    buf = a.new_zeros((tile, a.shape[1]))
    rows = a[start : start + tile]
    buf[: rows.shape[0]] = rows
    return buf


def tiled_matmul_2d(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for ``a [M, K]``, ``b [K, N]`` with fixed-shape row tiles."""
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0 or k == 0:
        return a.new_zeros((m, n))
    if b.stride(0) != 1 and b.stride(1) != 1:
        b = b.contiguous()
    out = a.new_empty((-(-m // ROW_TILE) * ROW_TILE, n))
    for start in range(0, m, ROW_TILE):
        out[start : start + ROW_TILE] = _product(_tile_rows(a, start, ROW_TILE), b)
    return out[:m]


def exact_matmul_2d(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a [M, K] @ b [K, N]`` from exact float64 products and a fixed pairwise tree.

    For float32/float16/bfloat16 operands every product is exact in float64 and the
    tree's order depends only on ``K``, so each output's bits depend only on its row
    and column. Chunking over rows and columns never changes them.
    """
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0 or k == 0:
        return a.new_zeros((m, n))
    a64, bt64 = a.to(torch.float64), b.t().to(torch.float64)
    cols = max(1, min(n, _EXACT_CHUNK_ELEMS // k))
    rows = max(1, _EXACT_CHUNK_ELEMS // (cols * k))
    out = torch.empty((m, n), dtype=torch.float64, device=a.device)
    for i in range(0, m, rows):
        for j in range(0, n, cols):
            terms = a64[i : i + rows, None, :] * bt64[None, j : j + cols, :]
            out[i : i + rows, j : j + cols] = tree_sum(terms)
    return out.to(a.dtype)


def tree_sum(x: torch.Tensor, *, dim: int = -1, keepdim: bool = False) -> torch.Tensor:
    """Sum over ``dim`` in a fixed pairwise order.

    The reduced dimension is zero-padded to the next power of two and folded in half
    until one element is left: element ``i`` is always added to element ``i + half``.
    Padding with more zeros never changes the result (``x + 0 == x``), so a row summed
    inside a longer, zero-padded batch keeps its bits.
    """
    dim = dim % x.dim()
    n = x.shape[dim]
    if n == 0:
        out = x.new_zeros(x.shape[:dim] + x.shape[dim + 1 :])
        return out.unsqueeze(dim) if keepdim else out
    width = 1 << (n - 1).bit_length()
    if width != n:
        # Same bits as zero-padding to `width` and folding once (x + 0 == x), without
        # copying the whole tensor into a padded buffer first.
        width //= 2
        tail = n - width
        head = x.narrow(dim, 0, tail) + x.narrow(dim, width, tail)
        x = torch.cat([head, x.narrow(dim, tail, width - tail)], dim=dim)
    while width > 1:
        width //= 2
        x = x.narrow(dim, 0, width) + x.narrow(dim, width, width)
    return x if keepdim else x.squeeze(dim)
