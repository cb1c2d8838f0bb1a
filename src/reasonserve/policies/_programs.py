"""Program grouping shared by the gang-scheduling policies (Dynasor, App-FIFO; pure).

The grouping comes from :class:`~reasonserve.core.columns.QueueColumns` (program codes and
keys): the host's columns of the waiting queue when it keeps them, else read off the
objects (neighbours compared in numpy, one dict entry per run of a program's requests).
The running requests (a few hundred at most) are always read off the objects and their
programs matched to the waiting queue's by key. Aggregates (earliest arrival, sums) are numpy.
A shuffled queue costs no more object reads than a sorted one: a long queue's requests are
indexed, not copied (a copy touches every view, in the queue's memory order), and the
programs' members are grouped by a radix sort of their codes.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import overload

import numpy as np

from reasonserve.core.columns import QueueColumns, columns_of
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies._order import lex_order

__all__ = ["Programs"]

_RADIX_CODES = 2**16  # up to this many codes sort as uint16 (numpy's stable sort of them is a radix sort)
# a waiting queue up to this long is copied after the running requests (cheaper than the
# Python-level indexing of a joined sequence: a decide indexes the running requests a few
# times); a longer one is joined, not copied (a copy touches every view)
_COPY_UP_TO = 2048
_FEW_RUNS = 64  # codes in at most len/64 ordered runs: numpy's merge sort of runs beats the radix sort


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
        if len(view.waiting) <= _COPY_UP_TO:
            return cls(view.running + view.waiting, parts)
        return cls(_Joined(view.running, view.waiting), parts)

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
        grouped = _grouped(self.codes, len(self.keys))
        starts = np.zeros(len(self.keys) + 1, np.intp)
        np.cumsum(np.bincount(self.codes, minlength=len(self.keys)), out=starts[1:])
        return grouped, starts


def _grouped(codes: np.ndarray, num_codes: int) -> np.ndarray:
    """``np.argsort(codes, kind="stable")`` (codes in [0, num_codes)) by the cheapest equal
    sort: none for codes already in order, numpy's own (a merge of runs) for codes in a few
    ordered runs (the running requests' programs, then the waiting queue's in order),
    else a radix sort when the codes fit in 16 bits (the stable sort of uint16)."""
    descents = int(np.count_nonzero(codes[1:] < codes[:-1]))
    if descents == 0:
        return np.arange(len(codes))
    if descents * _FEW_RUNS <= len(codes) or num_codes > _RADIX_CODES:
        return np.argsort(codes, kind="stable")
    return np.argsort(codes.astype(np.uint16), kind="stable")


class _Joined(Sequence[RequestView]):
    """``first + second`` without building it: indexing reads the two tuples (a long waiting
    queue's views are not touched, which a copy does, each one's refcount, in memory order)."""

    __slots__ = ("_first", "_n", "_second")

    def __init__(self, first: Sequence, second: Sequence) -> None:
        self._first, self._second, self._n = first, second, len(first)

    def __len__(self) -> int:
        return self._n + len(self._second)

    @overload
    def __getitem__(self, i: int) -> RequestView: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[RequestView, ...]: ...
    def __getitem__(self, i: int | slice) -> RequestView | tuple[RequestView, ...]:
        """Entry ``i`` (an int; negative from the end) or the entries of a slice, as
        ``(first + second)[i]``."""
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        if i < 0:
            i += len(self)
            if i < 0:
                raise IndexError("tuple index out of range")
        if i < self._n:
            return self._first[i]
        return self._second[i - self._n]  # past the end: the tuple's IndexError


def _merged(parts: Sequence[QueueColumns]) -> tuple[np.ndarray, list[str]]:
    """Program (codes, keys) of the parts' rows one after another: the last part's codes as
    they are; each earlier (small) part's programs matched to it by key or added."""
    last = parts[-1]
    keys, all_codes = list(last.program_keys), []
    added: dict[str, int] = {}  # key -> code of a program the last part lacks
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
    """Per code, the least of ``values`` (inf for none; NaN if any of its values is): one
    unbuffered ``np.minimum.at`` (whatever the order of the codes)."""
    out = np.full(num_codes, np.inf)
    np.minimum.at(out, codes, values)
    return out
