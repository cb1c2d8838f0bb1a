"""Runs one packed batch through the model over the paged KV cache, and samples.

The runner knows nothing about queues or policies: it gets chunks (token ids, the
position of the first, the request's block table) and a kernel set, builds the packed
inputs and the block-table metadata once per call, runs ``DecoderModel.forward_paged``
(which writes the new K/V with one indexed copy per layer and attends through the
block tables), and returns the logits rows asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from reasonserve import ops
from reasonserve.engine.kernels import INVARIANT, Kernels, PagedMeta
from reasonserve.engine.kv_cache import PagedKVCache
from reasonserve.engine.model import DecoderModel
from reasonserve.engine.sampling_params import SamplingParams

__all__ = ["Chunk", "ModelRunner"]


@dataclass(frozen=True, slots=True)
class Chunk:
    """``tokens`` to run from position ``start`` of a request with block ``table``;
    ``pad_to`` pads the chunk with dummy queries (their K/V go to the scratch block);
    ``want`` is how many of its last real rows need logits."""

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
        bs, scratch = self.block_size, self.cache.scratch
        max_pos = self.model.cfg.max_position_embeddings - 1
        ids: list[int] = []
        positions: list[int] = []
        blocks: list[int] = []
        offsets: list[int] = []
        rows: list[int] = []
        seq_lens, query_lens, tables = [], [], []
        for c in chunks:
            real, n = len(c.tokens), max(len(c.tokens), c.pad_to)
            end = c.start + n
            ids += c.tokens + [0] * (n - real)
            positions += [min(p, max_pos) for p in range(c.start, end)]
            blocks += [c.table[p // bs] for p in range(c.start, c.start + real)] + [scratch] * (n - real)
            offsets += [p % bs for p in range(c.start, end)]
            rows += range(len(ids) - n + real - c.want, len(ids) - n + real)
            seq_lens.append(end)
            query_lens.append(n)
            tables.append(c.table)
        width = max(-(-s // bs) for s in seq_lens)
        table = [list(t[:width]) + [scratch] * (width - len(t)) for t in tables]
        meta = PagedMeta(
            torch.tensor(table, dtype=torch.int32),
            torch.tensor(seq_lens, dtype=torch.int32),
            torch.tensor(query_lens, dtype=torch.int32),
            torch.tensor(blocks),
            torch.tensor(offsets),
            all(q == 1 for q in query_lens),
            max(seq_lens),
        )
        return torch.tensor(ids), torch.tensor(positions), meta, torch.tensor(rows, dtype=torch.long)

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
    tokens = ops.sample(
        logits,
        seeds=list(seeds),
        positions=list(positions),
        temperature=[p.temperature for p in params],
        top_k=[p.effective_top_k for p in params],
        top_p=[p.top_p for p in params],
        min_p=[p.min_p for p in params],
    )
    return tokens.tolist()
