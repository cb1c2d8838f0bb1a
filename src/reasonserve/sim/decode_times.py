"""The roofline's per-iteration decode times in C doubles (a module of the compiled set,
:mod:`reasonserve.sim.native`), for :meth:`RooflineCostModel.decode_iterations_s`.

The same float operations as its Python formula, in the same order, and bit for bit the
same results where :func:`doubles_exact` holds: every integer the formula forms (the
parameter FLOPs, attention FLOPs, KV bytes and contexts, up to the last iteration) is
below 2**53, so a double holds it exactly and each int-to-float conversion Python makes
happens at the same place here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["decode_times", "doubles_exact"]

_EXACT = 2**53


def _integral(x: Any) -> bool:
    return type(x) is int or (type(x) is float and x.is_integer())


def doubles_exact(params: Any, attn: Any, kv: Any, weights: Any, top: int) -> bool:
    """Whether :func:`decode_times` equals the Python formula for contexts up to ``top``
    (the last iteration's context plus the batch): ``params``, ``attn`` and ``kv``
    integral and their products with ``top`` below 2**53 (``weights`` too, when an int:
    Python adds it to the KV bytes before converting)."""
    if not (_integral(params) and _integral(attn) and _integral(kv)) or not 0 <= top < _EXACT:
        return False
    if type(weights) is not float and type(weights) is not int:
        return False
    limit: Any = _EXACT - weights if type(weights) is int else _EXACT
    return bool(0 <= params < _EXACT and 0 <= attn * top < _EXACT and 0 <= kv * top < limit)


def decode_times(
    params: float, attn: float, half: float, peak: float, kv: float, batch: int, weights: float,
    bandwidth: float, overhead: float, context: int, iterations: int,
) -> list[float]:  # fmt: skip
    """Seconds of ``iterations`` decode steps of ``batch`` sequences from total context
    ``context``: ``max((params + attn * (c + half)) / peak, (kv * (c + batch) + weights) /
    bandwidth) + overhead`` for c = context, context + batch, ... (only where
    :func:`doubles_exact` holds)."""
    out: list[float] = []
    c, b = float(context), float(batch)
    for _ in range(iterations):
        compute = (params + attn * (c + half)) / peak
        memory = (kv * (c + b) + weights) / bandwidth
        out.append((compute if compute >= memory else memory) + overhead)
        c += b
    return out
