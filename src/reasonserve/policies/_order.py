"""Fast orderings of long request queues (pure helpers).

A host may hand a policy tens of thousands of queued requests per step, and on a slow
CPU every C-level pass over them (one ``map`` of a field getter) costs about 25-40 ns a
request, so these keep the passes few and leave the rest to numpy: a sort by one field
reads it once into numpy (a queue already in order costs that one pass; the request-id
tie-break is applied only when the field has ties), and numpy rankings are read lazily,
so a caller that stops once admission is blocked pays for little more than the sort.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import pairwise
from operator import attrgetter

import numpy as np

from reasonserve.core.columns import columns_of, field_getter
from reasonserve.core.views import RequestView, SchedulerView

__all__ = [
    "BY_ID",
    "SHORT",
    "argsort_lazily",
    "chunked",
    "column_order",
    "getter",
    "lex_order",
    "order_tie_runs",
    "ordered",
    "ordered_plain",
    "ranked_lazily",
    "waiting_ordered",
]

BY_ID = attrgetter("request_id")
getter = field_getter  # a C-level getter of one RequestView field (by position)
SHORT = 256  # below this many requests Python's sort beats numpy's passes


def ordered(requests: Sequence[RequestView], field: str) -> list[RequestView]:
    """``requests`` sorted by ``(field, request_id)``. A numeric field is read once into
    numpy: a queue already in strictly increasing order (hosts queue by arrival) is returned
    as it is, one in non-decreasing order (requests queued at the same time) has only its
    runs of equal keys ordered by id (:func:`order_tie_runs`), one without ties is put in
    order by a numpy argsort; other ties, NaNs and other types (a str anywhere, ints beyond
    int64, tuples) take the plain sort (:func:`ordered_plain`), which also raises where the
    keys cannot be compared. A list shorter than :data:`SHORT` takes the plain sort at once."""
    n = len(requests)
    if n < SHORT:
        return ordered_plain(requests, field)
    keys = np.array(list(map(getter(field), requests)))
    if keys.ndim != 1 or keys.dtype.kind not in "iuf":
        return ordered_plain(requests, field)
    rising = keys[1:] >= keys[:-1]  # NaN compares False: neither in-order branch with one
    if bool(rising.all()):
        equal = np.flatnonzero(keys[1:] == keys[:-1])
        if not len(equal):
            return list(requests)
        out = order_tie_runs(requests, equal.tolist(), getter(field))
        if out is not None:
            return out
    order = np.argsort(keys, kind="stable")
    s = keys[order]
    if bool((s[1:] > s[:-1]).all()):  # distinct (and no NaN): a strict order
        return list(map(requests.__getitem__, order.tolist()))
    return ordered_plain(requests, field)


def order_tie_runs(
    requests: Sequence[RequestView], equal: list[int], key: Callable[[RequestView], object]
) -> list[RequestView] | None:
    """``requests`` (in non-decreasing order of their numpy keys) with each run of equal
    keys sorted by id (stable: :func:`ordered_plain`'s order); ``equal``: the ascending
    ``i`` whose numpy key equals the next one's. None when a run's Python values differ
    (ints and floats read into float64 can round to equal; rounding keeps every strict
    order, so only the runs need the check): the plain sort decides then."""
    out = list(requests)
    k = 0
    while k < len(equal):
        start = end = equal[k]
        while k < len(equal) and equal[k] == end:  # a run: start .. end + 1, inclusive
            end, k = end + 1, k + 1
        run = out[start : end + 1]
        first = key(run[0])
        if any(key(r) != first for r in run):
            return None
        out[start : end + 1] = sorted(run, key=BY_ID)
    return out


def column_order(keys: np.ndarray, requests: Sequence[RequestView]) -> np.ndarray | None:
    """The indices of ``requests`` in :func:`ordered`'s order, from ``keys`` (a host's column:
    ``keys[i]`` is ``requests[i]``'s field) instead of the objects: one numpy sort (none for
    a column already in strictly increasing order), the ids read only when keys tie. None
    when a key is NaN: :func:`ordered` then takes Python's sort, whose order with NaNs
    depends on the input order (no numpy sort reproduces it): the caller takes the objects.
    Equal to :func:`ordered` for float fields (a column is float64: int times beyond 2**53
    would compare as their float64 values)."""
    n = len(keys)
    if n < 2 or bool((keys[1:] > keys[:-1]).all()):  # NaN compares False: never taken with one
        return np.arange(n)
    if keys.dtype.kind == "f" and bool(np.isnan(keys).any()):
        return None
    order = np.argsort(keys)
    s = keys[order]
    if bool((s[1:] > s[:-1]).all()):  # distinct: the order is unique, whatever the sort
        return order
    return lex_order([keys], lambda: list(map(BY_ID, requests)))


def waiting_ordered(view: SchedulerView, field: str) -> Iterable[RequestView]:
    """``view.waiting`` by ``(field, request_id)`` (:func:`ordered`'s order): from the host's
    column of ``field`` when it has one (read lazily, a caller that stops early pays for
    the sort and what it read), else (or with a NaN key) :func:`ordered` on the objects."""
    if view.waiting_columns is not None:
        order = column_order(columns_of(view).column(field), view.waiting)
        if order is not None:
            return map(view.waiting.__getitem__, chunked(order))
    return ordered(view.waiting, field)


def ordered_plain(requests: Sequence[RequestView], field: str) -> list[RequestView]:
    """:func:`ordered` by Python's sort of ``(field, request_id)`` (the definition)."""
    return sorted(requests, key=attrgetter(field, "request_id"))


def _tie_starts(order: np.ndarray, keys: Sequence[np.ndarray]) -> np.ndarray:
    """Where, in ``order``, each run of entries equal on every key starts (NaNs are equal:
    numpy sorts them last, and their ties are broken like any other, not by position)."""
    new = np.ones(len(order), bool)
    if len(order) > 1:
        new[1:] = False
        for k in keys:
            s = k[order]
            differ = s[1:] != s[:-1]
            if s.dtype.kind in "fc" and differ.any():
                nan = np.isnan(s)
                differ &= ~(nan[1:] & nan[:-1])
            new[1:] |= differ
    return np.flatnonzero(new)


def lex_order(keys: Sequence[np.ndarray], tie_breaker: Callable[[], Sequence]) -> np.ndarray:
    """Indices sorted by ``(keys[0], keys[1], ..., tie_break)``: a numpy lexsort on the
    keys; ``tie_break = tie_breaker()`` (comparable Python values, e.g. ids) is read and
    ranked only when two entries tie on every key."""
    order = np.lexsort(tuple(reversed(keys)))
    if len(_tie_starts(order, keys)) == len(order):
        return order
    tie_break = tie_breaker()
    rank = np.empty(len(tie_break), np.intp)
    rank[sorted(range(len(tie_break)), key=tie_break.__getitem__)] = np.arange(len(tie_break))
    return np.lexsort((rank, *reversed(keys)))


def ranked_lazily(requests: Sequence[RequestView], keys: Sequence[np.ndarray]) -> Iterator[RequestView]:
    """``requests`` in order of ``(keys[0], keys[1], ..., request_id)`` (numpy arrays, one
    entry per request), lazily: the keys are sorted in numpy and a run of ties is put in id
    order only when the walk reaches it, so a caller that stops early (admission blocked)
    pays for one numpy sort and for what it read."""
    order = np.lexsort(tuple(reversed(keys)))
    starts = _tie_starts(order, keys)
    if len(starts) == len(order):  # no ties
        yield from map(requests.__getitem__, chunked(order))
        return
    bounds = [*starts.tolist(), len(order)]
    for a, b in pairwise(bounds):
        if b - a == 1:
            yield requests[order[a]]
        else:
            yield from sorted(map(requests.__getitem__, order[a:b].tolist()), key=BY_ID)


def chunked(order: np.ndarray, first: int = 64) -> Iterator[int]:
    """``order.tolist()``, converted in growing chunks as it is read."""
    start, size = 0, first
    while start < len(order):
        yield from order[start : start + size].tolist()
        start, size = start + size, size * 4


def argsort_lazily(key: np.ndarray, first: int = 64) -> Iterator[int]:
    """Indices of ``key`` (distinct values) in increasing order, lazily: the ``first``
    smallest from a partial selection (O(n)); the full sort only if read beyond them."""
    if len(key) > 4 * first:
        head = np.argpartition(key, first)[:first]
        yield from head[np.argsort(key[head])].tolist()
        yield from chunked(np.argsort(key)[first:])
    else:
        yield from np.argsort(key).tolist()
