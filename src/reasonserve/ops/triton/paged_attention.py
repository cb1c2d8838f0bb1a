"""Varlen paged attention in Triton: prefill, chunked prefill and decode in one kernel.

A program owns one *tile*: up to ``BLOCK_M // GROUP`` consecutive queries of one
sequence times the ``GROUP`` query heads that share one KV head (grouped-query rows
packed into the M dimension of ``tl.dot``). Keys are cut into *splits* of
``split_tokens`` keys starting at key 0; inside a split the program walks ``BLOCK_N``
keys at a time with an online softmax from a fresh state, giving one partial
``(max, sum, acc)`` per split. Partials are folded in split order by :func:`_fold`
(explicit ``fma``, so no compiler contraction choice can differ between kernels), then
divided once. Two launch modes give the same bits:

* single pass (``write_out``): the program folds all of its tile's splits itself;
* split-KV (flash-decoding): one program per split stores its raw partial, and
  :func:`_combine_kernel` folds them in the same order with the same ``_fold``.

Invariance (the ``invariant_config``): ``split_tokens`` and the tiles are fixed per
device kind, dtype, head dim and group size — never per batch — so a query row's
arithmetic depends only on its ``q`` row, the keys it sees and its position. Keys past a
row's position inside a step it shares with later rows contribute exact zeros (masked
score ``-inf`` -> weight 0, rescale factor exactly 1), which is why prefill, chunked
prefill and decode agree. Sequences are found by binary search over per-sequence tile
offsets, so the grid comes from host capacities and any batch within them is valid
(CUDA-graph safe). Table entries, rows and splits are clamped before any load, and
sequence lengths to ``max_seq_len``, so lengths that break ``check=False``'s promise
neither reach outside a tensor nor make a program walk past the capacity.

The stock configuration (``stock_config`` in ``_paged_config``) runs the same kernel
with tiles per query-length bucket and a split count chosen for occupancy: faster, not
invariant.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reasonserve.ops.triton._config import dot_precision, on_gpu, sm_count
from reasonserve.ops.triton._paged_config import PagedConfig, invariant_config, stock_config, tile_capacity

__all__ = ["PagedConfig", "invariant_config", "paged_attention_triton", "stock_config"]

# Workspace of the split-KV mode above which the single-pass mode runs instead.
_MAX_WORKSPACE_BYTES = 512 << 20


@triton.jit
def _find(cu_ptr, count, x):
    """Largest ``i < count`` with ``cu[i] <= x`` (``cu`` ascending, ``cu[0] = 0``)."""
    lo = 0
    hi = count
    while hi - lo > 1:
        mid = (lo + hi) // 2
        go_right = tl.load(cu_ptr + mid) <= x
        lo = tl.where(go_right, mid, lo)
        hi = tl.where(go_right, hi, mid)
    return lo


@triton.jit
def _fold(run_m, run_den, run_acc, m, den, acc):
    """Fold a partial ``(max, den, acc)`` into the running state; exact when either is empty."""
    new_m = tl.maximum(run_m, m)
    safe_m = tl.where(new_m == float("-inf"), 0.0, new_m)
    a = tl.where(run_m == new_m, 1.0, tl.exp(run_m - safe_m))
    b = tl.where(m == new_m, 1.0, tl.exp(m - safe_m))
    new_den = tl.fma(run_den, a, den * b)
    new_acc = tl.fma(run_acc, a[:, None], acc * b[:, None])
    return new_m, new_den, new_acc


@triton.jit
def _split(
    q, k_ptr, v_ptr, table_row, table_width, num_blocks, kv_head, k_begin, k_end, row_keys, scale,
    sk0, sk1, sk2, sk3, sv0, sv1, sv2, sv3,
    BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    HEAD_DIM: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """Online softmax of the tile over keys ``[k_begin, k_end)`` from a fresh state."""
    rd = tl.arange(0, BLOCK_D)
    m = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    den = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for start in range(k_begin, k_end, BLOCK_N):
        kn = start + tl.arange(0, BLOCK_N)
        live = kn < k_end
        column = tl.minimum(kn // BLOCK_SIZE, table_width - 1)
        block = tl.load(table_row + column, mask=live, other=0)
        block = tl.minimum(tl.maximum(block, 0), num_blocks - 1).to(tl.int64)
        slot = kn % BLOCK_SIZE
        k = tl.load(
            k_ptr + block[None, :] * sk0 + kv_head * sk1 + slot[None, :] * sk2 + rd[:, None] * sk3,
            mask=live[None, :] & (rd[:, None] < HEAD_DIM), other=0.0,
        )
        s = tl.dot(q, k, input_precision=PRECISION) * scale
        s = tl.where(kn[None, :] < row_keys[:, None], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.where(m == m_new, 1.0, tl.exp(m - m_safe))
        p = tl.exp(s - m_safe[:, None])
        den = den * alpha + tl.sum(p, axis=1)
        v = tl.load(
            v_ptr + block[:, None] * sv0 + kv_head * sv1 + slot[:, None] * sv2 + rd[None, :] * sv3,
            mask=live[:, None] & (rd[None, :] < HEAD_DIM), other=0.0,
        )
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m = m_new
    return m, den, acc


_VARYING = ["num_seqs", "total_q", "table_width", "max_seq_len", "split_tokens", "group_splits", "write_out"]


@triton.jit(do_not_specialize=_VARYING)
def _paged_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, tables_ptr, lens_ptr, qlens_ptr, cu_q_ptr, cu_tiles_ptr,
    ws_acc_ptr, ws_ml_ptr, num_seqs, total_q, table_width, num_blocks, scale, max_seq_len,
    split_tokens, group_splits, write_out,
    sq0, sq1, sq2, sk0, sk1, sk2, sk3, sv0, sv1, sv2, sv3, so0, so1, so2, st0,
    swa0, swa1, swa2, swm0, swm1, swm2,
    GROUP: tl.constexpr, QUERIES: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, HEAD_DIM: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """One tile (``QUERIES`` queries x ``GROUP`` heads) over its splits ``[first, first + group_splits)``."""
    tile = tl.program_id(0)
    kv_head = tl.program_id(1)
    if tile >= tl.load(cu_tiles_ptr + num_seqs):
        return
    seq = _find(cu_tiles_ptr, num_seqs, tile)
    q0 = (tile - tl.load(cu_tiles_ptr + seq)) * QUERIES
    qlen = tl.load(qlens_ptr + seq)
    # At most the host capacity (a no-op for valid lengths): a program never walks more
    # keys than max_seq_len, whatever seq_lens holds (tile_keys <= this, mod 2**32).
    seq_len = tl.minimum(tl.load(lens_ptr + seq), max_seq_len)
    context = seq_len - qlen  # keys before the first query
    tile_keys = context + tl.minimum(q0 + QUERIES, qlen)
    num_splits = tl.cdiv(tile_keys, split_tokens)
    first = tl.program_id(2) * group_splits
    if first >= num_splits:
        return
    r = tl.arange(0, BLOCK_M)
    rd = tl.arange(0, BLOCK_D)
    q_index = q0 + r // GROUP
    row = tl.load(cu_q_ptr + seq) + q_index
    row_ok = (r < QUERIES * GROUP) & (q_index >= 0) & (q_index < qlen) & (row >= 0) & (row < total_q)
    head = kv_head * GROUP + r % GROUP
    row_keys = tl.where(row_ok, context + q_index + 1, 0)
    row64 = tl.where(row_ok, row, 0).to(tl.int64)
    q = tl.load(
        q_ptr + row64[:, None] * sq0 + head[:, None] * sq1 + rd[None, :] * sq2,
        mask=row_ok[:, None] & (rd[None, :] < HEAD_DIM), other=0.0,
    )
    table_row = tables_ptr + seq.to(tl.int64) * st0
    run_m = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    run_den = tl.zeros((BLOCK_M,), dtype=tl.float32)
    run_acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for j in range(first, tl.minimum(first + group_splits, num_splits)):
        m, den, acc = _split(
            q, k_ptr, v_ptr, table_row, table_width, num_blocks, kv_head, j * split_tokens,
            tl.minimum((j + 1) * split_tokens, tile_keys), row_keys, scale,
            sk0, sk1, sk2, sk3, sv0, sv1, sv2, sv3,
            BLOCK_SIZE, BLOCK_M, BLOCK_N, BLOCK_D, HEAD_DIM, PRECISION,
        )  # fmt: skip
        run_m, run_den, run_acc = _fold(run_m, run_den, run_acc, m, den, acc)
    out_mask = row_ok[:, None] & (rd[None, :] < HEAD_DIM)
    if write_out:
        out = run_acc / tl.where(run_den > 0, run_den, 1.0)[:, None]
        o = o_ptr + row64[:, None] * so0 + head[:, None] * so1 + rd[None, :] * so2
        tl.store(o, out.to(o_ptr.dtype.element_ty), mask=out_mask)
    else:  # group_splits == 1: the state is the split's raw partial
        base = row64 * swa0 + head * swa1 + tl.program_id(2) * swa2
        tl.store(ws_acc_ptr + base[:, None] + rd[None, :], run_acc, mask=out_mask)
        ml = ws_ml_ptr + row64 * swm0 + head * swm1 + tl.program_id(2) * swm2
        tl.store(ml, run_m, mask=row_ok)
        tl.store(ml + 1, run_den, mask=row_ok)


@triton.jit(do_not_specialize=["num_seqs", "split_tokens", "num_groups"])
def _combine_kernel(
    o_ptr, lens_ptr, qlens_ptr, cu_q_ptr, ws_acc_ptr, ws_ml_ptr, num_seqs, split_tokens, num_groups,
    so0, so1, so2, swa0, swa1, swa2, swm0, swm1, swm2,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_D: tl.constexpr, HEAD_DIM: tl.constexpr,
):  # fmt: skip
    """Fold one query row's split partials in split order (``_fold``), then divide."""
    row = tl.program_id(0)
    seq = _find(cu_q_ptr, num_seqs, row)
    position = tl.load(lens_ptr + seq) - tl.load(qlens_ptr + seq) + row - tl.load(cu_q_ptr + seq)
    num_splits = tl.minimum(tl.cdiv(position + 1, split_tokens), num_groups)
    g = tl.arange(0, GROUP_PAD)
    rd = tl.arange(0, BLOCK_D)
    head = tl.program_id(1) * GROUP + g
    ok = g < GROUP
    row64 = row.to(tl.int64)
    run_m = tl.full((GROUP_PAD,), float("-inf"), dtype=tl.float32)
    run_den = tl.zeros((GROUP_PAD,), dtype=tl.float32)
    run_acc = tl.zeros((GROUP_PAD, BLOCK_D), dtype=tl.float32)
    mask = ok[:, None] & (rd[None, :] < HEAD_DIM)
    for j in range(0, num_splits):
        ml = ws_ml_ptr + row64 * swm0 + head * swm1 + j * swm2
        m = tl.load(ml, mask=ok, other=float("-inf"))
        den = tl.load(ml + 1, mask=ok, other=0.0)
        base = row64 * swa0 + head * swa1 + j * swa2
        acc = tl.load(ws_acc_ptr + base[:, None] + rd[None, :], mask=mask, other=0.0)
        run_m, run_den, run_acc = _fold(run_m, run_den, run_acc, m, den, acc)
    out = run_acc / tl.where(run_den > 0, run_den, 1.0)[:, None]
    o = o_ptr + row64 * so0 + head[:, None] * so1 + rd[None, :] * so2
    tl.store(o, out.to(o_ptr.dtype.element_ty), mask=mask)


