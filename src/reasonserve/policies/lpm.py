"""Longest prefix match first (SGLang's LPM, the Dynasor paper's baseline): waiting
requests sharing the longest prefix with the cached (running) requests go first, then
by arrival. The cache is approximated by the prefix-block hashes of running requests.

Cost on a long queue: a few C-level passes over the waiting requests (their hashes, each
one's cached prefix, arrivals) and one numpy sort; the requests are then read in ranked
order only until admission is blocked."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, repeat, takewhile

import numpy as np

from reasonserve.core.decisions import Decision
from reasonserve.core.views import SchedulerView
from reasonserve.policies._order import getter, ordered, ranked_lazily
from reasonserve.policies._ranked import decide_running_first

__all__ = ["LPMPolicy", "cached_prefix_blocks"]

_HASHES = getter("prefix_hashes")
_ARRIVAL = getter("arrival_s")


def cached_prefix_blocks(hashes: Sequence[tuple[int, ...]], cached: set[int]) -> np.ndarray:
    """Each entry's longest prefix of blocks in ``cached`` (chained hashes: a block
    matches only if all before it do)."""
    n = len(hashes)
    if cached.issuperset(chain.from_iterable(hashes)):  # every block cached: the match is all of it
        return np.fromiter(map(len, hashes), np.intp, n)
    prefixes = map(takewhile, repeat(cached.__contains__), hashes)  # C-level, stops at the first miss
    return np.fromiter(map(len, map(list, prefixes)), np.intp, n)


@dataclass(frozen=True, slots=True)
class LPMPolicy:
    name: str = "lpm"

    def decide(self, view: SchedulerView) -> Sequence[Decision]:
        cached = set(chain.from_iterable(map(_HASHES, view.running)))
        waiting = view.waiting
        matches = cached_prefix_blocks(list(map(_HASHES, waiting)), cached)
        arrival = np.fromiter(map(_ARRIVAL, waiting), np.float64, len(waiting))
        ranked = ranked_lazily(waiting, (-matches, arrival))  # longest match, then arrival, then id
        return decide_running_first(view, ordered(view.running, "arrival_s"), ranked)
