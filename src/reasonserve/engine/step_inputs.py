"""One forward pass's inputs: packed and validated on the host, staged to the device in
one copy.

:func:`pack` turns the step's chunks into host tensors (token ids, positions,
block tables, ``seq_lens``/``query_lens``, the slot of each new K/V, the rows that need
logits) with per-chunk Python work limited to a few scalars, and checks every index the
device will use (token ids, positions, table entries), so a bad chunk is a typed error
naming it, never an out-of-range access on the device. :class:`Staging` copies them to
the device as one buffer through pinned host memory (``non_blocking``), and
:func:`check_step` checks a device step's dtypes, devices and shapes (no values: those
were checked on the host, and reading them back would sync the device).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import NamedTuple

import torch

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError
from reasonserve.engine.kernels import PagedMeta

__all__ = ["Chunk", "DeviceStep", "HostStep", "Staging", "check_step", "pack"]

_INDEX_DTYPES = (torch.int32, torch.int64)


class Chunk(NamedTuple):
    """``tokens`` to run from position ``start`` of a request with block ``table``;
    ``pad_to`` pads the chunk with dummy queries (their K/V go to the scratch block);
    ``want`` is how many of its last real rows need logits. (A named tuple: the host
    builds one per request per step.)"""

    tokens: list[int]
    start: int
    table: Sequence[int]
    want: int = 1
    pad_to: int = 0


class HostStep(NamedTuple):
    """Host int64 tensors of one pass (``N`` query rows, ``B`` chunks, ``W`` table width)."""

    ids: torch.Tensor  # [N]
    positions: torch.Tensor  # [N]
    seq_lens: torch.Tensor  # [B]
    query_lens: torch.Tensor  # [B]
    slot_blocks: torch.Tensor  # [N] block each row's new K/V goes to
    slot_offsets: torch.Tensor  # [N]
    rows: torch.Tensor  # [R] rows that need logits
    block_tables: torch.Tensor  # [B, W]
    max_seq_len: int
    max_query_len: int


class DeviceStep(NamedTuple):
    """The same inputs on the model's device, as ``forward_paged`` takes them."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: PagedMeta
    rows: torch.Tensor | None  # rows that need logits; None: all


Rows = tuple[list[int], list[int], list[int], list[int], list[int], list[int]]


