"""Argument checks of the paged-attention ops, in two tiers.

* :func:`check_paged_shapes` reads only host metadata (types, dtypes, ranks, shapes,
  devices): no device sync, cheap enough for every call, CUDA-graph safe.
* :func:`check_paged_values` reads the lengths and the block tables (one device sync):
  ``check=True`` runs it; an engine that validated its tables on the host turns it off.

Each raises a typed error naming the argument.
"""

from __future__ import annotations

import torch

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError
from reasonserve.ops._checks import check_same, check_tensor

_INT_DTYPES = (torch.int32, torch.int64)


def _check_ints(name: str, t: object, ndim: int, device: torch.device) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.dtype not in _INT_DTYPES:
        raise InvalidTypeError(f"{name} must be an int32/int64 tensor")
    if t.dim() != ndim:
        raise InvalidArgumentError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    if t.device != device:
        raise InvalidTypeError(f"{name} is on {t.device} but q is on {device}; put them on one device")
    return t


def check_paged_shapes(q, k_cache, v_cache, block_tables, seq_lens, query_lens) -> None:
    """Types, dtypes, ranks, shapes and devices (no device sync)."""
    check_tensor("q", q, ndim=3)
    check_tensor("k_cache", k_cache, ndim=4)
    check_tensor("v_cache", v_cache, ndim=4)
    check_same(("q", "k_cache", "v_cache"), q, k_cache, v_cache)
    if k_cache.shape != v_cache.shape:
        raise InvalidArgumentError(
            f"k_cache and v_cache must have one shape, got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )
    _, hkv, block_size, d = k_cache.shape
    if block_size == 0:
        raise InvalidArgumentError("k_cache/v_cache must have block_size >= 1")
    if q.shape[2] != d:
        raise InvalidArgumentError(f"q's head dim {q.shape[2]} must equal the cache's D={d}")
    if hkv == 0 or q.shape[1] % hkv != 0:
        raise InvalidArgumentError(f"q heads ({q.shape[1]}) must be a multiple of cache heads ({hkv})")
    tables = _check_ints("block_tables", block_tables, 2, q.device)
    lens = _check_ints("seq_lens", seq_lens, 1, q.device)
    qlens = _check_ints("query_lens", query_lens, 1, q.device)
    b = tables.shape[0]
    if lens.shape[0] != b or qlens.shape[0] != b:
        raise InvalidArgumentError(
            f"seq_lens {tuple(lens.shape)} and query_lens {tuple(qlens.shape)} must both be [{b}] "
            f"(one entry per block_tables row)"
        )


def paged_capacities(
    q: torch.Tensor, k_cache: torch.Tensor, block_tables: torch.Tensor, max_seq_len, max_query_len
) -> tuple[int, int]:
    """Host-side upper bounds of ``seq_lens`` and ``query_lens`` (no device sync).

    ``None`` means the bound the shapes already give: ``block_tables.shape[1] *
    block_size`` keys and ``q.shape[0]`` queries per sequence.
    """
    table_keys = block_tables.shape[1] * k_cache.shape[2]
    seq_cap = table_keys if max_seq_len is None else _capacity("max_seq_len", max_seq_len, table_keys)
    query_cap = q.shape[0] if max_query_len is None else _capacity("max_query_len", max_query_len, None)
    return seq_cap, query_cap


def _capacity(name: str, value: object, limit: int | None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidArgumentError(f"{name} must be an int >= 0, got {value!r}")
    if limit is not None and value > limit:
        raise InvalidArgumentError(
            f"{name}={value} exceeds the block tables' capacity block_tables.shape[1] * block_size = {limit}"
        )
    return value


def check_paged_values(q, k_cache, block_tables, seq_lens, query_lens, max_seq_len: int, max_query_len: int):
    """Lengths and table entries (one device sync). Run after :func:`check_paged_shapes`."""
    num_blocks, block_size = k_cache.shape[0], k_cache.shape[2]
    lens, qlens = seq_lens.long(), query_lens.long()
    _check_lengths(lens, qlens, q.shape[0], max_seq_len, max_query_len)
    # the table entries a sequence reads: its first ceil(seq_len / block_size) ones
    columns = torch.arange(block_tables.shape[1], device=block_tables.device)[None, :]
    reads = columns < (lens[:, None] + block_size - 1) // block_size
    bad = reads & ((block_tables < 0) | (block_tables >= num_blocks))
    if bool(bad.any()):
        seq = int(bad.nonzero()[0, 0])
        raise InvalidArgumentError(
            f"sequence {seq}: block_tables entries must lie in [0, {num_blocks}), "
            f"got {block_tables[seq].tolist()}"
        )


def _check_lengths(lens, qlens, total_q: int, seq_cap: int, query_cap: int) -> None:
    """0 <= query_lens <= seq_lens <= capacity, queries only with keys, sum(query_lens) == total_q."""
    if int(qlens.sum()) != total_q:
        raise InvalidArgumentError(f"sum(query_lens)={int(qlens.sum())} must equal q.shape[0]={total_q}")
    bad = (qlens < 0) | (qlens > lens) | (lens > seq_cap) | ((qlens > 0) & (lens == 0)) | (qlens > query_cap)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise InvalidArgumentError(
            f"sequence {i}: need 0 <= query_lens ({int(qlens[i])}) <= seq_lens ({int(lens[i])}) <= "
            f"max_seq_len ({seq_cap}, default block_tables.shape[1] * block_size), "
            f"query_lens <= max_query_len ({query_cap}), and keys for any queries"
        )
