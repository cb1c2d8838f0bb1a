"""The two sets of kernels a forward pass can use.

* ``INVARIANT`` — ``reasonserve.ops``: batch-invariant (and, for attention, invariant to
  how many queries run together). Used for prefill, verify passes, and every step of
  the all-batch-invariant mode. Paged attention is ``ops.paged_attention``, reading the
  cache in place through block tables.
* ``STOCK`` — plain torch (``F.linear`` on fused q/k/v and gate/up weights, stock
  reductions): faster, but a row's bits may depend on the batch. The fast path of
  decode-verify-rollback. Paged attention is the same op as ``INVARIANT`` (on CPU it
  was faster than SDPA over a padded gather of the batch's blocks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from reasonserve import ops

__all__ = ["INVARIANT", "STOCK", "Kernels", "PagedMeta"]


@dataclass(frozen=True)
class PagedMeta:
    """Where a packed batch reads and writes the paged cache (see ``ops.paged_attention``).

    ``slot_blocks``/``slot_offsets`` ``[total_q]``: where each query row's new K/V goes."""

    block_tables: torch.Tensor  # int32 [B, max_blocks]
    seq_lens: torch.Tensor  # int32 [B]
    query_lens: torch.Tensor  # int32 [B]
    slot_blocks: torch.Tensor  # int64 [total_q]
    slot_offsets: torch.Tensor  # int64 [total_q]


@dataclass(frozen=True)
class Kernels:
    name: str
    linear: Callable
    rms_norm: Callable
    attention: Callable  # (q [Hq, S, D], k [Hkv, T, D], v) -> [Hq, S, D], bottom-right causal
    silu: Callable
    paged_attention: Callable  # (q [N, Hq, D], k_cache [blocks, Hkv, bs, D], v_cache, PagedMeta) -> same as q
    fused: bool = False  # concatenated q/k/v and gate/up projections (changes bits: stock only)


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


def _invariant_paged(q, k_cache, v_cache, meta: PagedMeta) -> torch.Tensor:
    return ops.paged_attention(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, meta.query_lens)


INVARIANT = Kernels("invariant", ops.linear, ops.rms_norm, _invariant_attention, ops.silu, _invariant_paged)
# The stock set reads the paged cache with the same op: measured faster on CPU than one SDPA
# call over a padded gather of the batch's blocks (docs/benchmarks.md).
STOCK = Kernels("stock", F.linear, _stock_rms_norm, _stock_attention, F.silu, _invariant_paged, fused=True)
