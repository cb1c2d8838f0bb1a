"""Correlation coefficients for replay reports (no SciPy dependency).

Both return ``None`` where the coefficient is undefined (fewer than two points, or a
constant variable), never NaN, so reports stay valid JSON.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["kendall_tau_b", "pearson"]


def _pair(x: Sequence[float], y: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]:
    if len(x) != len(y):
        raise InvalidArgumentError(f"x and y differ in length: {len(x)} != {len(y)}")
    tx = torch.tensor(list(x), dtype=torch.float64)
    ty = torch.tensor(list(y), dtype=torch.float64)
    if not (torch.isfinite(tx).all() and torch.isfinite(ty).all()):
        raise InvalidArgumentError("x and y must be finite")
    return tx, ty


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's r."""
    tx, ty = _pair(x, y)
    if len(tx) < 2:
        return None
    dx, dy = tx - tx.mean(), ty - ty.mean()
    denom = math.sqrt(float((dx * dx).sum()) * float((dy * dy).sum()))
    return float((dx * dy).sum()) / denom if denom > 0 else None


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b (ties in either variable handled), O(n^2) time, O(n) memory."""
    tx, ty = _pair(x, y)
    n = len(tx)
    if n < 2:
        return None
    concordance = ties_x = ties_y = 0.0
    for i in range(n - 1):
        sx = torch.sign(tx[i + 1 :] - tx[i])
        sy = torch.sign(ty[i + 1 :] - ty[i])
        concordance += float((sx * sy).sum())
        ties_x += float((sx == 0).sum())
        ties_y += float((sy == 0).sum())
    pairs = n * (n - 1) / 2
    denom = math.sqrt((pairs - ties_x) * (pairs - ties_y))
    return concordance / denom if denom > 0 else None
