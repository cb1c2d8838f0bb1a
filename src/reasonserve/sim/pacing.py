"""The token pacer's release time over a request's answer tokens, as the simulator reads
it at every step (a module of the compiled set, :mod:`reasonserve.native`).

:meth:`reasonserve.policies.pacer.TokenPacer.released_until` is the definition; this is
the same fold in the same float operations (``last = max(g, last + tpot)`` as ``max()``
picks it), starting at an index instead of over a copied slice, so the compiled modules
run it without a call into the interpreter per request. ``tests/test_sim_quiet.py``
checks the two agree bit for bit.
"""

from __future__ import annotations

__all__ = ["released_from"]


def released_from(times: list[float], start: int, since: float | None, tpot: float) -> float | None:
    """``TokenPacer(tpot).released_until(times[start:], since)``."""
    n = len(times)
    if start < 0:  # as the slice reads a negative start
        start = max(n + start, 0)
    if start >= n:
        return since
    last: float
    if since is None:
        last, start = times[start], start + 1
    else:
        last = since
    for i in range(start, n):
        g = times[i]
        paced = last + tpot
        last = paced if paced > g else g
    return last
