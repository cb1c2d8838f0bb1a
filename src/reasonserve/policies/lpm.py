"""Longest prefix match first (SGLang's LPM, the Dynasor paper's baseline): waiting
requests sharing the longest prefix with the cached (running) requests go first, then
by arrival. The cache is approximated by the prefix-block hashes of running requests.

Cost on a long queue: with the host's columns (``SchedulerView.waiting_columns``: the
first prefix hashes of each request as int64 columns) the match is found column by
column in numpy (a binary search of the sorted cached hashes), the objects read only for
a match longer than the columns; without them, a few C-level passes over the waiting
requests (their hashes, each one's cached prefix, arrivals). Then the ranking, read only
until admission is blocked: match lengths longest first, each length's requests by
arrival a growing chunk at a time (the smallest arrivals by a partial selection, O(n);
the rest sorted only when read), so a shuffled queue costs no full sort."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, compress, islice, takewhile
from operator import itemgetter

import numpy as np

from reasonserve.core.columns import QueueColumns, columns_of
from reasonserve.core.decisions import Decision
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies._order import getter, ordered, ranked_lazily
from reasonserve.policies._ranked import decide_running_first

__all__ = ["LPMPolicy", "cached_prefix_blocks", "cached_prefix_columns", "ranked_by_match"]

_HASHES = getter("prefix_hashes")


COLUMNS = 8  # blocks matched column by column before the rest of each match is walked per request


def cached_prefix_blocks(hashes: Sequence[tuple[int, ...]], cached: set[int]) -> np.ndarray:
    """Each entry's longest prefix of blocks in ``cached`` (chained hashes: a block
    matches only if all before it do). All cached: the lengths. Otherwise block ``k`` of
    every entry still matching is looked up in one C-level pass per ``k`` (the candidates
    shrink at each miss), for the first :data:`COLUMNS` blocks; a match longer than that is
    finished per entry (``takewhile``, C-level, stops at the first miss)."""
    n = len(hashes)
    lens = np.fromiter(map(len, hashes), np.intp, n)
    if cached.issuperset(chain.from_iterable(hashes)):  # every block cached: the match is all of it
        return lens
    match = np.zeros(n, np.intp)
    idx, sub, contains = np.arange(n), list(hashes), cached.__contains__
    for k in range(COLUMNS):
        keep = lens[idx] > k
        if not keep.all():
            idx, sub = idx[keep], list(compress(sub, keep.tolist()))
        if not sub:
            return match
        hit = np.fromiter(map(contains, map(itemgetter(k), sub)), bool, len(sub))
        if not hit.all():
            idx, sub = idx[hit], list(compress(sub, hit.tolist()))
        match[idx] += 1
    rest = (takewhile(contains, islice(h, COLUMNS, None)) for h in sub)
    match[idx] += np.fromiter(map(len, map(list, rest)), np.intp, len(sub))
    return match


def cached_prefix_columns(
    columns: QueueColumns, requests: Sequence[RequestView], cached: set
) -> np.ndarray | None:
    """:func:`cached_prefix_blocks` of ``requests`` from their columns (``columns``: row i
    describes ``requests[i]``): block ``k`` of every row still matching is looked up in
    the sorted cached hashes (numpy), for the columns kept; a longer match is finished on
    the objects. None when the columns cannot decide it as Python's set would (a head
    that is not an int64, or a cached hash that is not an int)."""
    heads, lens = columns.prefix_heads, columns.prefix_lens
    table = np.array(list(cached))
    if heads is None or (table.size and table.dtype.kind not in "ib"):
        return None
    table = np.unique(table.astype(np.int64))
    match, idx = np.zeros(len(lens), np.intp), np.arange(len(lens))
    for k in range(heads.shape[1]):
        idx = idx[lens[idx] > k]
        if not len(idx) or not len(table):
            return match
        col = heads[idx, k]
        idx = idx[table[np.minimum(np.searchsorted(table, col), len(table) - 1)] == col]
        match[idx] += 1
    idx = idx[lens[idx] > heads.shape[1]]
    rest = (takewhile(cached.__contains__, islice(requests[i].prefix_hashes, heads.shape[1], None))
            for i in idx.tolist())  # fmt: skip
    match[idx] += np.fromiter(map(len, map(list, rest)), np.intp, len(idx))
    return match


def ranked_by_match(
    requests: Sequence[RequestView], matches: np.ndarray, arrival: np.ndarray
) -> Iterator[RequestView]:
    """``ranked_lazily(requests, (-matches, arrival))`` (``matches``: ints >= 0), lazily: the
    requests of each match length, longest first, in :func:`_smallest_first` order. With a
    NaN arrival :func:`ranked_lazily` itself (NaNs last, equal to one another)."""
    if bool(np.isnan(arrival).any()):
        yield from ranked_lazily(requests, (-matches, arrival))
        return
    counts = np.bincount(matches)
    for m in np.flatnonzero(counts)[::-1].tolist():
        idx = np.arange(len(matches)) if counts[m] == len(matches) else np.flatnonzero(matches == m)
        yield from map(requests.__getitem__, _smallest_first(arrival, idx, requests))


FIRST = 64  # requests a ranking sorts first; each later chunk is 4 times the one before


def _smallest_first(key: np.ndarray, idx: np.ndarray, requests: Sequence[RequestView]) -> Iterator[int]:
    """``idx`` by ``(key[i], requests[i].request_id)`` (no NaN in ``key``), lazily, a chunk at a
    time: the chunk's size-th smallest key by a partial selection, every index whose key is
    at most that one (ties included) sorted; the rest only when read past it."""
    rest, size = idx, FIRST
    while len(rest):
        k = key[rest]
        if len(rest) > 4 * size:
            take = k <= np.partition(k, size - 1)[size - 1]
            head, rest, k = rest[take], rest[~take], k[take]
        else:
            head, rest = rest, rest[:0]
        order = np.argsort(k, kind="stable")
        head, k = head[order].tolist(), k[order]
        if bool((k[1:] == k[:-1]).any()):  # equal keys: by request id
            head.sort(key=lambda i: (key[i], requests[i].request_id))
        yield from head
        size *= 4


@dataclass(frozen=True, slots=True)
class LPMPolicy:
    name: str = "lpm"

    def decide(self, view: SchedulerView) -> Sequence[Decision]:
        cached = set(chain.from_iterable(map(_HASHES, view.running)))
        waiting, columns = view.waiting, columns_of(view)
        host = view.waiting_columns is not None  # read from objects, the prefix columns cost more
        matches = cached_prefix_columns(columns, waiting, cached) if host else None
        if matches is None:
            matches = cached_prefix_blocks(list(map(_HASHES, waiting)), cached)
        arrival = columns.column("arrival_s")
        ranked = ranked_by_match(waiting, matches, arrival)  # longest match, then arrival, then id
        return decide_running_first(view, ordered(view.running, "arrival_s"), ranked)
