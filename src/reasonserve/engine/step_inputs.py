"""One forward pass's inputs: packed and validated on the host, staged to the device in
one copy.

:func:`pack` turns the step's chunks into int32 host tensors (token ids, positions,
block tables, ``seq_lens``/``query_lens``, the slot of each new K/V, the rows that need
logits) with per-chunk Python work limited to a few scalars, and checks every index the
device will use (token ids, positions, table entries), so a bad chunk is a typed error
naming it, never an out-of-range access on the device. :class:`Staging` copies them to
the device as one buffer through pinned host memory (``non_blocking``), and
:func:`check_step` checks a device step's dtypes, devices and shapes (no values: those
were checked on the host, and reading them back would sync the device).
"""

from __future__ import annotations

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
    """Host int32 tensors of one pass (``N`` query rows, ``B`` chunks, ``W`` table width)."""

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


def pack(
    chunks: Sequence[Chunk], block_size: int, scratch: int, vocab_size: int, max_positions: int
) -> HostStep:
    """Packed inputs of ``chunks`` (in order). Dummy rows (``pad_to``) get token 0 and the
    scratch block; table columns past a chunk's own blocks point at the scratch block.
    Raises InvalidArgumentError naming the chunk for out-of-range token ids, positions or
    block numbers, or a table too short for the chunk's tokens."""
    if not chunks:
        raise InvalidArgumentError("a forward pass needs at least one chunk")
    bs = block_size
    real = torch.tensor([len(c.tokens) for c in chunks])
    n = torch.maximum(real, torch.tensor([c.pad_to for c in chunks]))
    start = torch.tensor([c.start for c in chunks])
    lens = torch.tensor([len(c.table) for c in chunks])
    width = int(((start + n + bs - 1) // bs).max())
    flat: list[int] = []  # one flat list: torch.tensor on nested lists is slow
    for c in chunks:
        flat += c.table[:width]
        flat += [scratch] * (width - len(c.table))
    table = torch.tensor(flat, dtype=torch.int32).view(len(chunks), width)
    owner = torch.repeat_interleave(torch.arange(len(chunks)), n)  # chunk of each row
    first = torch.cumsum(n, 0) - n
    index = torch.arange(int(n.sum())) - first[owner]  # row index within its chunk
    positions = start[owner] + index
    is_real = index < real[owner]
    ids = torch.zeros(len(index), dtype=torch.int32)
    ids[is_real] = torch.tensor([t for c in chunks for t in c.tokens], dtype=torch.int32)
    _check_chunks(ids, positions, is_real, owner, lens, table, start, vocab_size, max_positions, bs, scratch)
    blocks = torch.where(is_real, table[owner, positions // bs], scratch)
    want = torch.tensor([c.want for c in chunks])
    rows = (index >= real[owner] - want[owner]) & is_real
    seq_lens = start + n
    return HostStep(
        ids, positions.clamp(max=max_positions - 1).to(torch.int32), seq_lens.to(torch.int32),
        n.to(torch.int32), blocks.to(torch.int32), (positions % bs).to(torch.int32),
        rows.nonzero().flatten().to(torch.int32), table, int(seq_lens.max()), int(n.max()),
    )  # fmt: skip


def _check_chunks(
    ids, positions, is_real, owner, lens, table, start, vocab, max_positions, bs, scratch
) -> None:
    """Every index the device will use, checked on the host (a few vectorised reductions)."""
    bad_row = is_real & ((ids < 0) | (ids >= vocab) | (positions < 0) | (positions >= max_positions)
                         | (positions // bs >= lens[owner]))  # fmt: skip
    bad = (start < 0) | ((table < 0) | (table > scratch)).any(1)
    bad[owner[bad_row]] = True
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise InvalidArgumentError(
            f"chunks[{i}]: token ids must lie in [0, {vocab}), positions in [0, {max_positions}) and inside "
            f"its table ({int(lens[i])} blocks of {bs} tokens), block numbers in [0, {scratch})"
        )


class Staging:
    """Copies a :class:`HostStep` to ``device`` as one int32 buffer. On CUDA the host side
    goes through a reused pinned buffer and the copy is ``non_blocking``; an event keeps
    the next step from overwriting the pinned buffer before the copy has read it."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pinned: torch.Tensor | None = None
        self._copied = torch.cuda.Event() if device.type == "cuda" else None

    def to_device(self, host: HostStep) -> DeviceStep:
        parts = host[:8]
        sizes = [t.numel() for t in parts]
        if self.device.type == "cuda":
            flat = self._host_buffer(sum(sizes))
            torch.cat([t.reshape(-1) for t in parts], out=flat)
            dev = torch.empty(flat.shape, dtype=torch.int32, device=self.device)
            dev.copy_(flat, non_blocking=True)
            self._copied.record()  # type: ignore[union-attr]
        else:
            dev = torch.cat([t.reshape(-1) for t in parts]).to(self.device)
        ids, pos, seq_lens, query_lens, blocks, offsets, rows, tables = dev.split(sizes)
        meta = PagedMeta(tables.view(host.block_tables.shape), seq_lens, query_lens, blocks, offsets,
                         host.max_seq_len, host.max_query_len)  # fmt: skip
        return DeviceStep(ids, pos, meta, rows)

    def _host_buffer(self, n: int) -> torch.Tensor:
        self._copied.synchronize()  # type: ignore[union-attr]  # the last copy has read the buffer
        if self._pinned is None or self._pinned.numel() < n:
            self._pinned = torch.empty(max(n, 2 * (0 if self._pinned is None else self._pinned.numel())),
                                       dtype=torch.int32, pin_memory=True)  # fmt: skip
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
