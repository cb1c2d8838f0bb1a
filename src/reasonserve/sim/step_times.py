"""The roofline's step times in C doubles (a module of the compiled set,
:mod:`reasonserve.native`), for :class:`RooflineCostModel`'s ``step_s`` and
``decode_iterations_s``.

The same float operations as the Python formulas, in the same order, and bit for bit the
same results where they say so (:func:`doubles_exact`; :func:`step_time` returns None
otherwise): every integer a formula forms (parameter and attention FLOPs, KV bytes,
contexts) is below 2**53, so a double holds it exactly and each int-to-float conversion
Python makes happens at the same place here.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["decode_times", "doubles_exact", "step_time"]

_EXACT: Final = 2**53
_EXACT_F: Final = 9007199254740992.0  # float(2**53)


def _integral(x: Any) -> bool:
    return type(x) is int or (type(x) is float and x.is_integer())


def doubles_exact(params: Any, attn: Any, kv: Any, weights: Any, top: Any) -> bool:
    """Whether :func:`decode_times` equals the Python formula for contexts up to ``top``
    (the last iteration's context plus the batch): ``top`` a Python int (so were the
    batch, the contexts and the iteration count: a float or numpy one takes the Python
    paths), ``params``, ``attn`` and ``kv`` integral and their products with ``top``
    below 2**53 (``weights`` too, when an int: Python adds it to the KV bytes before
    converting)."""
    if type(top) is not int or not 0 <= top < _EXACT:
        return False
    if not (_integral(params) and _integral(attn) and _integral(kv)):
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


def step_time(
    chunks: Any, params2: Any, attn: Any, kv: Any, weights: Any, peak: float, bandwidth: float,
    overhead: float,
) -> float | None:  # fmt: skip
    """:meth:`RooflineCostModel.step_s` of ``chunks`` ((tokens, context) pairs, in a list
    or tuple) with ``params2 = 2 * num_params``, or None where a value is not a Python int
    or float or an integer product could pass 2**53 (then the Python formula runs). Any
    other iterable is None too: the Python formula reads it again from the start.

    In doubles throughout (compiled: unboxed): each int below 2**53 converts exactly, so
    ``x * n`` is Python's product whether ``x`` is an int (the exact product, below 2**53,
    then converted) or a float (``n`` converted first, then one rounding); a product at or
    past 2**53 rounds to at least 2**53 and fails the same check Python's exact one does."""
    if type(chunks) is not list and type(chunks) is not tuple:
        return None
    if not (_number(params2) and _number(attn) and _number(kv) and _number(weights)):
        return None
    p: float = float(params2)
    at: float = float(attn)
    k: float = float(kv)
    top: float = _EXACT_F
    flops = bytes_ = 0.0
    for tokens, context in chunks:
        if type(tokens) is not int or type(context) is not int:
            return None
        n: int = tokens
        c: int = context
        if not (0 <= n < _EXACT and 0 <= c < _EXACT):
            return None
        nf, cf = float(n), float(c)
        a = p * nf
        b = at * nf
        kb = k * float(c + n)  # Python converts c + n (an int) before a float kv's product too
        if not (a < top and b < top and kb < top):
            return None
        flops += a + b * (cf + nf / 2)
        bytes_ += kb
    bytes_ += float(weights)
    compute, memory = flops / peak, bytes_ / bandwidth
    return (memory if memory > compute else compute) + overhead  # max(compute, memory), as max() picks


def _number(x: Any) -> bool:
    return (type(x) is int and 0 <= x < _EXACT) or (type(x) is float and x == x and x >= 0)
