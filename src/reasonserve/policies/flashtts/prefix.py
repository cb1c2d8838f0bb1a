"""Dynamic prefix-aware scheduling (FlashTTS §4.2, App. A).

Each beam (a CoT) is a path of tree nodes; a beam's ``prefix_hashes`` are such a path (chained
block hashes, or node ids: each element names its whole prefix). The ordered beams are cut
into consecutive batches that fit memory; batch ``T_i`` is a trie and switching to ``T_{i+1}``
evicts the nodes they do not share:

    Cost = sum_i (Nodes(T_i) - P(T_i, T_{i+1}))

The greedy schedule takes next the beam sharing the longest prefix with the last one
(ties: the earliest in the input order). That is a depth-first walk of the trie whose
children are visited in order of first appearance (a beam ending at a node goes before
the beams below it), which is what "group beams of the same parent, keep the parents'
relative order" does; computed here with one sort. With one beam per batch (App. A.2)
this order maximises the sum of consecutive shared prefixes, since it keeps every
subtree's beams contiguous.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Literal

import numpy as np

from reasonserve.core.columns import QueueColumns, columns_of
from reasonserve.core.decisions import Decision, Order, Preempt
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies._order import BY_ID, argsort_lazily, chunked, column_order, getter, lex_order
from reasonserve.policies._ranked import decide_running_first

__all__ = ["PrefixAwarePolicy", "eviction_cost", "prefix_order"]

_HASHES = getter("prefix_hashes")


def prefix_order(paths: Sequence[Sequence[Hashable]]) -> list[int]:
    """Indices of ``paths`` in greedy prefix-sharing order (stable for equal paths)."""
    return list(_path_order(paths, np.arange(len(paths)), ints=False))


SMALL = 512  # up to this many paths, plain Python is faster than numpy's per-call overhead


def _path_order(paths: Sequence[Sequence[Hashable]], taken: np.ndarray, ints: bool) -> Iterator[int]:
    """:func:`prefix_order` of the paths taken in the order ``taken`` (``taken[k]``: the
    index of the k-th path), lazily: indices of ``paths`` sorted by each path's key, the
    tuple of its nodes' ranks (a node's rank: the first ``k`` whose path has it), then
    ``k``. Past :data:`SMALL` paths the ranks come from a numpy sort of the nodes (with
    ``ints``: nodes are ints in int64, as prefix hashes are) or one C-level pass of ``dict``,
    and the keys are sorted in numpy, the first few by a partial selection."""
    n = len(paths)
    if n <= SMALL:
        return iter(_plain_order(paths, taken.tolist()))
    lens = np.fromiter(map(len, paths), np.intp, n)
    flat = _int_nodes(paths) if ints else None
    return _ranked_paths(lens, taken, paths if flat is None else flat)


def _ranked_paths(lens: np.ndarray, taken: np.ndarray, nodes: Sequence | np.ndarray) -> Iterator[int]:
    """:func:`_path_order`'s numpy part: ``lens[i]`` is path i's length, ``nodes`` the paths
    (a sequence of them, or every node of every path in one int64 array, path after path)."""
    n, pos = len(lens), _positions(taken)
    width = int(lens.max()) if n else 0
    if width == 0:
        return argsort_lazily(pos)
    owner = np.repeat(pos, lens)
    rank = _int_ranks(nodes, owner) if isinstance(nodes, np.ndarray) else _ranks(nodes, owner)
    return _by_rank_columns(pos, _rank_columns(lens, width, rank))


RUNS = 64  # up to this many non-decreasing runs, numpy's stable sort (a run merge) beats its default


def _square_ranked_paths(heads: np.ndarray, taken: np.ndarray) -> Iterator[int]:
    """:func:`_ranked_paths` of paths all ``heads.shape[1] >= 1`` long, row i path i's nodes
    (int64). When the nodes column after column form at most :data:`RUNS` non-decreasing
    runs (node ids growing with arrival do), they are ranked in that layout by the stable
    sort's run merge (the rank columns are then the rows of the ranks); else path after
    path by the default sort (fewer passes over few distinct or random nodes)."""
    (n, width), pos = heads.shape, _positions(taken)
    by_column = heads.T.ravel()
    if np.count_nonzero(by_column[1:] < by_column[:-1]) < RUNS:
        rank = _int_ranks(by_column, np.tile(pos, width), kind="stable")
        return _by_rank_columns(pos, list(rank.reshape(width, n)))
    rank = _int_ranks(heads.ravel(), np.repeat(pos, width))
    return _by_rank_columns(pos, list(rank.reshape(n, width).T))


def _positions(taken: np.ndarray) -> np.ndarray:
    """``pos[i]``: path i is the ``pos[i]``-th taken."""
    pos = np.empty(len(taken), np.intp)
    pos[taken] = np.arange(len(taken))
    return pos


def _by_rank_columns(pos: np.ndarray, columns: list[np.ndarray]) -> Iterator[int]:
    """Indices of the paths sorted by (their rank columns, then ``pos``), lazily."""
    n, width = len(pos), len(columns)
    if not _one_key_fits(n, width):
        return chunked(np.lexsort((pos, *reversed(columns))))
    key = np.zeros(n, np.int64)
    for col in columns:
        key = key * (n + 1) + (col + 1)
    return argsort_lazily(key * n + pos)  # distinct: pos is


def _rank_columns(lens: np.ndarray, width: int, rank: np.ndarray) -> list[np.ndarray]:
    """Column j: the rank of each path's j-th node, -1 past its end (sorts first); ``rank``
    holds the paths' node ranks path after path. Paths all ``width`` long: ``rank``'s rows."""
    n = len(lens)
    if int(lens.min()) == width:
        return list(rank.reshape(n, width).T)
    offsets, columns = np.cumsum(lens) - lens, []
    for j in range(width):
        col = np.full(n, -1, np.intp)
        has = lens > j
        col[has] = rank[offsets[has] + j]
        columns.append(col)
    return columns


def _plain_order(paths: Sequence[Sequence[Hashable]], taken: list[int]) -> list[int]:
    """:func:`_path_order` in plain Python (the definition, for short queues)."""
    rank: dict = {}
    first = rank.setdefault  # iterating in the order taken: the first path to have a node ranks it
    keys = [tuple([first(node, k) for node in paths[i]]) for k, i in enumerate(taken)]
    return [taken[k] for k in sorted(range(len(taken)), key=keys.__getitem__)]


def _one_key_fits(n: int, width: int) -> bool:
    """Whether ``width`` ranks in [-1, n) and a position in [0, n) pack into one int64."""
    return bool((width + 1) * np.log2(n + 1) < 62)


def _ranks(paths: Sequence[Sequence[Hashable]], owner: np.ndarray) -> np.ndarray:
    """For each node occurrence (paths flattened; ``owner``: the position of its path),
    the least position of a path that has the node (one C-level pass of ``dict``)."""
    flat_nodes = list(chain.from_iterable(paths))
    first: dict = {}
    by_pos = np.argsort(owner, kind="stable")  # occurrences in path order: setdefault keeps the first
    rank = np.empty(len(owner), np.intp)
    nodes = map(flat_nodes.__getitem__, by_pos.tolist())
    rank[by_pos] = np.fromiter(map(first.setdefault, nodes, owner[by_pos].tolist()), np.intp, len(owner))
    return rank


def _int_nodes(paths: Sequence[Sequence[Hashable]]) -> np.ndarray | None:
    """Every node of ``paths`` in one int64 array (one C-level pass), None when some node is
    not an int in int64 (a float is read as numpy reads it: prefix hashes are ints)."""
    try:
        return np.fromiter(chain.from_iterable(paths), np.int64)
    except (OverflowError, TypeError, ValueError):
        return None


def _int_ranks(flat: np.ndarray, owner: np.ndarray, kind: Literal["stable"] | None = None) -> np.ndarray:
    """:func:`_ranks` of int64 nodes (``flat``) by one numpy sort (of that ``kind``)."""
    by_node = np.argsort(flat, kind=kind)
    node = flat[by_node]
    starts = np.flatnonzero(np.concatenate(([True], node[1:] != node[:-1])))
    least = np.minimum.reduceat(owner[by_node], starts)  # per distinct node
    rank = np.empty(len(flat), np.intp)
    rank[by_node] = np.repeat(least, np.diff(starts, append=len(flat)))
    return rank


def eviction_cost(paths: Sequence[Sequence[Hashable]], batch_size: int) -> int:
    """The paper's eviction cost of running ``paths`` in this order, ``batch_size`` beams
    per batch (the last batch's nodes count in full: nothing follows it)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidArgumentError(f"batch_size must be an int >= 1, got {batch_size!r}")
    tries = [
        {node for path in paths[i : i + batch_size] for node in path}
        for i in range(0, len(paths), batch_size)
    ]
    return sum(len(t) - (len(t & tries[i + 1]) if i + 1 < len(tries) else 0) for i, t in enumerate(tries))


@dataclass(frozen=True, slots=True)
class PrefixAwarePolicy:
    """Order the running batch and admit waiting beams in greedy prefix order.

    Running beams keep their seats (App. A: no preemption within an iteration) unless the
    KV budget forces the shared ranked fill to preempt; waiting beams are taken in arrival
    order, then regrouped by shared prefix, so beams of the same parent run together and
    parents keep their relative order."""

    name: str = "flashtts_prefix"

    def decide(self, view: SchedulerView) -> Sequence[Decision]:
        running, waiting = view.running, view.waiting
        ordered_running = list(map(running.__getitem__, _greedy(running)))
        host = columns_of(view) if view.waiting_columns is not None else None
        ranked = map(waiting.__getitem__, _greedy(waiting, host))  # read lazily
        decisions = decide_running_first(view, ordered_running, ranked)
        preempted = {d.request_id for d in decisions if isinstance(d, Preempt)}
        kept = tuple(r.request_id for r in ordered_running if r.request_id not in preempted)
        return ([Order(kept)] if kept else []) + decisions


def _greedy(requests: Sequence[RequestView], columns: QueueColumns | None = None) -> Iterator[int]:
    """Indices of ``requests`` in greedy prefix order, taken by (arrival, request id);
    ``columns`` (row i: ``requests[i]``) when the host keeps them: the paths are read from
    them when every one fits in the columns kept (int64 hashes), else off the objects."""
    host = columns is not None
    columns = QueueColumns.from_requests(requests) if columns is None else columns
    arrival = columns.column("arrival_s")
    by_arrival = column_order(arrival, requests)  # one numpy sort; the ids read only on ties
    if by_arrival is None:  # a NaN arrival: last, NaNs among themselves by id
        by_arrival = lex_order((arrival,), lambda: list(map(BY_ID, requests)))
    if host and len(requests) > SMALL and columns.prefix_heads is not None:
        lens, heads = columns.prefix_lens, columns.prefix_heads
        width = int(lens.max())
        if width <= heads.shape[1]:
            if int(lens.min()) == width > 0:
                return _square_ranked_paths(heads[:, :width], by_arrival)
            flat = heads[:, :width][np.arange(width) < lens[:, None]]  # every node, path after path
            return _ranked_paths(lens, by_arrival, flat)
    return _path_order(list(map(_HASHES, requests)), by_arrival, ints=True)
