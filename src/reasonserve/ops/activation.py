"""Batch-invariant SiLU.

Stock CPU ``silu`` computes vector bodies and scalar tails with different formulas,
so an element's bits depend on where it falls in the flattened tensor (measured:
381 of 9,363 elements differ). Here ``silu(x) = x / (1 + exp(-x))`` uses only
element-wise ops whose vector and scalar paths agree (checked by the property suite).
"""

from __future__ import annotations

import torch

from reasonserve.ops._checks import check_tensor

__all__ = ["silu"]


def silu(x: torch.Tensor) -> torch.Tensor:
    """``x * sigmoid(x)`` computed as ``x / (1 + exp(-x))``; same shape and dtype."""
    check_tensor("x", x)
    acc = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return (acc / (1.0 + torch.exp(-acc))).to(x.dtype)
