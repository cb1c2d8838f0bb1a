"""Program grouping shared by the gang-scheduling policies (Dynasor, App-FIFO; pure).

The grouping comes from :class:`~reasonserve.core.columns.QueueColumns` (program codes and
keys): the host's columns of the waiting queue when it keeps them, else read off the
objects (neighbours compared in numpy, one dict entry per run of a program's requests).
The running requests (a few hundred at most) are always read off the objects and their
programs matched to the waiting queue's by key. Aggregates (earliest arrival, sums) are numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import numpy as np

from reasonserve.core.columns import QueueColumns, columns_of
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies._order import lex_order

__all__ = ["Programs"]


class Programs:
    """``requests`` grouped by program (a request without a program is its own program,
    keyed ``"\\x00" + request_id``): ``keys[g]`` is program g's key, ``codes[i]`` the
    program of request i, ``min_arrival[g]`` its earliest arrival. ``Programs(requests)``
    reads the objects (keys in order of first appearance); :meth:`of_view` groups
    ``view.running + view.waiting`` reading the host's columns of the waiting queue."""

    def __init__(self, requests: Sequence[RequestView], parts: Sequence[QueueColumns] | None = None) -> None:
        self.requests = requests
        self._parts = [QueueColumns.from_requests(requests)] if parts is None else list(parts)
        self.codes, self.keys = _merged(self._parts)
        self.arrival = self.column("arrival_s").astype(np.float64, copy=False)
        self.min_arrival = _min_per_code(self.codes, self.arrival, len(self.keys))

    @classmethod
    def of_view(cls, view: SchedulerView) -> Programs:
        """``view.running + view.waiting`` grouped (running first)."""
        parts = (QueueColumns.from_requests(view.running), columns_of(view))
        return cls(view.running + view.waiting, parts)

    def column(self, name: str) -> np.ndarray:
        """A numeric column of ``requests`` (:data:`~reasonserve.core.columns.NUMERIC`)."""
        if len(self._parts) == 1:
            return self._parts[0].column(name)
        return np.concatenate([p.column(name) for p in self._parts])

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


def _merged(parts: Sequence[QueueColumns]) -> tuple[np.ndarray, list[str]]:
    """Program (codes, keys) of the parts' rows one after another: the last part's codes as
    they are; each earlier (small) part's programs matched to it by key or added."""
    last = parts[-1]
    keys, all_codes, added = list(last.program_keys), [], {}
    for part in parts[:-1]:
        if len(part) == 0:
            continue
        index = last.program_index if len(last) else {}
        mapping = np.empty(len(part.program_keys), np.intp)
        for j, key in enumerate(part.program_keys):
            code = index.get(key, added.get(key))
            if code is None:
                code = added[key] = len(keys)
                keys.append(key)
            mapping[j] = code
        all_codes.append(mapping[part.program_codes])
    if not all_codes:
        return last.program_codes, keys
    return np.concatenate((*all_codes, last.program_codes)), keys


def _min_per_code(codes: np.ndarray, values: np.ndarray, num_codes: int) -> np.ndarray:
    """Per code, the least of ``values`` (inf for none): a minimum per run of equal
    neighbours (a program's requests usually come together), then per code."""
    out = np.full(num_codes, np.inf)
    if len(codes):
        starts = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1])))
        np.minimum.at(out, codes[starts], np.minimum.reduceat(values, starts))
    return out
