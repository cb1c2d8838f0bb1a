"""The two sets of kernels a forward pass can use.

* ``INVARIANT`` — ``reasonserve.ops``: batch-invariant (and, for attention, invariant to
  how many queries run together). Used for prefill of deterministic requests, verify
  passes, and every step of the all-batch-invariant mode. Paged attention is
  ``ops.paged_attention``, reading the cache in place through block tables.
* ``STOCK`` — plain torch (``F.linear`` on fused q/k/v and gate/up weights, the residual
  add fused with the next rms_norm, stock reductions) and ``ops.paged_attention_stock``:
  faster, but a row's bits may depend on the batch. The fast path of
  decode-verify-rollback.

Both sets compute the same maths (the Llama/Qwen2 reference code's); they differ in
summation order and rounding details only, so decode-verify-rollback rolls back only
where those flip a token.
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

    ``slot_blocks``/``slot_offsets`` ``[total_q]``: where each query row's new K/V goes.
    ``max_seq_len``/``max_query_len``: host-side bounds of ``seq_lens``/``query_lens``
    (the stock kernel sizes its grid with them, so it never reads them back from the
    device; a CUDA graph fixes them at capture)."""

    block_tables: torch.Tensor  # int32 [B, max_blocks]
    seq_lens: torch.Tensor  # int32 [B]
    query_lens: torch.Tensor  # int32 [B]
    slot_blocks: torch.Tensor  # int64 [total_q] (int32 works too: indexing casts it)
    slot_offsets: torch.Tensor  # int64 [total_q]
    max_seq_len: int
    max_query_len: int


@dataclass(frozen=True)
class Kernels:
    name: str
    linear: Callable
    rms_norm: Callable  # (x [N, H], w [H], eps) -> [N, H]
    add_rms_norm: Callable  # (h [N, H], delta [N, H], w, eps) -> (h + delta, rms_norm(h + delta))
    attention: Callable  # (q [Hq, S, D], k [Hkv, T, D], v) -> [Hq, S, D], bottom-right causal
    silu: Callable
    paged_attention: Callable  # (q [N, Hq, D], k_cache [blocks, Hkv, bs, D], v_cache, PagedMeta) -> same as q
    fused: bool = False  # concatenated q/k/v and gate/up projections (changes bits: stock only)


def _stock_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    if x.is_cuda:  # torch's fused rms_norm kernel (on CPU the decomposed form below is faster)
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _stock_add_rms_norm(h: torch.Tensor, delta: torch.Tensor, w: torch.Tensor, eps: float):
    """The residual add and the next norm as one step of the forward (the norm reads the
    rounded sum the residual stream keeps, as in the Llama/Qwen2 reference code)."""
    h = h + delta
    return h, _stock_rms_norm(h, w, eps)


def _invariant_add_rms_norm(h: torch.Tensor, delta: torch.Tensor, w: torch.Tensor, eps: float):
    normed, h = ops.add_rms_norm(delta, h, w, eps)  # one kernel on CUDA; the bits of add, then rms_norm
    return h, normed


def _stock_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    s, t = q.shape[1], k.shape[1]
    rep = q.shape[0] // k.shape[0]
    mask = torch.ones(s, t, dtype=torch.bool, device=q.device).tril(t - s)
    k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
    return F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask)[0]


def _invariant_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return ops.attention(q[None], k[None], v[None], causal=True)[0]


# Both paged ops get the host-side bounds and check=False: the engine checked every index on
# the host (step_inputs.pack), and a device-side check would sync (and break graph capture).
def _invariant_paged(q, k_cache, v_cache, meta: PagedMeta) -> torch.Tensor:
    return ops.paged_attention(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, meta.query_lens,
                               max_seq_len=meta.max_seq_len, max_query_len=meta.max_query_len,
                               check=False)  # fmt: skip


def _stock_paged(q, k_cache, v_cache, meta: PagedMeta) -> torch.Tensor:
    return ops.paged_attention_stock(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, meta.query_lens,
                                     max_seq_len=meta.max_seq_len, max_query_len=meta.max_query_len,
                                     check=False)  # fmt: skip


INVARIANT = Kernels(
    "invariant", ops.linear, ops.rms_norm, _invariant_add_rms_norm, _invariant_attention, ops.silu,
    _invariant_paged,
)  # fmt: skip
STOCK = Kernels(
    "stock", F.linear, _stock_rms_norm, _stock_add_rms_norm, _stock_attention, F.silu, _stock_paged,
    fused=True,
)  # fmt: skip
