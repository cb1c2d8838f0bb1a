"""The paged KV tensors: ``[layers, blocks, Hkv, block_size, D]`` for keys and values."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reasonserve.engine.config import ModelConfig

__all__ = ["PagedKVCache"]


class PagedKVCache:
    def __init__(self, cfg: ModelConfig, num_blocks: int, block_size: int, *, dtype, device) -> None:
        shape = (cfg.num_hidden_layers, num_blocks, cfg.num_key_value_heads, block_size, cfg.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.block_size = block_size

    def gather(self, table: Sequence[int], num_tokens: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Contiguous ``(k, v)`` ``[layers, Hkv, num_tokens, D]`` of a sequence's cached prefix."""
        if num_tokens == 0:
            return None
        idx = torch.tensor(table[: -(-num_tokens // self.block_size)], device=self.k.device)
        layers, _, heads, _, d = self.k.shape

        def flat(t: torch.Tensor) -> torch.Tensor:
            blocks = t[:, idx].permute(0, 2, 1, 3, 4).reshape(layers, heads, -1, d)
            return blocks[:, :, :num_tokens]

        return flat(self.k), flat(self.v)

    def write(self, table: Sequence[int], start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store ``k``/``v`` ``[layers, Hkv, n, D]`` at token positions ``start .. start+n``."""
        n = k.shape[2]
        positions = torch.arange(start, start + n)
        blocks = torch.tensor([table[p // self.block_size] for p in positions.tolist()])
        offsets = positions % self.block_size
        self.k[:, blocks, :, offsets] = k.permute(2, 0, 1, 3)
        self.v[:, blocks, :, offsets] = v.permute(2, 0, 1, 3)

    def copy_block(self, src: int, dst: int) -> None:
        self.k[:, dst] = self.k[:, src]
        self.v[:, dst] = self.v[:, src]
