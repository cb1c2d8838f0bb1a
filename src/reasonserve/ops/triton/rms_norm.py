"""Fused RMSNorm (and residual add + RMSNorm): one program per row, one kernel.

The program walks its row in fixed ``BLOCK`` chunks (a function of the row length
only), accumulating squares in a per-lane float32 vector that it reduces once: the
order of every addition depends only on the row length, never on the number of rows.
It then scales the row (``(x * inv).to(x.dtype) * weight``, the Llama/Qwen2 order) in a
second walk; a row that fits one chunk (every row up to the chunk cap: the choice
depends on the row length only) is loaded once and kept in registers. With a residual the summed row
``h = (x + residual).to(x.dtype)`` is stored and normalized — recomputed, never re-read,
in the second walk — so ``add_rms_norm`` has the bits of ``rms_norm(x + residual)``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reasonserve.ops.triton._config import row_block

__all__ = ["rms_norm_triton"]


@triton.jit
def _row(x_ptr, r_ptr, cols, N, HAS_RESIDUAL: tl.constexpr):
    """A chunk of the (summed) row in its own dtype."""
    x = tl.load(x_ptr + cols, mask=cols < N, other=0.0)
    if HAS_RESIDUAL:
        x = (x + tl.load(r_ptr + cols, mask=cols < N, other=0.0)).to(x.dtype)
    return x


@triton.jit
def _scale(x, w_ptr, y_ptr, cols, N, inv):
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    normed = (x.to(tl.float32) * inv).to(x.dtype).to(tl.float32)
    tl.store(y_ptr + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def _rms_norm_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, N, stride_x, stride_r, stride_y, stride_h, eps,
    HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr, ONE_CHUNK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    x_row, r_row = x_ptr + row * stride_x, r_ptr + row * stride_r
    y_row, h_row = y_ptr + row * stride_y, h_ptr + row * stride_h
    if ONE_CHUNK:  # the row stays in registers between the two walks
        cols = tl.arange(0, BLOCK)
        x = _row(x_row, r_row, cols, N, HAS_RESIDUAL)
        if HAS_RESIDUAL:
            tl.store(h_row + cols, x, mask=cols < N)
        xf = x.to(tl.float32)
        _scale(x, w_ptr, y_row, cols, N, 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / N + eps))
    else:
        lanes = tl.zeros((BLOCK,), dtype=tl.float32)
        for start in range(0, N, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = _row(x_row, r_row, cols, N, HAS_RESIDUAL)
            if HAS_RESIDUAL:
                tl.store(h_row + cols, x, mask=cols < N)
            xf = x.to(tl.float32)
            lanes += xf * xf
        inv = 1.0 / tl.sqrt(tl.sum(lanes, axis=0) / N + eps)
        for start in range(0, N, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            _scale(_row(x_row, r_row, cols, N, HAS_RESIDUAL), w_ptr, y_row, cols, N, inv)


def rms_norm_triton(
    rows: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``[M, N]`` RMSNorm of ``rows`` (+ ``residual``) scaled by ``weight [N]``.

    Returns ``(normed, summed)``: ``normed`` has ``rows``' dtype promoted with
    ``weight``'s (as ``weight * x``); ``summed = (rows + residual)`` in ``rows``' dtype,
    or None without a residual.
    """
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    out = torch.empty(rows.shape, dtype=torch.promote_types(rows.dtype, weight.dtype), device=rows.device)
    summed = None if residual is None else torch.empty_like(rows)
    if rows.shape[0]:
        n = rows.shape[1]
        block = row_block(n, rows)
        res = rows if residual is None else (residual if residual.stride(-1) == 1 else residual.contiguous())
        h = out if summed is None else summed
        _rms_norm_kernel[(rows.shape[0],)](
            rows, res, weight.contiguous(), out, h, n,
            rows.stride(0), res.stride(0), out.stride(0), h.stride(0), eps,
            HAS_RESIDUAL=residual is not None, BLOCK=block, ONE_CHUNK=n <= block,
        )  # fmt: skip
    return out, summed
