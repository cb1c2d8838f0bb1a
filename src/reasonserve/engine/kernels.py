"""The two sets of kernels a forward pass can use.

* ``INVARIANT`` — ``reasonserve.ops``: batch-invariant (and, for attention, invariant to
  how many queries run together). Used for prefill, verify passes, and every step of
  the all-batch-invariant mode.
* ``STOCK`` — plain torch (``F.linear``, SDPA, stock reductions): faster, but a row's
  bits may depend on the batch. The fast path of decode-verify-rollback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from reasonserve import ops

__all__ = ["INVARIANT", "STOCK", "Kernels"]


@dataclass(frozen=True)
class Kernels:
    name: str
    linear: Callable
    rms_norm: Callable
    attention: Callable  # (q [Hq, S, D], k [Hkv, T, D], v) -> [Hq, S, D], bottom-right causal
    silu: Callable


def _stock_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _stock_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    s, t = q.shape[1], k.shape[1]
    rep = q.shape[0] // k.shape[0]
    mask = torch.ones(s, t, dtype=torch.bool, device=q.device).tril(t - s)
    k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
    return F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask)[0]


def _invariant_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return ops.attention(q[None], k[None], v[None], causal=True)[0]


INVARIANT = Kernels("invariant", ops.linear, ops.rms_norm, _invariant_attention, ops.silu)
STOCK = Kernels("stock", F.linear, _stock_rms_norm, _stock_attention, F.silu)
