"""Counter-based Gumbel noise, written with torch ops: the definition the native and
Triton samplers reproduce bit for bit.

The hash is murmur3-style over 32-bit words (seed low, seed high, position, vocabulary
index). All integer arithmetic stays below 2**63 (32x16-bit partial products), so no
step relies on signed overflow. The uniform is ``u = (h + 0.5) / 2**32`` (exact in
float64, inside ``[2**-33, 1 - 2**-33]``) and the noise ``g = -log(-log(u))`` with
:func:`log64`, a logarithm built only from IEEE-754 add, subtract, multiply, divide and
bit operations in a fixed order (no library ``log``, no fused multiply-add). Each of
those steps is correctly rounded on every IEEE device, so ``g`` has the same bits on
CPU and GPU, in torch, in C++ and in Triton.
"""

from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF
_C1, _C2 = 0xCC9E2D51, 0x1B873593
_F1, _F2 = 0x85EBCA6B, 0xC2B2AE35

#: Constants of :func:`log64`, shared with the C++ and Triton kernels (their literals
#: are these Python floats, each the correctly rounded double).
LN2 = 0.6931471805599453
SQRT2 = 1.4142135623730951
#: log1p(f) = 2 atanh(s), s = f / (2 + f): 2s (1 + z/3 + z^2/5 + ... + z^10/21), z = s^2.
#: Horner order, highest power first. |s| <= 0.1716, so the first term left out
#: (z^11/23) is below 1e-18 relative.
ATANH_COEFFS = tuple(1.0 / k for k in range(21, 1, -2))
_MANTISSA = (1 << 52) - 1
_ONE_BITS = 1023 << 52


def _mul32(a: torch.Tensor, c: int) -> torch.Tensor:
    """``(a * c) mod 2**32`` for ``0 <= a, c < 2**32`` without int64 overflow."""
    lo = a * (c & 0xFFFF)
    hi = ((a * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & MASK32


def _rotl32(x: torch.Tensor, r: int) -> torch.Tensor:
    return ((x << r) | (x >> (32 - r))) & MASK32


def mix_word(h: torch.Tensor, word: torch.Tensor) -> torch.Tensor:
    """One murmur3 block step: fold a 32-bit ``word`` into the state ``h``."""
    k = _mul32(_rotl32(_mul32(word & MASK32, _C1), 15), _C2)
    h = _rotl32(h ^ k, 13)
    return (_mul32(h, 5) + 0xE6546B64) & MASK32


def finalize(h: torch.Tensor, num_bytes: int) -> torch.Tensor:
    """murmur3's length fold and avalanche ``fmix32``."""
    h = h ^ num_bytes
    h = _mul32(h ^ (h >> 16), _F1)
    h = _mul32(h ^ (h >> 13), _F2)
    return h ^ (h >> 16)


def uniform_open01(h: torch.Tensor) -> torch.Tensor:
    """Map 32-bit hashes to float64 ``u = (h + 0.5) / 2**32``, strictly inside (0, 1)."""
    return (h.to(torch.float64) + 0.5) / 4294967296.0


def log64(x: torch.Tensor) -> torch.Tensor:
    """Natural log of positive, normal float64 ``x`` in a fixed sequence of correctly
    rounded operations (within 2 ulp of the true log; bit-identical on every device).

    ``x = 2**e * m`` with ``m`` in ``[sqrt(1/2), sqrt(2))``; ``f = m - 1`` is exact;
    ``log(x) = e ln2 + 2 atanh(f / (2 + f))``.
    """
    bits = x.view(torch.int64)
    m = ((bits & _MANTISSA) | _ONE_BITS).view(torch.float64)
    e = (bits >> 52).to(torch.float64) - 1023.0
    big = m > SQRT2
    m = torch.where(big, m * 0.5, m)
    e = torch.where(big, e + 1.0, e)
    f = m - 1.0
    s = f / (f + 2.0)
    z = s * s
    r = torch.full_like(z, ATANH_COEFFS[0])
    for c in ATANH_COEFFS[1:]:
        r = r * z + c
    two_s = s + s
    return e * LN2 + (two_s + (two_s * z) * r)


def gumbel_from_uniform(u: torch.Tensor) -> torch.Tensor:
    """``-log(-log(u))`` with :func:`log64`."""
    return -log64(-log64(u))


def row_state(s_lo: torch.Tensor, s_hi: torch.Tensor, p_lo: torch.Tensor) -> torch.Tensor:
    """The murmur3 state after a row's seed words and position (``[B]`` int64)."""
    return mix_word(mix_word(mix_word(torch.zeros_like(s_lo), s_lo), s_hi), p_lo)


def hash_columns(state: torch.Tensor, first: int, count: int) -> torch.Tensor:
    """``[B, count]`` hashes of vocabulary indices ``first .. first + count - 1``."""
    idx = torch.arange(first, first + count, dtype=torch.int64, device=state.device)
    return finalize(mix_word(state[:, None], idx[None, :]), 16)
