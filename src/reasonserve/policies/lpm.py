"""Longest prefix match first (SGLang's LPM, the Dynasor paper's baseline): waiting
requests sharing the longest prefix with the cached (running) requests go first, then
by arrival. The cache is approximated by the prefix-block hashes of running requests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reasonserve.core.decisions import Decision
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies._ranked import decide_ranked

__all__ = ["LPMPolicy"]


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

        def key(r: RequestView) -> tuple:
            return (-_match(r.prefix_hashes, cached), r.arrival_s, r.request_id)

        running = sorted(view.running, key=lambda r: (r.arrival_s, r.request_id))
        return decide_ranked(view, running + sorted(view.waiting, key=key))
