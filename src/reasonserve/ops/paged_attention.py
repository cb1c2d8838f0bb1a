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

* native (CPU, when the extension is built): the fixed-order kernel of
  ``csrc/`` reads the cache in place.
* torch reference: each sequence's visible prefix is gathered and run through
  :func:`reasonserve.ops.attention`'s reference path (same guarantee, slower).
"""

from __future__ import annotations

import torch

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError
from reasonserve.ops import _native_calls
from reasonserve.ops._checks import check_same, check_tensor
from reasonserve.ops._impl import resolve_impl
from reasonserve.ops.attention import attention, query_rows, resolve_scale

__all__ = ["paged_attention", "paged_attention_reference"]

_INT_DTYPES = (torch.int32, torch.int64)


def _check_ints(name: str, t: object, ndim: int) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.dtype not in _INT_DTYPES:
        raise InvalidTypeError(f"{name} must be an int32/int64 tensor")
    if t.dim() != ndim:
        raise InvalidArgumentError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    return t


def check_paged_args(q, k_cache, v_cache, block_tables, seq_lens, query_lens) -> None:
    """Raise a typed error naming the argument for any malformed input."""
    check_tensor("q", q, ndim=3)
    check_tensor("k_cache", k_cache, ndim=4)
    check_tensor("v_cache", v_cache, ndim=4)
    check_same(("q", "k_cache", "v_cache"), q, k_cache, v_cache)
    if k_cache.shape != v_cache.shape:
        raise InvalidArgumentError(
            f"k_cache and v_cache must have one shape, got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )
    num_blocks, hkv, block_size, d = k_cache.shape
    if block_size == 0:
        raise InvalidArgumentError("k_cache/v_cache must have block_size >= 1")
    if q.shape[2] != d:
        raise InvalidArgumentError(f"q's head dim {q.shape[2]} must equal the cache's D={d}")
    if hkv == 0 or q.shape[1] % hkv != 0:
        raise InvalidArgumentError(f"q heads ({q.shape[1]}) must be a multiple of cache heads ({hkv})")
    tables = _check_ints("block_tables", block_tables, 2)
    lens = _check_ints("seq_lens", seq_lens, 1)
    qlens = _check_ints("query_lens", query_lens, 1)
    b = tables.shape[0]
    if lens.shape[0] != b or qlens.shape[0] != b:
        raise InvalidArgumentError(
            f"seq_lens {tuple(lens.shape)} and query_lens {tuple(qlens.shape)} must both be [{b}] "
            f"(one entry per block_tables row)"
        )
    _check_lengths(lens.long(), qlens.long(), q.shape[0], tables.shape[1] * block_size)
    # the table entries a sequence reads: its first ceil(seq_len / block_size) ones
    columns = torch.arange(tables.shape[1], device=tables.device)[None, :]
    reads = columns < (lens.long()[:, None] + block_size - 1) // block_size
    bad = reads & ((tables < 0) | (tables >= num_blocks))
    if bool(bad.any()):
        seq = int(bad.nonzero()[0, 0])
        raise InvalidArgumentError(
            f"sequence {seq}: block_tables entries must lie in [0, {num_blocks}), got {tables[seq].tolist()}"
        )


def _check_lengths(lens: torch.Tensor, qlens: torch.Tensor, total_q: int, capacity: int) -> None:
    """0 <= query_lens <= seq_lens <= capacity, queries only with keys, sum(query_lens) == total_q."""
    if int(qlens.sum()) != total_q:
        raise InvalidArgumentError(f"sum(query_lens)={int(qlens.sum())} must equal q.shape[0]={total_q}")
    bad = (qlens < 0) | (qlens > lens) | (lens > capacity) | ((qlens > 0) & (lens == 0))
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise InvalidArgumentError(
            f"sequence {i}: need 0 <= query_lens ({int(qlens[i])}) <= seq_lens ({int(lens[i])}) <= "
            f"block_tables.shape[1] * block_size ({capacity}), and keys for any queries"
        )


def _gather(cache: torch.Tensor, table: torch.Tensor, n: int) -> torch.Tensor:
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
        k = _gather(k_cache, block_tables[i], n)[None]
        v = _gather(v_cache, block_tables[i], n)[None]
        qi = q[start : start + nq].transpose(0, 1)[None]  # [1, Hq, nq, D]
        res = attention(qi, k, v, causal=True, scale=scale, impl="torch")
        out[start : start + nq] = res[0].transpose(0, 1)
        start += nq
    return out


def paged_attention_reference(q, k_cache, v_cache, block_tables, seq_lens, query_lens, *, scale=None):
    """The torch reference of :func:`paged_attention`."""
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
) -> torch.Tensor:
    """Causal attention of packed queries over a paged KV cache (see the module doc).

    Parameters
    ----------
    q : Tensor ``[total_q, Hq, D]``
    k_cache, v_cache : Tensor ``[num_blocks, Hkv, block_size, D]``
    block_tables : int tensor ``[B, max_blocks]``
    seq_lens, query_lens : int tensors ``[B]``
    scale : defaults to ``1 / sqrt(D)``
    impl : ``"auto"`` | ``"torch"`` | ``"native"`` (``"auto"`` is native on CPU when built)

    Returns
    -------
    Tensor ``[total_q, Hq, D]`` of ``q``'s dtype.
    """
    check_paged_args(q, k_cache, v_cache, block_tables, seq_lens, query_lens)
    scale = resolve_scale(scale, q.shape[-1])
    if q.numel() == 0:
        return q.new_zeros(q.shape)
    if impl == "triton":
        raise InvalidArgumentError("paged_attention has no Triton kernel; use 'auto', 'native' or 'torch'")
    if resolve_impl(impl, q) == "native":
        row_seq, row_keys = query_rows(seq_lens, query_lens)
        out = _native_calls.paged(q, k_cache, v_cache, block_tables, row_seq, row_keys, float(scale))
        return out.to(q.dtype)
    return _reference(q, k_cache, v_cache, block_tables, seq_lens, query_lens, float(scale))
