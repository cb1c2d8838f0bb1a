"""The building blocks that make the torch path batch-invariant.

* :func:`exact_matmul_2d` (the CPU fallback when the native kernels are missing):
  products of float32/half operands are exact in float64, and they are summed by
  :func:`tree_sum`, so a row's bits are fixed by its values alone — proven, not
  observed, on any CPU. Slow (element-wise work and a float64 temporary).
* :func:`tiled_matmul_2d` (other devices) never lets the batch choose a BLAS kernel.
  Rows are padded into fixed-shape row tiles (``ROWS_FIRST_TILES`` /
  ``WEIGHT_FIRST_TILES``, chosen by the layout of the other operand). A one-row call
  defines the bits; a larger tile is used only after a probe has seen a row in EVERY
  slot of that tile get the one-row bits, on two random draws, for that ``(K, N)``,
  layout, alignment, dtype and thread count (:func:`tile_agrees`). BLAS may pick
  kernels by row count and even by a row's slot inside a call (``docs/determinism.md``),
  so this is an observation per shape, not a proof.
* :func:`tree_sum` reduces with element-wise additions in a fixed pairwise tree
  whose shape depends only on the reduced length. Element-wise IEEE additions are
  exact per element, so the result does not depend on threads, vector width or
  batch layout.
"""

from __future__ import annotations

import functools

import torch

# Rows per BLAS call, largest first, for each of the two call forms (chosen by the
# layout of ``b``, never by the batch). The smallest tile sets the cost of a one-row
# batch and defines the bits; larger tiles run big batches near stock BLAS speed
# where the probe allows them. Measured on MKL (2 AVX-512 cores, K = N = 4096, fp32):
# * ``b`` row-major ``[K, N]`` (a K-major weight): ``tile @ b``; a 4-row call costs
#   1.5x a one-row GEMV and a 256-row call 1.03x per row of a stock 1024-row product;
# * ``b = W.T`` with ``W`` row-major (``nn.Linear``'s layout): ``(W @ tile.T).T``,
#   whose kernel class ends at 56 rows; 8 rows cost 2.4x a GEMV, 48 rows 1.5x stock.
ROWS_FIRST_TILES = (256, 128, 64, 16, 4, 1)
WEIGHT_FIRST_TILES = (48, 16, 8, 1)
# Draws of the probe: a kernel choice that depends on values would show on one of them.
_PROBE_DRAWS = 2
# Elements of the float64 temporary per chunk of exact_matmul_2d.
_EXACT_CHUNK_ELEMS = 1 << 21
_ALIGN_BYTES = 64


def _weight_first(b: torch.Tensor) -> bool:
    """``b`` is the transpose of a row-major matrix: multiply with it first."""
    return b.stride(1) != 1 and b.stride(0) == 1


def _tiles(b: torch.Tensor) -> tuple[int, ...]:
    return WEIGHT_FIRST_TILES if _weight_first(b) else ROWS_FIRST_TILES


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


def _probe_operand(shape, strides, dtype, device, offset_elems, gen) -> torch.Tensor:
    """A random tensor with the given shape, strides and misalignment."""
    numel = max(s * st for s, st in zip(shape, strides, strict=True)) + 1
    flat = torch.randn(numel + offset_elems, generator=gen).to(dtype=dtype, device=device)
    return flat[offset_elems:].as_strided(shape, strides)


@functools.lru_cache(maxsize=512)
def tile_agrees(
    tile: int, k: int, n: int, dtype: torch.dtype, device: str, b_strides: tuple, b_offset: int, threads: int
) -> bool:
    """Whether one BLAS call of ``tile`` rows gives the row in every slot its one-row bits.

    Each slot ``0 .. tile-1`` of the call is compared with the same row computed alone
    (a one-row call), on :data:`_PROBE_DRAWS` random draws. The answer is memoized per
    process, keyed by everything known to steer BLAS's kernel choice.
    """
    del threads  # part of the cache key: a different thread count may pick other kernels
    for draw in range(_PROBE_DRAWS):
        gen = torch.Generator().manual_seed(tile * 7919 + k * 31 + n + draw * 104729)
        b = _probe_operand((k, n), b_strides, dtype, device, b_offset, gen)
        a = torch.randn(tile, k, generator=gen).to(dtype=dtype, device=device)
        whole = _product(a, b)
        alone = torch.cat([_product(_tile_rows(a, i, 1), b) for i in range(tile)])
        if not _same_bits(whole, alone):
            return False
    return True


def _same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Bitwise equality (``torch.equal`` would call -0.0 and 0.0 equal)."""
    return torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8))


def _tiles_for(b: torch.Tensor, k: int, n: int) -> tuple[int, ...]:
    offset = (b.data_ptr() % _ALIGN_BYTES) // b.element_size()
    key = (k, n, b.dtype, str(b.device), tuple(b.stride()), offset, torch.get_num_threads())
    tiles = _tiles(b)
    return tuple(t for t in tiles[:-1] if tile_agrees(t, *key)) + tiles[-1:]


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
    tiles = _tiles_for(b, k, n)
    padded_rows = -(-m // tiles[-1]) * tiles[-1]
    out = a.new_empty((padded_rows, n))
    start = 0
    for tile in tiles:
        while padded_rows - start >= tile:
            out[start : start + tile] = _product(_tile_rows(a, start, tile), b)
            start += tile
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
