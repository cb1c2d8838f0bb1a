"""Program grouping shared by the gang-scheduling policies (Dynasor, App-FIFO; pure).

Each request's program is read once (a numpy object column); a program's requests are
usually queued together, so neighbours are compared in numpy and the program of each run
is looked up in a dict once a run. Aggregates (earliest arrival, sums) are numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import numpy as np

from reasonserve.core.views import RequestView
from reasonserve.policies._order import getter, lex_order

__all__ = ["Programs"]

_PROGRAM = getter("program_id")
_ARRIVAL = getter("arrival_s")


def _runs(column: np.ndarray) -> tuple[dict, np.ndarray, np.ndarray]:
    """(each distinct key of ``column`` -> the index of its first occurrence, that index for
    each run of equal neighbours, each run's start). Equal keys usually come in runs (a
    program's requests are queued together), so neighbours are compared in numpy and the
    dict is filled once a run."""
    if len(column) == 0:
        return {}, np.zeros(0, np.intp), np.zeros(0, np.intp)
    starts = np.flatnonzero(np.concatenate(([True], np.not_equal(column[1:], column[:-1]))))
    head: dict = {}
    firsts = list(map(head.setdefault, column[starts].tolist(), starts.tolist()))
    return head, np.asarray(firsts, np.intp), starts


class Programs:
    """``requests`` grouped by program (a request without a program is its own program,
    keyed ``"\\x00" + request_id``): ``keys[g]`` is program g's key (in order of first
    appearance), ``codes[i]`` the program of request i, ``min_arrival[g]`` its earliest
    arrival (a minimum per run of neighbours, then per program)."""

    def __init__(self, requests: Sequence[RequestView]) -> None:
        self.requests = requests
        n = len(requests)
        head, firsts, starts = _runs(np.fromiter(map(_PROGRAM, requests), object, n))
        if None in head:  # requests without a program: each is its own
            own = (r.program_id if r.program_id is not None else "\x00" + r.request_id for r in requests)
            head, firsts, starts = _runs(np.fromiter(own, object, n))
        self.keys: list[str] = list(head)
        dense = np.empty(n, np.intp)
        dense[np.fromiter(head.values(), np.intp, len(head))] = np.arange(len(head))
        run_codes = dense[firsts]
        self.codes = np.repeat(run_codes, np.diff(starts, append=n))
        self.arrival = np.fromiter(map(_ARRIVAL, requests), np.float64, n)
        self.min_arrival = np.full(len(self.keys), np.inf)
        if n:
            np.minimum.at(self.min_arrival, run_codes, np.minimum.reduceat(self.arrival, starts))

    @cached_property
    def index(self) -> dict[str, int]:
        """Program key -> its number g."""
        return dict(zip(self.keys, range(len(self.keys)), strict=True))

    def order(self, *keys: np.ndarray) -> np.ndarray:
        """Programs sorted by ``(*keys, program key)`` (per-program arrays, first key first)."""
        return lex_order(keys, lambda: self.keys)

    def members(self) -> tuple[np.ndarray, np.ndarray]:
        """(request indices grouped by program, each program's start offset in it)."""
        grouped = np.argsort(self.codes, kind="stable")
        starts = np.zeros(len(self.keys) + 1, np.intp)
        np.cumsum(np.bincount(self.codes, minlength=len(self.keys)), out=starts[1:])
        return grouped, starts
