"""Longest prefix match first (SGLang's LPM, the Dynasor paper's baseline): waiting
requests sharing the longest prefix with the cached (running) requests go first, then
by arrival. The cache is approximated by the prefix-block hashes of running requests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter, neg

from reasonserve.core.decisions import Decision
from reasonserve.core.views import SchedulerView
from reasonserve.policies._order import ordered
from reasonserve.policies._ranked import decide_ranked

__all__ = ["LPMPolicy"]

_HASHES = attrgetter("prefix_hashes")


def _match(hashes: tuple[int, ...], cached: set[int]) -> int:
    n = 0
    for h in hashes:  # chained hashes: a block matches only if all before it do
        if h not in cached:
            break
        n += 1
    return n


@dataclass(frozen=True, slots=True)
class LPMPolicy:
    name: str = "lpm"

    def decide(self, view: SchedulerView) -> Sequence[Decision]:
        cached = {h for r in view.running for h in r.prefix_hashes}
        waiting = ordered(view.waiting, "arrival_s")  # by arrival, then id (C-level)
        hashes = list(map(_HASHES, waiting))
        full = list(map(cached.issuperset, hashes))  # every block cached: the match is all of it
        if all(full):
            matches = list(map(len, hashes))
        else:
            matches = [len(h) if f else _match(h, cached) for h, f in zip(hashes, full, strict=True)]
        if len(set(matches)) > 1:  # longest match first; stable, so arrival order within a match
            negated = list(map(neg, matches))
            waiting = list(map(waiting.__getitem__, sorted(range(len(waiting)), key=negated.__getitem__)))
        return decide_ranked(view, ordered(view.running, "arrival_s") + waiting)