def _offsets(counts: torch.Tensor) -> torch.Tensor:
    """``[B + 1]`` int32 exclusive prefix sums of ``counts`` (on the device, no sync)."""
    return torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0, dtype=torch.int32)])


def _split_kv(config: PagedConfig, q: torch.Tensor, programs: int, max_splits: int) -> bool:
    if config.split_kv is not None:
        return config.split_kv
    workspace = q.shape[0] * q.shape[1] * (q.shape[2] + 2) * 4 * max_splits
    return max_splits > 1 and programs < 2 * sm_count(q) and workspace <= _MAX_WORKSPACE_BYTES


def paged_attention_triton(
    q, k_cache, v_cache, block_tables, seq_lens, query_lens, scale: float, max_seq_len: int,
    config: PagedConfig,
) -> torch.Tensor:
    """``q [total_q, Hq, D]`` over the paged cache -> ``[total_q, Hq, D]`` (see the module doc)."""
    total_q, hq, d = q.shape
    num_seqs, hkv, group = block_tables.shape[0], k_cache.shape[1], hq // k_cache.shape[1]
    if min(num_seqs, block_tables.shape[1], k_cache.shape[0]) == 0:  # no key anywhere: invalid queries
        return torch.zeros_like(q)
    qlens, tables = query_lens.to(torch.int32), block_tables.contiguous()
    queries = config.block_m // group
    cu_q, cu_tiles = _offsets(qlens), _offsets((qlens + queries - 1) // queries)
    tiles = tile_capacity(total_q, num_seqs, queries)
    max_splits = max(1, triton.cdiv(max_seq_len, config.split_tokens))
    split = _split_kv(config, q, tiles * hkv, max_splits)
    groups = max_splits if split else 1
    ws_acc = q.new_empty((total_q, hq, groups, d) if split else (1, 1, 1, 1), dtype=torch.float32)
    ws_ml = q.new_empty((total_q, hq, groups, 2) if split else (1, 1, 1, 2), dtype=torch.float32)
    out = torch.empty_like(q)
    lens = seq_lens.to(torch.int32)
    block_d = max(16, triton.next_power_of_2(d))
    _paged_kernel[(tiles, hkv, groups)](
        q, k_cache, v_cache, out, tables, lens, qlens, cu_q, cu_tiles, ws_acc, ws_ml,
        num_seqs, total_q, tables.shape[1], k_cache.shape[0], scale, max_seq_len, config.split_tokens,
        1 if split else 1 << 30, 0 if split else 1,
        *q.stride(), *k_cache.stride(), *v_cache.stride(), *out.stride(), tables.stride(0),
        *ws_acc.stride()[:3], *ws_ml.stride()[:3],
        GROUP=group, QUERIES=queries, BLOCK_SIZE=k_cache.shape[2], BLOCK_M=config.block_m,
        BLOCK_N=config.block_n, BLOCK_D=block_d, HEAD_DIM=d, PRECISION=dot_precision(q.dtype),
        **_launch(config, q),
    )  # fmt: skip
    if split:
        _combine_kernel[(total_q, hkv)](
            out, lens, qlens, cu_q, ws_acc, ws_ml, num_seqs, config.split_tokens, groups,
            *out.stride(), *ws_acc.stride()[:3], *ws_ml.stride()[:3],
            GROUP=group, GROUP_PAD=triton.next_power_of_2(group), BLOCK_D=block_d, HEAD_DIM=d,
        )  # fmt: skip
    return out


def _launch(config: PagedConfig, q: torch.Tensor) -> dict:
    return {"num_warps": config.num_warps, "num_stages": config.num_stages} if on_gpu(q) else {}
