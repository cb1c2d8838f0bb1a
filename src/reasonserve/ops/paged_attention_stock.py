"""The fast paged attention: same layout and meaning as ``ops.paged_attention``, NOT
batch-invariant.

A query row's bits may depend on the batch: its tile shape follows the call's longest
query run and the keys are split into a number of pieces chosen from the batch size and
``max_seq_len`` for occupancy (flash-decoding). Values agree with
:func:`reasonserve.ops.paged_attention` within the attention tolerances; use that op
where bits must not depend on the batch (verify passes, deterministic requests).

* ``impl="auto"``: CPU -> the invariant native kernel (it measured faster there than
  SDPA over gathered blocks, ``docs/benchmarks.md``); CUDA -> the Triton varlen kernel
  (``ops/triton/paged_attention.py`` with its stock configuration), or the torch path
  when Triton is missing.
* ``impl="torch"``: per-sequence ``F.scaled_dot_product_attention`` over the sequence's
  gathered blocks (syncs to read the lengths: a fallback, never graph-captured).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.ops._impl import resolve_impl
from reasonserve.ops._paged_checks import check_paged_shapes, check_paged_values, paged_capacities
from reasonserve.ops.attention import resolve_scale
from reasonserve.ops.paged_attention import gather_blocks, paged_attention

__all__ = ["paged_attention_stock"]

_IMPLS = ("auto", "torch", "triton")


def _sdpa_sequence(q, k, v, scale: float) -> torch.Tensor:
    """``q [nq, Hq, D]`` over ``k``/``v`` ``[Hkv, n, D]``, bottom-right causal."""
    nq, n = q.shape[0], k.shape[1]
    mask = torch.ones(nq, n, dtype=torch.bool, device=q.device).tril(n - nq)
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None], k[None], v[None], attn_mask=mask, scale=scale, enable_gqa=True
    )
    return out[0].transpose(0, 1)


def _torch_stock(q, k_cache, v_cache, block_tables, seq_lens, query_lens, scale: float) -> torch.Tensor:
    out = torch.zeros_like(q)
    start = 0
    for i, (n, nq) in enumerate(zip(seq_lens.tolist(), query_lens.tolist(), strict=True)):
        if nq:
            k, v = gather_blocks(k_cache, block_tables[i], n), gather_blocks(v_cache, block_tables[i], n)
            out[start : start + nq] = _sdpa_sequence(q[start : start + nq], k, v, scale)
        start += nq
    return out


def paged_attention_stock(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_lens: torch.Tensor,
    *,
    scale: float | None = None,
    max_seq_len: int | None = None,
    max_query_len: int | None = None,
    check: bool = True,
    impl: str = "auto",
) -> torch.Tensor:
    """Causal paged attention, fast path (not batch-invariant; see the module doc).

    Arguments, shapes, errors and the CUDA-graph contract (``max_seq_len``,
    ``max_query_len``, ``check=False``) are those of :func:`ops.paged_attention`, except
    that here ``max_query_len`` also picks the tiles: pass ``1`` for decode batches.
    ``impl``: ``"auto"`` | ``"torch"`` | ``"triton"``.

    Returns
    -------
    Tensor ``[total_q, Hq, D]`` of ``q``'s dtype.
    """
    if impl not in _IMPLS:
        raise InvalidArgumentError(f"impl must be one of {_IMPLS}, got {impl!r}")
    check_paged_shapes(q, k_cache, v_cache, block_tables, seq_lens, query_lens)
    seq_cap, query_cap = paged_capacities(q, k_cache, block_tables, max_seq_len, max_query_len)
    if impl == "auto" and q.device.type == "cpu":
        return paged_attention(q, k_cache, v_cache, block_tables, seq_lens, query_lens, scale=scale,
                               max_seq_len=seq_cap, max_query_len=query_cap, check=check)  # fmt: skip
    if check:
        check_paged_values(q, k_cache, block_tables, seq_lens, query_lens, seq_cap, query_cap)
    scale = resolve_scale(scale, q.shape[-1])
    if q.numel() == 0:
        return q.new_zeros(q.shape)
    if resolve_impl(impl, q) == "triton":
        from reasonserve.ops.triton.paged_attention import paged_attention_triton, stock_config

        config = stock_config(q, k_cache, block_tables.shape[0], seq_cap, query_cap)
        return paged_attention_triton(q, k_cache, v_cache, block_tables, seq_lens, query_lens, scale,
                                      seq_cap, config)  # fmt: skip
    return _torch_stock(q, k_cache, v_cache, block_tables, seq_lens, query_lens, scale)
