"""Counter-based noise: a murmur3-style 32-bit hash evaluated with torch int64 ops.

All arithmetic stays below 2**63 (32x16-bit partial products), so no step relies on
signed overflow. Same inputs give the same bits on every device and batch layout.
"""

from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF
_C1, _C2 = 0xCC9E2D51, 0x1B873593
_F1, _F2 = 0x85EBCA6B, 0xC2B2AE35


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
    """Map 32-bit hashes to float64 ``u`` strictly inside (0, 1)."""
    u = (h.to(torch.float64) + 0.5) / 4294967296.0
    return u.clamp(min=2.0**-40, max=1.0 - 2.0**-40)
