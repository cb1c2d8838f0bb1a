"""The fixed-order kernels of ``_csrc/fixed_order.h``, written with torch element-wise ops.

Used when the compiled extension is missing (no C++ compiler at install). Every
floating-point operation of the C++ kernels happens here too, in the same order, as
one rounded float32 (or, for ``log_fixed``, float64) torch operation: products are one
in-order chain over ``K`` of a rounded multiply and a rounded add; row reductions run
16 interleaved lanes folded by a fixed tree; ``exp`` and ``log`` are the same
polynomials. Element-wise IEEE operations are exact per element on every CPU, so the
results have the native kernels' bits: ``tests/test_native_fallback.py`` compares them
(NaN payloads aside: NaN lies where the native kernels put it). torch's float32
``sqrt`` is not correctly rounded (it differs from IEEE ``sqrtf`` in ~1 of 5 inputs),
so the one square root per row is numpy's, which is. Vectorised across independent
outputs only, with a Python loop along every chain: slow, never different.

The functions take the arguments of the ``torch.ops.reasonserve`` ops they stand for
(the instruction-set index included, which changes nothing here).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = [
    "bmm_rows", "isas", "linear_packed", "matmul_rows", "mean", "paged_attention", "rms_norm", "softmax",
]  # fmt: skip

_LANES = 16
_F32 = torch.float32


def isas() -> list[int]:
    """Instruction sets: the generic one only (its bits are every variant's)."""
    return [0]


def _chain(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x [..., M, K] @ w [..., K, N]``: each output ``acc = acc + x[k] * w[k]`` for k in order."""
    acc = x.new_zeros((*x.shape[:-1], w.shape[-1]))
    for k in range(x.shape[-1]):
        acc = acc + x[..., :, k : k + 1] * w[..., k : k + 1, :]
    return acc


def linear_packed(x: torch.Tensor, panels: torch.Tensor, n: int, isa: int = 0) -> torch.Tensor:
    """``x [M, K]`` times packed panels ``[NP, K, 16]``, the first ``n`` columns."""
    num_panels, k, _ = panels.shape
    w = panels.permute(1, 0, 2).reshape(k, num_panels * _LANES)
    return _chain(x, w)[:, :n]


def matmul_rows(a: torch.Tensor, b: torch.Tensor, isa: int = 0) -> torch.Tensor:
    return _chain(a, b)


def bmm_rows(a: torch.Tensor, b: torch.Tensor, isa: int = 0) -> torch.Tensor:
    return _chain(a, b)


def _fold16(lanes: torch.Tensor) -> torch.Tensor:
    """``lanes [..., 16]`` folded by the fixed tree j += j+8, j += j+4, j += j+2, j += j+1."""
    width = _LANES // 2
    while width >= 1:
        lanes = lanes[..., :width] + lanes[..., width : 2 * width]
        width //= 2
    return lanes[..., 0]


def _sum16(terms: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Sum of ``terms [..., n]`` in the 16-lane order: lane j adds terms j, j+16, ... in turn.

    ``valid [..., n]`` (optional) leaves a term out, as if the row were shorter.
    """
    n = terms.shape[-1]
    lanes = terms.new_zeros((*terms.shape[:-1], _LANES))
    for start in range(0, n, _LANES):
        width = min(_LANES, n - start)
        added = lanes[..., :width] + terms[..., start : start + width]
        if valid is not None:
            added = torch.where(valid[..., start : start + width], added, lanes[..., :width])
        lanes = torch.cat([added, lanes[..., width:]], dim=-1)
    return _fold16(lanes)


def _exp_neg(x: torch.Tensor) -> torch.Tensor:
    """``fixed_order.h``'s ``exp_neg``: e^x for x <= 0 from IEEE basic operations."""
    xc = torch.where(x < -86.0, -86.0, torch.where(x > 0.0, 0.0, x))
    n = (xc * 1.44269504088896341 + 12582912.0) - 12582912.0
    r = (xc - n * 0.693359375) - n * -2.12194440e-4
    p = torch.full_like(r, 1.9875691500e-4)
    for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = p * r + c
    p = (p * r) * r + r + 1.0
    finite_n = torch.where(torch.isnan(n), 0.0, n)  # NaN inputs give NaN below whatever n is
    scale = ((finite_n.to(torch.int32) + 127) << 23).view(_F32)
    y = torch.where(x < -86.0, 0.0, p * scale)
    return torch.where(x != x, x, y)


def _log_fixed(x: torch.Tensor) -> torch.Tensor:
    """``fixed_order.h``'s ``log_fixed`` (float64) of finite ``x >= 1``; NaN and +inf pass."""
    mantissa, exponent = torch.frexp(x)
    low = mantissa < 0.7071067811865476
    m = torch.where(low, mantissa * 2.0, mantissa)
    e = torch.where(low, exponent - 1, exponent).to(torch.float64)
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    p = torch.full_like(s, 1.0 / 19.0)
    for k in range(17, 1, -2):
        p = 1.0 / k + s2 * p
    value = 2.0 * s + 2.0 * s * (s2 * p) + e * 0.6931471805599453
    return torch.where(x < float("inf"), value, x)


def rms_norm(x: torch.Tensor, eps: float, isa: int = 0) -> torch.Tensor:
    """``x [R, n] * (1 / sqrt(sum16(x * x) / n + eps))`` per row."""
    n = x.shape[1]
    var = _sum16(x * x) / float(n) if n else x.new_zeros(x.shape[0])
    inv = torch.ones_like(var) / _sqrt(var + torch.tensor(eps, dtype=_F32))
    return x * inv[:, None]


def _sqrt(x: torch.Tensor) -> torch.Tensor:
    """Correctly rounded float32 square roots (IEEE ``sqrtf``, as the C++ kernels call it)."""
    return torch.from_numpy(np.sqrt(x.numpy()))


def _row_max(x: torch.Tensor) -> torch.Tensor:
    """The row maximum (+0 for a zero maximum), NaN when the row holds one."""
    if x.shape[-1] == 0:
        return x.new_full(x.shape[:-1], -float("inf"))
    m = x.amax(-1) + 0.0
    return torch.where(torch.isnan(x).any(-1), float("nan"), m)


def softmax(x: torch.Tensor, log: bool, isa: int = 0) -> torch.Tensor:
    """Softmax (or log-softmax) of every row of ``x [R, n]``."""
    m = _row_max(x)[:, None]
    e = _exp_neg(x - m)
    total = _sum16(e)
    if log:
        return (x - m) - _log_fixed(total.to(torch.float64)).to(_F32)[:, None]
    return e * (torch.ones_like(total) / total)[:, None]


def mean(x: torch.Tensor, isa: int = 0) -> torch.Tensor:
    return _sum16(x) / float(x.shape[1])


def _gather_keys(cache: torch.Tensor, tables, row_seq, keys: int, valid) -> torch.Tensor:
    """``cache [blocks, Hkv, bs, D]`` rows of every query's keys 0..keys-1: ``[T, keys, Hkv, D]``."""
    block_size = cache.shape[2]
    j = torch.arange(keys)
    blocks = torch.where(valid, tables[row_seq][:, j // block_size], 0)
    return cache[blocks, :, (j % block_size)[None, :].expand_as(blocks)].to(_F32)


def _first_nan_or_max(s: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """The attention loop's maximum over ``s [..., n]``: the first NaN seen, else the max."""
    nan = torch.isnan(s) & valid
    first_nan = s.gather(-1, nan.to(torch.int8).argmax(-1, keepdim=True)).squeeze(-1)
    m = torch.where(valid, s, -float("inf")).amax(-1)
    return torch.where(nan.any(-1), first_nan, m)


def paged_attention(q, k_cache, v_cache, tables, row_seq, row_keys, scale: float, isa: int = 0):
    """Attention rows ``[T, Hq, D]`` (float32) of ``q [T, Hq, D]`` over a paged cache.

    Per (row, head): ``s_j = dot16(q, k_j) * scale``; ``m`` = max; ``p_j = exp_neg(s_j - m)``;
    ``denom = sum16(p)``; ``out[d]`` = the in-order chain of ``p_j * v_j[d]``, divided by ``denom``.
    """
    t, hq, d = q.shape
    if t == 0:
        return q.new_empty(q.shape)
    keys = int(row_keys.max())
    valid = torch.arange(keys)[None, :] < row_keys[:, None]  # [T, keys]
    heads = torch.arange(hq) // (hq // k_cache.shape[1])
    # [T, Hq, keys, D]
    k = _gather_keys(k_cache, tables, row_seq, keys, valid)[:, :, heads].permute(0, 2, 1, 3)
    v = _gather_keys(v_cache, tables, row_seq, keys, valid)[:, :, heads].permute(0, 2, 1, 3)
    s = _sum16(q[:, :, None, :] * k) * torch.tensor(scale, dtype=_F32)  # [T, Hq, keys]
    valid = valid[:, None, :].expand_as(s)
    m = _first_nan_or_max(s, valid)
    p = _exp_neg(s - m[..., None])
    denom = _sum16(p, valid)
    out = q.new_zeros((t, hq, d))
    for j in range(keys):
        step = out + p[:, :, j, None] * v[:, :, j]
        out = torch.where(valid[:, :, j, None], step, out)
    return out / denom[..., None]
