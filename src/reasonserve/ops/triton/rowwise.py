"""Row kernels: softmax / log-softmax and mean, one program per row (RMSNorm: ``rms_norm.py``).

Each program walks its row in fixed ``BLOCK`` chunks (a function of the row length
only) accumulating a per-lane vector, then reduces that vector once: the order of
every addition depends only on the row length, never on the number of rows.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reasonserve.ops.triton._config import row_block


@triton.jit
def _mean_kernel(x_ptr, y_ptr, N, stride_x, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_x + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x
    tl.store(y_ptr + row, tl.sum(acc, axis=0) / N)


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, N, stride_x, stride_y, LOG: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    lane_max = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        lane_max = tl.maximum(lane_max, x)
    row_max = tl.max(lane_max, axis=0)
    lane_sum = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        lane_sum += tl.where(cols < N, tl.exp(x - row_max), 0.0)
    total = tl.sum(lane_sum, axis=0)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        y = x - row_max - tl.log(total) if LOG else tl.exp(x - row_max) / total
        tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=cols < N)


def mean_triton(rows: torch.Tensor) -> torch.Tensor:
    """``[M, N]`` -> ``[M]`` mean per row, in the input dtype."""
    rows = rows.contiguous()
    out = torch.empty(rows.shape[0], dtype=torch.float32, device=rows.device)
    if rows.shape[0]:
        n = rows.shape[1]
        _mean_kernel[(rows.shape[0],)](rows, out, n, rows.stride(0), BLOCK=row_block(n, rows))
    return out.to(rows.dtype)


def softmax_triton(rows: torch.Tensor, *, log: bool) -> torch.Tensor:
    """``[M, N]`` (log-)softmax per row in the input dtype."""
    rows = rows.contiguous()
    out = torch.empty_like(rows)
    if rows.shape[0]:
        n = rows.shape[1]
        _softmax_kernel[(rows.shape[0],)](
            rows, out, n, rows.stride(0), out.stride(0), LOG=log, BLOCK=row_block(n, rows)
        )
    return out


__all__ = ["mean_triton", "softmax_triton"]
