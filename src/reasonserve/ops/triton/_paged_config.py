"""Launch settings of the paged-attention kernel: the invariant and the stock choice."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from reasonserve.ops.triton._config import on_gpu, sm_count

__all__ = ["PagedConfig", "invariant_config", "stock_config", "tile_capacity"]


@dataclass(frozen=True)
class PagedConfig:
    """Launch settings of :func:`paged_attention_triton`.

    ``block_m`` rows per tile (queries x grouped heads), ``block_n`` keys per step,
    ``split_tokens`` keys per split (a multiple of ``block_n``); ``split_kv``: ``None``
    lets the launcher choose the mode by occupancy (the bits never depend on it).
    """

    block_m: int
    block_n: int
    split_tokens: int
    num_warps: int = 4
    num_stages: int = 2
    split_kv: bool | None = None


def _rows(q: torch.Tensor, k_cache: torch.Tensor, block_m: int) -> int:
    group = q.shape[1] // k_cache.shape[1]
    return max(block_m, triton.next_power_of_2(group))


def invariant_config(q: torch.Tensor, k_cache: torch.Tensor) -> PagedConfig:
    """Fixed per device kind, dtype, head dim and group size: never per batch."""
    if not on_gpu(q):  # interpreter: small tiles and splits keep tests fast and multi-split
        return PagedConfig(_rows(q, k_cache, 16), 16, 32)
    if q.dtype == torch.float32 or q.shape[2] > 128:
        return PagedConfig(_rows(q, k_cache, 32), 32, 512, num_warps=4, num_stages=2)
    return PagedConfig(_rows(q, k_cache, 64), 64, 512, num_warps=4, num_stages=2)


def stock_config(
    q: torch.Tensor, k_cache: torch.Tensor, num_seqs: int, max_seq_len: int, max_query_len: int
) -> PagedConfig:
    """Tiles per query-length bucket and a split count for occupancy: fast, not invariant."""
    group = q.shape[1] // k_cache.shape[1]
    if not on_gpu(q):
        block_m, block_n, warps, stages = _rows(q, k_cache, 16), 16, 4, 2
    elif max_query_len * group <= 16:  # decode-like: few rows, many keys
        block_m, block_n, warps, stages = _rows(q, k_cache, 16), 64, 4, 3
    elif q.dtype == torch.float32 or q.shape[2] > 128:
        block_m, block_n, warps, stages = _rows(q, k_cache, 32), 32, 4, 2
    else:
        block_m, block_n, warps, stages = _rows(q, k_cache, 128), 64, 8, 2
    programs = tile_capacity(q.shape[0], num_seqs, block_m // group) * k_cache.shape[1]
    splits = max(1, min(triton.cdiv(2 * sm_count(q), programs), triton.cdiv(max_seq_len, block_n)))
    split_tokens = max(block_n, triton.cdiv(triton.cdiv(max_seq_len, splits), block_n) * block_n)
    return PagedConfig(block_m, block_n, split_tokens, warps, stages)


def tile_capacity(total_q: int, num_seqs: int, queries_per_tile: int) -> int:
    """Upper bound of the number of tiles, from host ints only."""
    return max(1, min(total_q, total_q // queries_per_tile + num_seqs))
