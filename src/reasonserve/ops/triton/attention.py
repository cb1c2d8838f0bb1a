"""Batch-invariant attention: one program per (query block, sequence x head).

Each program walks its sequence's keys in fixed ``BLOCK_N`` chunks, in order, with
an online softmax (a single KV split: no split-KV reduction whose shape could depend
on the batch). Loop bounds come from the sequence's own length, so neither the other
sequences nor the padded cache length change a sequence's bits. Slots past a
sequence's length are never loaded (masked loads), so garbage there is harmless.
Batch and head offsets are int64 (a padded cache may pass 2**31 elements).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reasonserve.ops.triton._config import dot_precision, on_gpu


@triton.jit
def _attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lens_ptr, S, D, Hq, group, scale,
    sqb, sqh, sqs, sqd, skb, skh, skt, skd, svb, svh, svt, svd, sob, soh, sos, sod,
    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    q_block = tl.program_id(0)
    # int64: b * skb passes 2**31 elements for a large padded cache (e.g. 3 x 8 x 2**20 x 128)
    b = (tl.program_id(1) // Hq).to(tl.int64)
    h = (tl.program_id(1) % Hq).to(tl.int64)
    kv_h = h // group
    length = tl.load(lens_ptr + b)
    rm = q_block * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, BLOCK_D)
    rn = tl.arange(0, BLOCK_N)
    q = tl.load(
        q_ptr + b * sqb + h * sqh + rm[:, None] * sqs + rd[None, :] * sqd,
        mask=(rm[:, None] < S) & (rd[None, :] < D), other=0.0,
    )
    q_pos = length - S + rm
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    end = length
    if CAUSAL:
        end = tl.minimum(length, length - S + (q_block + 1) * BLOCK_M)
    for start in range(0, end, BLOCK_N):
        kn = start + rn
        k = tl.load(
            k_ptr + b * skb + kv_h * skh + kn[None, :] * skt + rd[:, None] * skd,
            mask=(kn[None, :] < length) & (rd[:, None] < D), other=0.0,
        )
        s = tl.dot(q, k, input_precision=PRECISION) * scale
        visible = kn[None, :] < length
        if CAUSAL:
            visible = visible & (kn[None, :] <= q_pos[:, None])
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(
            v_ptr + b * svb + kv_h * svh + kn[:, None] * svt + rd[None, :] * svd,
            mask=(kn[:, None] < length) & (rd[None, :] < D), other=0.0,
        )
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(
        o_ptr + b * sob + h * soh + rm[:, None] * sos + rd[None, :] * sod,
        out.to(o_ptr.dtype.element_ty),
        mask=(rm[:, None] < S) & (rd[None, :] < D),
    )


def attention_triton(q, k, v, lens: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """``q [B, Hq, S, D]``, ``k``/``v`` ``[B, Hkv, T, D]``, ``lens [B]`` -> ``[B, Hq, S, D]``."""
    b, hq, s, d = q.shape
    out = torch.empty_like(q)
    block_m, block_n = (64, 64) if on_gpu(q) else (16, 16)
    block_d = max(16, triton.next_power_of_2(d))
    grid = (triton.cdiv(s, block_m), b * hq)
    extra = {"num_warps": 4, "num_stages": 2} if on_gpu(q) else {}
    _attention_kernel[grid](
        q, k, v, out, lens.to(torch.int32).contiguous(), s, d, hq, hq // k.shape[1], scale,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
        PRECISION=dot_precision(q.dtype), **extra,
    )  # fmt: skip
    return out
