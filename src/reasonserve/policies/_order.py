"""Fast orderings of long request queues (pure helpers).

A host may hand a policy tens of thousands of queued requests per step, so these avoid a
Python-level key function per request: sorts use C-level ``attrgetter`` keys (a stable
sort by one field; the request-id tie-break is applied only when the field has ties),
and program grouping maps each request to an integer program code once and aggregates
with numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter, eq

import numpy as np

from reasonserve.core.views import RequestView

__all__ = ["BY_ID", "Programs", "ordered"]

BY_ID = attrgetter("request_id")
_PROGRAM = attrgetter("program_id")
_ARRIVAL = attrgetter("arrival_s")


def ordered(requests: Sequence[RequestView], field: str) -> list[RequestView]:
    """``requests`` sorted by ``(field, request_id)``."""
    get = attrgetter(field)
    out = sorted(requests, key=get)
    keys = list(map(get, out))
    if any(map(eq, keys, keys[1:])):  # ties in the field: order them by request id
        out = sorted(sorted(requests, key=BY_ID), key=get)
    return out


class Programs:
    """``requests`` grouped by program (a request without a program is its own program,
    keyed ``"\\x00" + request_id``): ``keys[g]`` is program g's key, ``codes[i]`` the
    program of request i, ``min_arrival[g]`` its earliest arrival."""

    def __init__(self, requests: Sequence[RequestView]) -> None:
        self.requests = requests
        pids = list(map(_PROGRAM, requests))
        if None in pids:
            own = ("\x00" + r.request_id for r in requests)
            pids = [p if p is not None else q for p, q in zip(pids, own, strict=True)]
        self.keys = list(dict.fromkeys(pids))
        index = dict(zip(self.keys, range(len(self.keys)), strict=True))
        n = len(requests)
        self.codes = np.fromiter(map(index.__getitem__, pids), np.int64, n)
        self.index = index
        self.arrival = np.fromiter(map(_ARRIVAL, requests), np.float64, n)
        self.min_arrival = np.full(len(self.keys), np.inf)
        np.minimum.at(self.min_arrival, self.codes, self.arrival)

    def key_rank(self) -> np.ndarray:
        """Each program's position in the sorted order of program keys (for tie-breaks)."""
        rank = np.empty(len(self.keys), np.int64)
        rank[sorted(range(len(self.keys)), key=self.keys.__getitem__)] = np.arange(len(self.keys))
        return rank

    def members(self) -> tuple[np.ndarray, np.ndarray]:
        """(request indices grouped by program, each program's start offset in it)."""
        grouped = np.argsort(self.codes, kind="stable")
        starts = np.zeros(len(self.keys) + 1, np.int64)
        np.cumsum(np.bincount(self.codes, minlength=len(self.keys)), out=starts[1:])
        return grouped, starts