def pack(
    chunks: Sequence[Chunk], block_size: int, scratch: int, vocab_size: int, max_positions: int
) -> HostStep:
    """Packed inputs of ``chunks`` (in order). Dummy rows (``pad_to``) get token 0 and the
    scratch block; table columns past a chunk's own blocks point at the scratch block.
    Raises InvalidArgumentError naming the chunk for out-of-range token ids, positions or
    block numbers, or a table too short for the chunk's tokens.

    Built as flat Python lists and turned into tensors once (a decode step, one row per
    chunk, is a few list comprehensions)."""
    if not chunks:
        raise InvalidArgumentError("a forward pass needs at least one chunk")
    bs = block_size
    for i, c in enumerate(chunks):
        end = c.start + len(c.tokens)
        if c.start < 0 or (c.tokens and (end > max_positions or end > len(c.table) * bs)):
            raise _bad_chunk(i, chunks, vocab_size, max_positions, bs, scratch)
    one_row_each = all(len(c.tokens) == 1 and c.pad_to <= 1 for c in chunks)
    lists = (_decode_rows if one_row_each else _rows)(chunks, bs, scratch)
    ids, positions, blocks, rows, seq_lens, query_lens = lists
    width = -(-max(seq_lens) // bs)
    table: list[int] = []
    for c in chunks:
        table += c.table[:width]
        table += [scratch] * (width - len(c.table))
    bad_ids = bool(ids) and (min(ids) < 0 or max(ids) >= vocab_size)
    if bad_ids or min(table, default=0) < 0 or max(table, default=0) > scratch:
        i = next(i for i, c in enumerate(chunks) if not _in_range(c, vocab_size, scratch))
        raise _bad_chunk(i, chunks, vocab_size, max_positions, bs, scratch)
    pos, lens = _ints(positions), (_ints(seq_lens), _ints(query_lens))
    return HostStep(
        _ints(ids), pos.clamp(max=max_positions - 1), *lens, _ints(blocks), pos % bs, _ints(rows),
        _ints(table).view(len(chunks), width), max(seq_lens), max(query_lens),
    )  # fmt: skip


def _decode_rows(chunks: Sequence[Chunk], bs: int, scratch: int) -> Rows:
    """Row lists of chunks of one real row each (the positions were checked)."""
    starts = [c.start for c in chunks]
    blocks = [c.table[s // bs] for c, s in zip(chunks, starts, strict=True)]
    rows = [i for i, c in enumerate(chunks) if c.want]
    return [c.tokens[0] for c in chunks], starts, blocks, rows, [s + 1 for s in starts], [1] * len(chunks)


def _rows(chunks: Sequence[Chunk], bs: int, scratch: int) -> Rows:
    """Row lists of any chunks: per chunk, list extends and one step per block it spans."""
    ids: list[int] = []
    positions: list[int] = []
    blocks: list[int] = []
    rows: list[int] = []
    seq_lens: list[int] = []
    query_lens: list[int] = []
    for c in chunks:
        real, n, start = len(c.tokens), max(len(c.tokens), c.pad_to), c.start
        end = start + real
        rows += range(len(ids) + real - min(c.want, real), len(ids) + real)
        ids += c.tokens
        ids += [0] * (n - real)
        positions += range(start, start + n)
        for b in range(start // bs, -(-end // bs)):  # the blocks the real rows write
            blocks += [c.table[b]] * (min(end, (b + 1) * bs) - max(start, b * bs))
        blocks += [scratch] * (n - real)
        seq_lens.append(start + n)
        query_lens.append(n)
    return ids, positions, blocks, rows, seq_lens, query_lens


def _ints(values: list[int]) -> torch.Tensor:
    """An int64 tensor of a list of ints, through a C array (several times faster than
    ``torch.tensor`` on a list)."""
    if not values:
        return torch.empty(0, dtype=torch.int64)
    return torch.frombuffer(array("q", values), dtype=torch.int64)


def _in_range(c: Chunk, vocab: int, scratch: int) -> bool:
    return all(0 <= t < vocab for t in c.tokens) and all(0 <= b <= scratch for b in c.table)


def _bad_chunk(i: int, chunks, vocab: int, max_positions: int, bs: int, scratch: int) -> Exception:
    return InvalidArgumentError(
        f"chunks[{i}]: token ids must lie in [0, {vocab}), positions in [0, {max_positions}) and inside "
        f"its table ({len(chunks[i].table)} blocks of {bs} tokens), block numbers in [0, {scratch})"
    )


class Staging:
    """Copies a :class:`HostStep` to ``device`` as one int64 buffer. On CUDA the host side
    goes through a reused pinned buffer and the copy is ``non_blocking``; an event keeps
    the next step from overwriting the pinned buffer before the copy has read it. Index
    tensors stay int64 (indexing casts int32 indices, one kernel per use and layer);
    the block tables and lengths become int32, as the paged kernels read them."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pinned: torch.Tensor | None = None
        self._copied = torch.cuda.Event() if device.type == "cuda" else None

    def to_device(self, host: HostStep) -> DeviceStep:
        parts = [t.reshape(-1) for t in host[:8]]
        sizes = [t.numel() for t in parts]
        if self.device.type == "cuda":
            flat = self._host_buffer(sum(sizes))
            torch.cat(parts, out=flat)
            dev = torch.empty(flat.shape, dtype=torch.int64, device=self.device)
            dev.copy_(flat, non_blocking=True)
            self._copied.record()  # type: ignore[union-attr]
        else:
            dev = torch.cat(parts)
        ids, pos, seq_lens, query_lens, blocks, offsets, rows, tables = dev.split(sizes)
        tables, seq_lens, query_lens = (t.to(torch.int32) for t in (tables, seq_lens, query_lens))
        meta = PagedMeta(tables.view(host.block_tables.shape), seq_lens, query_lens, blocks, offsets,
                         host.max_seq_len, host.max_query_len)  # fmt: skip
        return DeviceStep(ids, pos, meta, rows)

    def _host_buffer(self, n: int) -> torch.Tensor:
        self._copied.synchronize()  # type: ignore[union-attr]  # the last copy has read the buffer
        if self._pinned is None or self._pinned.numel() < n:
            size = max(n, 2 * (0 if self._pinned is None else self._pinned.numel()))
            self._pinned = torch.empty(size, dtype=torch.int64, pin_memory=True)
        return self._pinned[:n]


def _index_tensor(name: str, t: object, ndim: int, device: torch.device) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.dtype not in _INDEX_DTYPES:
        raise InvalidTypeError(
            f"{name} must be an int32/int64 tensor, got {getattr(t, 'dtype', type(t).__name__)}"
        )
    if t.dim() != ndim:
        raise InvalidArgumentError(f"{name} must have {ndim} dimension(s), got shape {tuple(t.shape)}")
    if t.device != device:
        raise InvalidTypeError(f"{name} is on {t.device} but the model is on {device}")
    return t


def check_step(
    step: DeviceStep, k_cache: torch.Tensor, v_cache: torch.Tensor, *, device, dtype, cache_shape
) -> None:
    """Dtypes, devices and shapes of ``forward_paged``'s arguments (no device values read)."""
    n = _index_tensor("input_ids", step.input_ids, 1, device).shape[0]
    if _index_tensor("positions", step.positions, 1, device).shape[0] != n:
        raise InvalidArgumentError(
            f"positions must have shape [{n}] like input_ids, got {tuple(step.positions.shape)}"
        )
    m = step.meta
    b = _index_tensor("meta.block_tables", m.block_tables, 2, device).shape[0]
    sized = (("meta.seq_lens", m.seq_lens, b), ("meta.query_lens", m.query_lens, b),
             ("meta.slot_blocks", m.slot_blocks, n), ("meta.slot_offsets", m.slot_offsets, n))  # fmt: skip
    for name, t, size in sized:
        if _index_tensor(name, t, 1, device).shape[0] != size:
            raise InvalidArgumentError(f"{name} must have shape [{size}], got {tuple(t.shape)}")
    if step.rows is not None:
        _index_tensor("logit_rows", step.rows, 1, device)
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(cache, torch.Tensor):
            raise InvalidTypeError(f"{name} must be a torch.Tensor, got {type(cache).__name__}")
        if cache.device != device or cache.dtype != dtype:
            raise InvalidTypeError(
                f"{name} is {cache.dtype} on {cache.device}; the model is {dtype} on {device}"
            )
        if cache.dim() != 5 or tuple(cache.shape[i] for i in (0, 2, 4)) != cache_shape:
            raise InvalidArgumentError(
                f"{name} must be [layers, blocks, Hkv, block_size, D] with (layers, Hkv, D) = {cache_shape}, "
                f"got {tuple(cache.shape)}"
            )
