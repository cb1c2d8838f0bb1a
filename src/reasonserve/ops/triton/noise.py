"""The counter-based uniforms of ``ops.sample`` in one kernel (instead of ~60 torch ops).

Program ``(row, block)`` folds the row's seed words and position into a murmur3 state
once, then hashes ``BLOCK`` vocabulary indices and maps each 32-bit hash to
``u = (h + 0.5) / 2**32`` in float64, clamped to ``[2**-40, 1 - 2**-40]``: the same
integer steps as :mod:`reasonserve.ops._hash` in uint32 arithmetic (wrapping
multiplies are exactly ``mod 2**32``), so ``u`` has the same bits as the torch path on
every device. The two logarithms of the Gumbel transform stay in torch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rotl(x, r: tl.constexpr):
    return (x << r) | (x >> (32 - r))


@triton.jit
def _u32(c: tl.constexpr):
    return tl.full((), c, tl.uint32)


@triton.jit
def _mix(h, word):
    k = _rotl(word * _u32(0xCC9E2D51), 15) * _u32(0x1B873593)
    h = _rotl(h ^ k, 13)
    return h * _u32(5) + _u32(0xE6546B64)


@triton.jit
def _uniform_kernel(s_lo_ptr, s_hi_ptr, p_lo_ptr, u_ptr, V, stride_u, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    s_lo = tl.load(s_lo_ptr + row).to(tl.uint32)
    s_hi = tl.load(s_hi_ptr + row).to(tl.uint32)
    p_lo = tl.load(p_lo_ptr + row).to(tl.uint32)
    h = _mix(_mix(_mix(tl.zeros((), dtype=tl.uint32), s_lo), s_hi), p_lo)
    h = _mix(h + tl.zeros((BLOCK,), dtype=tl.uint32), cols.to(tl.uint32))
    h = h ^ _u32(16)
    h = (h ^ (h >> 16)) * _u32(0x85EBCA6B)
    h = (h ^ (h >> 13)) * _u32(0xC2B2AE35)
    h = h ^ (h >> 16)
    u = (h.to(tl.float64) + 0.5) / 4294967296.0
    u = tl.minimum(tl.maximum(u, 2.0**-40), 1.0 - 2.0**-40)
    tl.store(u_ptr + row * stride_u + cols, u, mask=cols < V)


def uniform_triton(
    s_lo: torch.Tensor, s_hi: torch.Tensor, p_lo: torch.Tensor, vocab_size: int
) -> torch.Tensor:
    """Per-row 32-bit words ``[B]`` (int64 holding values < 2**32) -> float64 ``u [B, V]``."""
    batch = s_lo.shape[0]
    u = torch.empty((batch, vocab_size), dtype=torch.float64, device=s_lo.device)
    if batch and vocab_size:
        block = 1024
        grid = (batch, triton.cdiv(vocab_size, block))
        words = (s_lo.contiguous(), s_hi.contiguous(), p_lo.contiguous())
        _uniform_kernel[grid](*words, u, vocab_size, u.stride(0), BLOCK=block)
    return u


__all__ = ["uniform_triton"]
