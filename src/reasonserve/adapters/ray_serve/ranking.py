"""Ranking replicas for one request: the pure PASCAL policy over the replicas' routing
stats, or the documented default ranking when the stats cannot be trusted.

Kept free of Ray so it can be checked against :class:`PascalRouter` directly.

* New request (``kind="place"``), or one resumed from its committed tokens after its
  replica failed (``kind="resume"``): Algorithm 1, ``PascalRouter.route``.
* Answering phase (``kind="answer"``): Algorithm 2 with adaptive migration,
  ``PascalRouter.route_transition``: a target needs room for the whole request at its
  longest (``blocks_needed``, :meth:`Job.blocks`: its prefix is re-prefilled there),
  staying needs room for the rest of the answer (``stay_blocks_needed``,
  :meth:`Job.answer_blocks`). When the current replica is no longer a
  candidate (dead, or draining), there is nowhere to stay: Algorithm 2's choice is taken
  without the adaptive rule.
* Stats measured before a placement the router made do not count it yet: each replica's
  ``m_i`` (and ``r_i`` for new requests) is raised by the router's own placements after
  the stats' timestamp, so a burst between two stats reports is not sent to one replica.

Default ranking (any candidate's stats missing, malformed or older than
``max_age_s``): replicas by the number of requests this router has in flight on them,
ties by replica id; an answering phase stays where it is (no migration without stats).
The decision carries the reason, and the router logs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reasonserve.adapters.ray_serve.job import Job
from reasonserve.adapters.ray_serve.stats import ReplicaStats
from reasonserve.policies.router import InstanceLoad, PascalRouter

__all__ = ["Decision", "Placement", "rank"]


@dataclass(frozen=True, slots=True)
class Placement:
    """A placement this router made (counted until the replica's stats include it)."""

    at_s: float
    blocks: int
    reasoning: bool


@dataclass(frozen=True, slots=True)
class Decision:
    ranking: tuple[str, ...]  # replica ids, most preferred first
    loads: tuple[InstanceLoad, ...]  # what the policy saw (empty on the default ranking)
    fallback: str | None = None  # why the default ranking was used

    @property
    def chosen(self) -> str:
        return self.ranking[0]


def rank(
    job: Job,
    candidates: Mapping[str, object],
    now_s: float,
    *,
    policy: PascalRouter,
    block_size: int,
    max_age_s: float,
    recent: Mapping[str, Sequence[Placement]],
    in_flight: Mapping[str, int],
) -> Decision:
    """Rank ``candidates`` (replica id -> its raw routing stats) for ``job``."""
    ids = sorted(candidates)
    default = tuple(sorted(ids, key=lambda r: (in_flight.get(r, 0), r)))
    stats, why = _fresh(candidates, now_s, max_age_s)
    if stats is None:
        current = job.current_replica
        if job.kind == "answer" and current is not None and current in candidates:  # no blind migration
            default = (current, *(r for r in default if r != current))
        return Decision(default, (), why)
    loads = tuple(_load(r, stats[r], recent.get(r, ())) for r in ids)
    view = job.view(block_size)
    if job.kind != "answer" or job.current_replica is None:
        chosen = policy.route(view, loads)
    elif job.current_replica in candidates:
        chosen = policy.route_transition(view, job.current_replica, loads, job.blocks(block_size),
                                         stay_blocks_needed=job.answer_blocks(block_size))  # fmt: skip
    else:
        blind = PascalRouter(migrate=True, adaptive=False)
        chosen = blind.route_transition(view, ids[0], loads, job.blocks(block_size))
    return Decision((chosen, *(r for r in default if r != chosen)), loads)


def _fresh(
    candidates: Mapping[str, object], now_s: float, max_age_s: float
) -> tuple[dict[str, ReplicaStats] | None, str | None]:
    out = {}
    for rid, raw in candidates.items():
        stats = ReplicaStats.from_dict(raw)
        if stats is None:
            return None, f"replica {rid} has no routing stats (missing or malformed)"
        age = now_s - stats.reported_at_s
        if age > max_age_s:
            return None, f"replica {rid}'s routing stats are stale ({age:.2f} s old, limit {max_age_s:.2f} s)"
        out[rid] = stats
    return out, None


def _load(rid: str, stats: ReplicaStats, placed: Sequence[Placement]) -> InstanceLoad:
    newer = [p for p in placed if p.at_s > stats.reported_at_s]
    return stats.load(rid, sum(p.blocks for p in newer), sum(p.reasoning for p in newer))
