"""The discrete-event loop: arrivals are placed by a router policy, each instance runs
steps back to back while it has work, and time jumps from event to event (the earliest
arrival or step end). Deterministic: the workload is seeded, ties go to arrivals, then
to the lowest instance index."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reasonserve.core.errors import InvalidArgumentError, PolicyError
from reasonserve.core.phase import Phase
from reasonserve.core.views import RequestView
from reasonserve.policies.pacer import TokenPacer
from reasonserve.policies.router import LeastKVRouter, Router
from reasonserve.sim.config import SimConfig
from reasonserve.sim.instance import SimInstance
from reasonserve.sim.sequence import SimSequence
from reasonserve.sim.workload import SimRequest

__all__ = ["SimResult", "simulate"]


@dataclass(frozen=True)
class SimResult:
    config: SimConfig
    policy: str
    router: str
    sequences: tuple[SimSequence, ...]  # every request, finished, in id order
    end_s: float
    steps: int
    placements: dict[str, str]  # request id -> instance id


def _arrival_view(req: SimRequest) -> RequestView:
    return RequestView(
        req.request_id, req.arrival_s, Phase.PREFILL, req.prompt_tokens, 0, 0,
        max_tokens=req.output_tokens, program_id=req.program_id, enqueued_s=req.arrival_s,
    )  # fmt: skip


def _check_requests(requests: Sequence[SimRequest], config: SimConfig) -> list[SimRequest]:
    ids = [r.request_id for r in requests]
    if len(set(ids)) != len(ids):
        raise InvalidArgumentError("requests must have unique request ids")
    limit = config.num_blocks * config.block_size
    for r in requests:
        if r.prompt_tokens + r.output_tokens > limit:
            raise InvalidArgumentError(
                f"request {r.request_id} needs {r.prompt_tokens + r.output_tokens} tokens of KV; "
                f"an instance holds {limit}"
            )
    return sorted(requests, key=lambda r: (r.arrival_s, r.request_id))


def simulate(
    requests: Sequence[SimRequest],
    config: SimConfig,
    policy_factory: Callable[[], object],
    router: Router | None = None,
    *,
    check_every_step: bool = False,
) -> SimResult:
    """Run ``requests`` to completion; ``policy_factory()`` makes each instance's policy."""
    arrivals = _check_requests(requests, config)
    placer: Router = router if router is not None else LeastKVRouter()
    cost, pacer = config.cost_model(), TokenPacer(config.tpot_slo_s)
    instances = [SimInstance(str(i), config, cost, policy_factory()) for i in range(config.num_instances)]
    events: list[tuple[float, int]] = []  # (time the instance's next step starts, index)
    scheduled = [False] * len(instances)
    placements: dict[str, str] = {}
    now, i = 0.0, 0
    while i < len(arrivals) or events:
        if i < len(arrivals) and (not events or arrivals[i].arrival_s <= events[0][0]):
            req = arrivals[i]
            now, i = req.arrival_s, i + 1
            loads = [inst.load(now, pacer) for inst in instances]
            target = str(placer.route(_arrival_view(req), loads))
            k = next((j for j, inst in enumerate(instances) if inst.instance_id == target), None)
            if k is None:
                raise PolicyError(f"router {placer.name!r} chose unknown instance {target!r}")
            instances[k].add(req, now)
            placements[req.request_id] = target
            if not scheduled[k]:
                heapq.heappush(events, (now, k))
                scheduled[k] = True
            continue
        now, k = heapq.heappop(events)
        if now > config.max_sim_s:
            raise PolicyError(
                f"simulation passed max_sim_s={config.max_sim_s}; a policy is not making progress"
            )
        inst = instances[k]
        duration = inst.step(now)
        if check_every_step:
            inst.check_blocks()
        scheduled[k] = inst.has_work and duration > 0
        if scheduled[k]:
            heapq.heappush(events, (now + duration, k))
    stuck = [s.request_id for inst in instances for s in inst.waiting + inst.running]
    if stuck:
        raise PolicyError(f"{len(stuck)} requests never finished (first: {stuck[0]}); the policy stalled")
    seqs = sorted((s for inst in instances for s in inst.finished), key=lambda s: s.request_id)
    return SimResult(config, instances[0].policy_name, placer.name,
                     tuple(seqs), now, sum(inst.steps for inst in instances), placements)  # fmt: skip
