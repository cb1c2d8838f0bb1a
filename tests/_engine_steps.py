"""Shared by the engine's device tests: requests prefilled straight through a ModelRunner."""

import torch

from reasonserve.engine.kernels import INVARIANT
from reasonserve.engine.step_inputs import Chunk


def decode_chunks(runner, n: int, *, blocks_each: int = 8) -> list[Chunk]:
    """``n`` requests with prompts of different lengths (3, 6, 9, ...), prefilled on the
    invariant kernels in blocks ``i * blocks_each ...``; returns their next decode chunks."""
    g = torch.Generator().manual_seed(n)
    vocab, bs = runner.model.cfg.vocab_size, runner.block_size
    chunks = []
    for i in range(n):
        length = 3 + 3 * i
        prompt = torch.randint(0, vocab, (length,), generator=g).tolist()
        table = list(range(i * blocks_each, (i + 1) * blocks_each))
        runner.run([Chunk(prompt, 0, table)], INVARIANT)
        chunks.append(Chunk([prompt[-1]], length, table[: length // bs + 1]))
    return chunks
