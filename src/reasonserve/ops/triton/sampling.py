"""``ops.sample`` as one Triton kernel: hash, Gumbel noise, score, argmax and (optionally)
the in-place one-hot, one program per row, no ``[rows, vocab]`` buffer, no host sync.

The arithmetic is :mod:`reasonserve.ops._hash`'s, step for step: uint32 wrapping
multiplies (exactly ``mod 2**32``), float64 add/sub/mul/div (correctly rounded on every
IEEE device) with the constants built as float64 (a bare Python float would become a
float32 constant in Triton), and no fused multiply-add (``enable_fp_fusion=False`` at
launch). So the token of every row has the bits of the torch and native paths.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reasonserve.ops._hash import ATANH_COEFFS, LN2, SQRT2

__all__ = ["sample_triton"]

_BLOCK = 1024


@triton.jit
def _u32(c: tl.constexpr):
    return tl.full((), c, tl.uint32)


@triton.jit
def _f64(c: tl.constexpr):
    return tl.full((), c, tl.float64)


@triton.jit
def _rotl(x, r: tl.constexpr):
    return (x << r) | (x >> (32 - r))


@triton.jit
def _column_hash(state, cols):
    k = _rotl(cols.to(tl.uint32) * _u32(0xCC9E2D51), 15) * _u32(0x1B873593)
    h = _rotl(state ^ k, 13)
    h = h * _u32(5) + _u32(0xE6546B64)
    h = h ^ _u32(16)
    h = (h ^ (h >> 16)) * _u32(0x85EBCA6B)
    h = (h ^ (h >> 13)) * _u32(0xC2B2AE35)
    return h ^ (h >> 16)


@triton.jit
def _log64(x, LN2_: tl.constexpr, SQRT2_: tl.constexpr, C: tl.constexpr):
    bits = x.to(tl.int64, bitcast=True)
    m = ((bits & 0xFFFFFFFFFFFFF) | (1023 << 52)).to(tl.float64, bitcast=True)
    e = (bits >> 52).to(tl.float64) - _f64(1023.0)
    big = m > _f64(SQRT2_)
    m = tl.where(big, m * _f64(0.5), m)
    e = tl.where(big, e + _f64(1.0), e)
    f = m - _f64(1.0)
    s = f / (f + _f64(2.0))
    z = s * s
    r = z * _f64(C[0]) + _f64(C[1])
    r = r * z + _f64(C[2])
    r = r * z + _f64(C[3])
    r = r * z + _f64(C[4])
    r = r * z + _f64(C[5])
    r = r * z + _f64(C[6])
    r = r * z + _f64(C[7])
    r = r * z + _f64(C[8])
    r = r * z + _f64(C[9])
    two_s = s + s
    return e * _f64(LN2_) + (two_s + (two_s * z) * r)


@triton.jit
def _sample_kernel(
    x_ptr, rows_ptr, active_ptr, state_ptr, temp_ptr, thr_ptr, out_ptr, N, V, stride_x,
    ONE_HOT: tl.constexpr, LN2_: tl.constexpr, SQRT2_: tl.constexpr, C: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    i = tl.program_id(0)
    row = tl.load(rows_ptr + i)
    if tl.load(active_ptr + i) == 0:  # a row the caller skips: not read
        tl.store(out_ptr + i, -2)
    elif (row < 0) | (row >= N):  # an index outside the logits: nothing read or written
        tl.store(out_ptr + i, -3)
    else:
        state = tl.load(state_ptr + i).to(tl.uint32)
        temp = tl.load(temp_ptr + i)
        thr = tl.load(thr_ptr + i)
        greedy = temp == _f64(0.0)
        divisor = tl.where(greedy, _f64(1.0), temp)
        base = x_ptr + row.to(tl.int64) * stride_x
        best = tl.full((BLOCK,), float("-inf"), tl.float64)
        best_col = tl.full((BLOCK,), 2147483647, tl.int32)
        first_nan = tl.full((BLOCK,), 2147483647, tl.int32)
        for c0 in range(0, V, BLOCK):
            cols = c0 + tl.arange(0, BLOCK)
            inside = cols < V
            x = tl.load(base + cols, mask=inside, other=float("-inf")).to(tl.float64)
            s = x / divisor
            u = (_column_hash(state, cols).to(tl.float64) + _f64(0.5)) / _f64(4294967296.0)
            g = -_log64(-_log64(u, LN2_, SQRT2_, C), LN2_, SQRT2_, C)
            scored = tl.where(s >= thr, s + g, float("-inf"))
            score = tl.where(greedy, x, scored)
            is_nan = x != x
            first_nan = tl.minimum(first_nan, tl.where(is_nan, cols, 2147483647))
            score = tl.where(is_nan, float("-inf"), score)
            better = score > best
            best = tl.where(better, score, best)
            best_col = tl.where(better, cols, best_col)
        top = tl.max(best, axis=0)
        token = tl.min(tl.where(best == top, best_col, 2147483647), axis=0).to(tl.int64)
        token = tl.where(top == float("-inf"), -1, token)
        nan_col = tl.min(first_nan, axis=0)
        token = tl.where(nan_col < 2147483647, nan_col.to(tl.int64), token)
        tl.store(out_ptr + i, token)
        if ONE_HOT:  # noqa: SIM102 (a compile-time branch around a run-time one)
            if token >= 0:
                for c0 in range(0, V, BLOCK):
                    cols = c0 + tl.arange(0, BLOCK)
                    hot = tl.where(cols == token, 0.0, float("-inf"))
                    tl.store(base + cols, hot.to(x_ptr.dtype.element_ty), mask=cols < V)


def sample_triton(
    logits: torch.Tensor,
    rows: torch.Tensor,
    active: torch.Tensor,
    state: torch.Tensor,
    temperature: torch.Tensor,
    threshold: torch.Tensor,
    one_hot: bool,
) -> torch.Tensor:
    """Tokens ``[R]`` int64 of rows ``rows`` of ``logits [N, V]`` (unit column stride);
    -1 for a row with nothing to sample, -2 for an inactive row, -3 for an entry of
    ``rows`` outside ``[0, N)`` (bounded in the kernel: no access outside ``logits``).
    See the module docstring."""
    out = torch.empty(rows.shape, dtype=torch.int64, device=logits.device)
    if rows.numel():
        _sample_kernel[(rows.numel(),)](
            logits, rows.contiguous(), active.to(torch.int8).contiguous(), state.contiguous(),
            temperature.contiguous(), threshold.contiguous(), out, logits.shape[0], logits.shape[1],
            logits.stride(0),
            ONE_HOT=one_hot, LN2_=LN2, SQRT2_=SQRT2, C=tuple(ATANH_COEFFS), BLOCK=_BLOCK,
            enable_fp_fusion=False,
        )  # fmt: skip
    return out
