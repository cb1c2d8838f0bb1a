"""Launch settings shared by the kernels: fixed per device kind, never per batch."""

from __future__ import annotations

import functools

import torch


def on_gpu(t: torch.Tensor) -> bool:
    return t.device.type == "cuda"


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 inputs use full-precision dots (no TF32) so they match the reference."""
    return "ieee" if dtype == torch.float32 else "tf32"


def row_block(n: int, t: torch.Tensor) -> int:
    """Columns per chunk of a row kernel: a function of the row length only."""
    cap = 4096 if on_gpu(t) else 256
    return max(16, min(cap, 1 << max(n - 1, 0).bit_length()))


@functools.cache
def _cuda_sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(t: torch.Tensor) -> int:
    """Streaming multiprocessors of ``t``'s GPU (the interpreter pretends 4)."""
    return _cuda_sm_count(t.device.index or 0) if on_gpu(t) else 4


def num_programs(t: torch.Tensor, work_items: int) -> int:
    """Persistent-kernel grid size: one program per SM (interpreter: 4)."""
    return max(1, min(sm_count(t), work_items))
