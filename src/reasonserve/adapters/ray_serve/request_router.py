"""``PascalRequestRouter``: Ray Serve's request-router extension point driven by the pure
PASCAL instance policy (:mod:`reasonserve.policies.router`, the same object the
simulator uses).

Ray Serve calls :meth:`choose_replicas` with the live replicas (it drops a replica as
soon as it reports the actor dead, ``on_replica_actor_died``) and the pending request.
The request's first argument is a :class:`Job`: a new request or one resumed from its
committed tokens after its replica died (Algorithm 1), or the answering phase at the
reasoning->answering transition (Algorithm 2 + adaptive migration). Calls without a
job get the default ranking. See :mod:`reasonserve.adapters.ray_serve.ranking` for
the ranking and its fallback.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from reasonserve.adapters.ray_serve.job import Job
from reasonserve.adapters.ray_serve.ranking import Decision, Placement, rank
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.policies.router import PascalRouter

__all__ = ["PascalRequestRouter"]

_log = logging.getLogger("reasonserve.ray_serve")
_FALLBACK_LOG_EVERY_S = 10.0
_KWARGS = {"migrate": True, "adaptive": True, "block_size": 16, "max_stats_age_s": 0.6}  # and defaults


class PascalRequestRouter(RequestRouter):
    """Router kwargs (``RequestRouterConfig.request_router_kwargs``): ``migrate``,
    ``adaptive`` (PASCAL's flags), ``block_size`` (the replicas' KV block size),
    ``max_stats_age_s`` (older stats are stale)."""

    def initialize_state(self, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - set(_KWARGS))
        if unknown:
            raise InvalidArgumentError(f"PascalRequestRouter takes {sorted(_KWARGS)}, got unknown {unknown}")
        given = {**_KWARGS, **kwargs}
        self.policy = PascalRouter(migrate=given["migrate"], adaptive=given["adaptive"])
        self.block_size, self.max_stats_age_s = int(given["block_size"]), float(given["max_stats_age_s"])
        self.recent: dict[str, list[Placement]] = defaultdict(list)
        self.in_flight: dict[str, int] = defaultdict(int)
        self.last_decision: Decision | None = None
        self._placed: dict[str, tuple[str, Job, Placement]] = {}  # ranked, not yet sent
        self._last_fallback: tuple[str | None, float] = (None, 0.0)

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        job = _job_of(pending_request)
        if job is None or pending_request is None:  # not an engine request: least in-flight first
            order = sorted(by_id, key=lambda r: (self.in_flight[r], r))
            return [[by_id[r] for r in order]]
        now = time.time()
        self._prune(now)
        stats = {rid: r.routing_stats for rid, r in by_id.items()}
        decision = rank(
            job,
            stats,
            now,
            policy=self.policy,
            block_size=self.block_size,
            max_age_s=self.max_stats_age_s,
            recent=self.recent,
            in_flight=self.in_flight,
        )
        self.last_decision = decision
        self._report(job, decision)
        self._place(pending_request.metadata.internal_request_id, decision.chosen, job, now)
        return [[by_id[decision.chosen]], [by_id[r] for r in decision.ranking[1:]]]

    def _place(self, key: str, rid: str, job: Job, now_s: float) -> None:
        """Count a placement at once, so requests routed in the same instant (before any is
        sent) see each other; a request ranked again moves its placement."""
        self._unplace(key)
        blocks = job.blocks(self.block_size) if job.current_replica != rid else 0
        placement = Placement(now_s, blocks, job.kind != "answer")
        self.recent[rid].append(placement)
        self._placed[key] = (rid, job, placement)

    def _unplace(self, key: str) -> None:
        if key not in self._placed:
            return
        rid, _, placement = self._placed.pop(key)
        if placement in self.recent.get(rid, ()):
            self.recent[rid].remove(placement)

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any) -> None:
        rid, key = replica_id.unique_id, pending_request.metadata.internal_request_id
        self.in_flight[rid] += 1
        chosen, job, _ = self._placed.get(key, (None, None, None))
        if job is not None and chosen != rid:  # Ray sent it to a lower-ranked replica
            self._place(key, rid, job, time.time())
        self._placed.pop(key, None)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        rid = replica_id.unique_id
        self.in_flight[rid] = max(0, self.in_flight[rid] - 1)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        rid = replica_id.unique_id
        self.recent.pop(rid, None)
        self.in_flight.pop(rid, None)
        _log.warning("replica %s died: no request is routed to it any more", rid)

    def _prune(self, now_s: float) -> None:
        horizon = now_s - 2 * self.max_stats_age_s  # older placements are in any fresh stats
        for rid in list(self.recent):
            self.recent[rid] = [p for p in self.recent[rid] if p.at_s > horizon]

    def _report(self, job: Job, decision: Decision) -> None:
        _log.debug(
            "%s %s -> %s", job.kind, job.request_id, decision.chosen, extra={"decision": decision, "job": job}
        )
        if decision.fallback is None:
            return
        reason, last = self._last_fallback
        now = time.monotonic()
        if reason != decision.fallback or now - last > _FALLBACK_LOG_EVERY_S:
            _log.warning("routing by the default ranking (least in flight): %s", decision.fallback)
            self._last_fallback = (decision.fallback, now)


def _job_of(pending_request: PendingRequest | None) -> Job | None:
    if pending_request is None or not pending_request.args:
        return None
    job = pending_request.args[0]
    return job if isinstance(job, Job) else None
