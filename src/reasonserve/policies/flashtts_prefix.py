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

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from operator import attrgetter

from reasonserve.core.decisions import Decision, Order, Preempt
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies._ranked import decide_ranked

__all__ = ["PrefixAwarePolicy", "eviction_cost", "prefix_order"]

_BY_ARRIVAL = attrgetter("arrival_s", "request_id")


def prefix_order(paths: Sequence[Sequence[Hashable]]) -> list[int]:
    """Indices of ``paths`` in greedy prefix-sharing order (stable for equal paths)."""
    rank: dict[Hashable, int] = {}  # node -> index of the first path that has it
    first = rank.setdefault
    keys = [tuple([first(node, i) for node in path]) for i, path in enumerate(paths)]
    return sorted(range(len(paths)), key=keys.__getitem__)


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
        running = sorted(view.running, key=_BY_ARRIVAL)
        waiting = sorted(view.waiting, key=_BY_ARRIVAL)
        waiting = [waiting[i] for i in prefix_order([r.prefix_hashes for r in waiting])]
        ordered_running: list[RequestView] = [
            running[i] for i in prefix_order([r.prefix_hashes for r in running])
        ]
        decisions = decide_ranked(view, ordered_running + waiting)
        preempted = {d.request_id for d in decisions if isinstance(d, Preempt)}
        kept = tuple(r.request_id for r in ordered_running if r.request_id not in preempted)
        return ([Order(kept)] if kept else []) + decisions
