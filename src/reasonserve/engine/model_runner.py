"""Runs one packed batch through the model over the paged KV cache, and samples.

The runner knows nothing about queues or policies: it gets chunks (token ids, the
position of the first, the request's block table) and a kernel set, builds the packed
inputs and the block-table metadata once per call, runs ``DecoderModel.forward_paged``
(which writes the new K/V with one indexed copy per layer and attends through the
block tables), and returns the logits rows asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from reasonserve import ops
from reasonserve.engine.kernels import INVARIANT, Kernels, PagedMeta
from reasonserve.engine.kv_cache import PagedKVCache
from reasonserve.engine.model import DecoderModel
from reasonserve.engine.sampling_params import SamplingParams

__all__ = ["Chunk", "ModelRunner"]


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


class ModelRunner:
    def __init__(self, model: DecoderModel, num_blocks: int, block_size: int) -> None:
        self.model = model
        self.cache = PagedKVCache(model.cfg, num_blocks, block_size, dtype=model.dtype, device=model.device)
        self.block_size = block_size

    def run(self, chunks: Sequence[Chunk], kernels: Kernels = INVARIANT) -> torch.Tensor:
        """Logits ``[sum(want), V]`` in chunk order."""
        ids, positions, meta, rows = self._pack(chunks)
        dev = self.model.device
        return self.model.forward_paged(
            ids.to(dev),
            positions.to(dev),
            meta,
            self.cache.k,
            self.cache.v,
            kernels=kernels,
            logit_rows=rows.to(dev),
        )

    def _pack(self, chunks: Sequence[Chunk]) -> tuple[torch.Tensor, torch.Tensor, PagedMeta, torch.Tensor]:
        """Packed ids, positions, paged metadata and logit rows, with per-chunk Python work
        limited to a few scalars; slots and positions are computed as tensors."""
        bs, scratch = self.block_size, self.cache.scratch
        real = torch.tensor([len(c.tokens) for c in chunks])
        n = torch.maximum(real, torch.tensor([c.pad_to for c in chunks]))
        start = torch.tensor([c.start for c in chunks])
        width = int(((start + n + bs - 1) // bs).max())
        flat: list[int] = []  # one flat list: torch.tensor on nested lists is slow
        for c in chunks:
            flat += c.table[:width]
            flat += [scratch] * (width - len(c.table))
        table = torch.tensor(flat, dtype=torch.long).view(len(chunks), width)
        owner = torch.repeat_interleave(torch.arange(len(chunks)), n)  # chunk of each row
        first = torch.cumsum(n, 0) - n
        index = torch.arange(int(n.sum())) - first[owner]  # row index within its chunk
        positions = start[owner] + index
        is_real = index < real[owner]
        blocks = torch.where(is_real, table[owner, positions // bs], scratch)
        ids = torch.zeros(len(index), dtype=torch.long)
        ids[is_real] = torch.tensor([t for c in chunks for t in c.tokens], dtype=torch.long)
        want = torch.tensor([c.want for c in chunks])
        rows = (index >= real[owner] - want[owner]) & is_real
        meta = PagedMeta(
            table.to(torch.int32), (start + n).to(torch.int32), n.to(torch.int32), blocks, positions % bs
        )
        max_pos = self.model.cfg.max_context_len - 1
        return ids, positions.clamp(max=max_pos), meta, rows.nonzero().flatten()

    # sampling -----------------------------------------------------------------------
    @staticmethod
    def sample(
        logits: torch.Tensor, params: Sequence[SamplingParams], seeds: Sequence[int], positions: Sequence[int]
    ) -> list[int | Exception]:
        """One token per row; a row whose sampling fails gets its exception instead, so one
        bad request cannot fail the others."""
        try:
            return _sample(logits, params, seeds, positions)
        except Exception:
            out: list[int | Exception] = []
            for i in range(len(params)):
                try:
                    out += _sample(
                        logits[i : i + 1], params[i : i + 1], seeds[i : i + 1], positions[i : i + 1]
                    )
                except Exception as err:
                    out.append(err)
            return out

    # swapping ------------------------------------------------------------------------
    def swap_out(self, table: Sequence[int], num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = self.cache.gather(table, num_tokens)  # type: ignore[misc]
        return k.to("cpu", copy=True), v.to("cpu", copy=True)

    def swap_in(self, table: Sequence[int], kv: tuple[torch.Tensor, torch.Tensor]) -> None:
        self.cache.write(table, 0, *(t.to(self.model.device) for t in kv))


def _sample(logits, params, seeds, positions) -> list[int | Exception]:
    """Greedy rows take ``ops.greedy`` (the bits ``ops.sample`` gives them, without drawing
    noise for the whole vocabulary); the others one ``ops.sample`` call."""
    drawn = [i for i, p in enumerate(params) if p.temperature != 0]
    if not drawn:
        return ops.greedy(logits).tolist()
    greedy = [i for i, p in enumerate(params) if p.temperature == 0]
    out: list[int | Exception] = [0] * len(params)
    if greedy:
        for i, token in zip(greedy, ops.greedy(logits[greedy]).tolist(), strict=True):
            out[i] = token
    if drawn:
        ps = [params[i] for i in drawn]
        tokens = ops.sample(
            logits[drawn],
            seeds=[seeds[i] for i in drawn],
            positions=[positions[i] for i in drawn],
            temperature=[p.temperature for p in ps],
            top_k=[p.effective_top_k for p in ps],
            top_p=[p.top_p for p in ps],
            min_p=[p.min_p for p in ps],
        )
        for i, token in zip(drawn, tokens.tolist(), strict=True):
            out[i] = token
    return out
