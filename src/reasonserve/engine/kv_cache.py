"""The paged KV tensors: ``[layers, blocks + 1, Hkv, block_size, D]`` for keys and values.

The last block is a scratch block (:attr:`PagedKVCache.scratch`) that no request owns:
padding rows of fixed-shape verify passes write their K/V there and padded block-table
entries point at it, so padding never touches a request's blocks.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reasonserve.engine.config import ModelConfig

__all__ = ["PagedKVCache"]


class PagedKVCache:
    def __init__(self, cfg: ModelConfig, num_blocks: int, block_size: int, *, dtype, device) -> None:
        shape = (cfg.num_hidden_layers, num_blocks + 1, cfg.num_key_value_heads, block_size, cfg.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.block_size = block_size
        self.scratch = num_blocks

    def gather(self, table: Sequence[int], num_tokens: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Contiguous ``(k, v)`` ``[layers, Hkv, num_tokens, D]`` of a sequence's cached prefix
        (for swapping out and for tests; attention reads the blocks in place)."""
        if num_tokens == 0:
            return None
        idx = torch.tensor(table[: -(-num_tokens // self.block_size)], device=self.k.device)
        layers, _, heads, _, d = self.k.shape

        def flat(t: torch.Tensor) -> torch.Tensor:
            blocks = t[:, idx].permute(0, 2, 1, 3, 4).reshape(layers, heads, -1, d)
            return blocks[:, :, :num_tokens]

        return flat(self.k), flat(self.v)

    def slots(self, table: Sequence[int], start: int, n: int) -> tuple[list[int], list[int]]:
        """(block, offset) of token positions ``start .. start+n``."""
        bs = self.block_size
        return [table[p // bs] for p in range(start, start + n)], [p % bs for p in range(start, start + n)]

    def write(self, table: Sequence[int], start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store ``k``/``v`` ``[layers, Hkv, n, D]`` at token positions ``start .. start+n``."""
        blocks, offsets = self.slots(table, start, k.shape[2])
        b, o = torch.tensor(blocks), torch.tensor(offsets)
        self.k[:, b, :, o] = k.permute(2, 0, 1, 3)
        self.v[:, b, :, o] = v.permute(2, 0, 1, 3)

    def copy_block(self, src: int, dst: int) -> None:
        self.k[:, dst] = self.k[:, src]
        self.v[:, dst] = self.v[:, src]
