"""Batch-invariant attention that reads K/V through block tables (the engine's paged cache).

Layout (vLLM-style varlen, one layer):

* ``q [total_q, Hq, D]`` — the queries of all sequences packed in order; sequence ``b``
  owns ``query_lens[b]`` consecutive rows.
* ``k_cache``/``v_cache`` ``[num_blocks, Hkv, block_size, D]``; sequence ``b``'s key
  ``j`` lives in block ``block_tables[b, j // block_size]`` at offset ``j % block_size``.
* ``seq_lens[b]`` keys per sequence, this step's queries included (already written);
  query ``i`` of sequence ``b`` sits at position ``seq_lens[b] - query_lens[b] + i`` and
  sees keys ``0 .. position`` (causal).

Guarantee: bitwise batch-invariant and run-to-run deterministic. A query row's result
depends only on its own ``q`` row, the keys/values it can see and its position — not on
the other sequences, on how many queries of its own sequence run in the same call
(prefill, chunked prefill and decode give the same bits), on the block numbers, or on
table entries past its own blocks.

Each implementation has its own bits (all invariant): the guarantee is per
implementation, device kind and library versions.

* native (CPU, when the extension is built): the fixed-order kernel of
  ``csrc/`` reads the cache in place.
* Triton (CUDA; CPU under ``TRITON_INTERPRET=1``): ``ops/triton/paged_attention.py`` with
  its invariant configuration — keys cut into splits of a fixed size (not a fixed
  count), one partial softmax per split, partials folded in split order.
* torch reference: each sequence's visible prefix is gathered and run through
  :func:`reasonserve.ops.attention`'s reference path (same guarantee, slower).

CUDA-graph contract (Triton path): with ``check=False`` and host ints ``max_seq_len`` /
``max_query_len``, a call makes no host sync, allocates only from host-known sizes and
launches a grid derived from them; programs past a sequence's length exit early, so a
graph captured once is valid for any batch whose lengths stay within those bounds.
``check=True`` (the default) validates lengths and table entries first (one sync).

Keys in a sequence's length must be finite: a query's later keys within the same
step are masked with weight exactly 0, and ``0 * inf`` would be NaN.
:func:`reasonserve.ops.paged_attention_stock` is the fast, not invariant, variant.
"""

from __future__ import annotations

import torch

from reasonserve.ops import _native_calls
from reasonserve.ops._impl import resolve_impl
from reasonserve.ops._paged_checks import check_paged_shapes, check_paged_values, paged_capacities
from reasonserve.ops.attention import attention, query_rows, resolve_scale

__all__ = ["gather_blocks", "paged_attention", "paged_attention_reference"]


def gather_blocks(cache: torch.Tensor, table: torch.Tensor, n: int) -> torch.Tensor:
    """``[Hkv, n, D]``: a sequence's first ``n`` keys (or values), contiguous."""
    block_size = cache.shape[2]
    blocks = cache[table[: -(-n // block_size)].long()]  # [nb, Hkv, bs, D]
    return blocks.permute(1, 0, 2, 3).reshape(cache.shape[1], -1, cache.shape[3])[:, :n]


def _reference(q, k_cache, v_cache, block_tables, seq_lens, query_lens, scale: float) -> torch.Tensor:
    out = q.new_empty(q.shape)
    start = 0
    for i, (n, nq) in enumerate(zip(seq_lens.tolist(), query_lens.tolist(), strict=True)):
        if nq == 0:
            continue
        k = gather_blocks(k_cache, block_tables[i], n)[None]
        v = gather_blocks(v_cache, block_tables[i], n)[None]
        qi = q[start : start + nq].transpose(0, 1)[None]  # [1, Hq, nq, D]
        res = attention(qi, k, v, causal=True, scale=scale, impl="torch")
        out[start : start + nq] = res[0].transpose(0, 1)
        start += nq
    return out


def paged_attention_reference(q, k_cache, v_cache, block_tables, seq_lens, query_lens, *, scale=None):
    """The torch reference of :func:`paged_attention` (defines its meaning)."""
    return paged_attention(q, k_cache, v_cache, block_tables, seq_lens, query_lens, scale=scale, impl="torch")


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_lens: torch.Tensor,
    *,
    scale: float | None = None,
    impl: str = "auto",
    max_seq_len: int | None = None,
    max_query_len: int | None = None,
    check: bool = True,
) -> torch.Tensor:
    """Causal attention of packed queries over a paged KV cache, batch-invariant.

    Parameters
    ----------
    q : Tensor ``[total_q, Hq, D]``
    k_cache, v_cache : Tensor ``[num_blocks, Hkv, block_size, D]``
    block_tables : int tensor ``[B, max_blocks]`` (on ``q``'s device)
    seq_lens, query_lens : int tensors ``[B]`` (on ``q``'s device)
    scale : defaults to ``1 / sqrt(D)``
    impl : ``"auto"`` | ``"torch"`` | ``"native"`` | ``"triton"`` (``"auto"``: native on
        CPU when built, Triton on CUDA)
    max_seq_len, max_query_len : host-side upper bounds of ``seq_lens`` / ``query_lens``
        (default: ``block_tables.shape[1] * block_size`` and ``q.shape[0]``). They size
        the launch grid and workspace only, never the bits; fix them to capture one
        CUDA graph that is valid for every batch within them.
    check : validate lengths and table entries (one device sync). With ``False`` only
        the host-side checks run; the caller promises valid values (a broken promise
        gives wrong values for that call, never an out-of-bounds access).

    Returns
    -------
    Tensor ``[total_q, Hq, D]`` of ``q``'s dtype.
    """
    check_paged_shapes(q, k_cache, v_cache, block_tables, seq_lens, query_lens)
    seq_cap, query_cap = paged_capacities(q, k_cache, block_tables, max_seq_len, max_query_len)
    if check:
        check_paged_values(q, k_cache, block_tables, seq_lens, query_lens, seq_cap, query_cap)
    scale = resolve_scale(scale, q.shape[-1])
    if q.numel() == 0:
        return q.new_zeros(q.shape)
    which = resolve_impl(impl, q)
    if which == "triton":
        from reasonserve.ops.triton.paged_attention import invariant_config, paged_attention_triton

        config = invariant_config(q, k_cache)
        return paged_attention_triton(q, k_cache, v_cache, block_tables, seq_lens, query_lens, scale,
                                      seq_cap, config)  # fmt: skip
    if which == "native":
        row_seq, row_keys = query_rows(seq_lens, query_lens)
        out = _native_calls.paged(q, k_cache, v_cache, block_tables, row_seq, row_keys, float(scale))
        return out.to(q.dtype)
    return _reference(q, k_cache, v_cache, block_tables, seq_lens, query_lens, float(scale))
