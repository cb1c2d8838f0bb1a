"""The discrete-event loop: arrivals are placed by a router policy, each instance runs
steps back to back while it has work, and time jumps from event to event (the earliest
arrival or step end). Deterministic: the workload is seeded, ties go to arrivals, then
to the lowest instance index. A request reaching its end of thinking is placed again by
the router (PASCAL Algorithm 2); a migration lands after the cost model's transfer time
(ties: arrivals, then landings, then steps). A driver may run the loop as a generator
(:meth:`ClusterLoop.run`) that yields whenever requests finished or a wake-up it asked
for is due, and submit or stop requests at that time (reasoning programs)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from reasonserve.core.errors import InvalidArgumentError, PolicyError
from reasonserve.core.phase import Phase
from reasonserve.core.views import ProgramView, RequestView, SchedulerView
from reasonserve.policies.pacer import TokenPacer
from reasonserve.policies.router import LeastKVRouter, Router
from reasonserve.sim.cluster.config import SimConfig
from reasonserve.sim.cluster.instance import SimInstance
from reasonserve.sim.cluster.migration import MigrationRecord, Migrations
from reasonserve.sim.cluster.result import SimResult
from reasonserve.sim.cluster.sequence import SimSequence
from reasonserve.sim.workloads.requests import SimRequest

__all__ = ["ClusterLoop", "SimResult", "simulate"]


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
        if r.arrival_s > config.max_sim_s:  # not a policy's fault (e.g. a tiny arrival rate)
            raise InvalidArgumentError(
                f"request {r.request_id} arrives at {r.arrival_s} s, past max_sim_s={config.max_sim_s}"
            )
    return sorted(requests, key=lambda r: (r.arrival_s, r.request_id))


class ClusterLoop:
    """The event loop and its state: instances, pending step events, in-flight migrations.
    :meth:`run` processes the events; a driver that reacts to finished requests at the
    same virtual time (``clients.SimClient`` on a cluster: reasoning programs) runs
    it with ``listen=True`` and submits and stops requests while it is suspended."""

    def __init__(
        self, config: SimConfig, policy_factory: Callable[[], object], router: Router, *,
        programs: Callable[[SchedulerView], tuple[ProgramView, ...]] | None = None,
    ) -> None:  # fmt: skip
        """``programs`` (optional): the programs' progress for a view, handed to every
        instance's policy as ``SchedulerView.programs``."""
        self.config, self.router = config, router
        self.cost, self.pacer = config.cost_model(), TokenPacer(config.tpot_slo_s)
        self.instances = [
            SimInstance(str(i), config, self.cost, policy_factory()) for i in range(config.num_instances)
        ]
        for inst in self.instances:
            inst.programs = programs
        self.index = {inst.instance_id: k for k, inst in enumerate(self.instances)}
        self.events: list[tuple[float, int, int]] = []  # (next step start, index, version)
        self.version = [0] * len(self.instances)  # an event with an older version is stale
        self.scheduled = [False] * len(self.instances)
        self.placements: dict[str, str] = {}
        self.moving = Migrations()
        self.pending: list[tuple[float, str, SimRequest]] = []  # arrivals, a heap
        self.wakeups: list[float] = []  # when the driver asked run() to yield, a heap
        self.now = 0.0  # the time of the latest event (where run() is suspended)
        self.reported = [0] * len(self.instances)  # finished requests already told to the driver
        self.clock: tuple[float, int] = (-1.0, -1)  # the latest step: time, highest instance index then

    def tick(self, now: float, k: int) -> None:
        """Instance ``k`` steps at ``now``; a quiet stretch's step at ``now`` on a lower index
        has run before it (ties go to the lowest index; see reasonserve.sim.cluster.quiet)."""
        t, top = self.clock
        self.clock = (now, max(top, k) if t == now else k)

    def seen(self, k: int, now: float) -> bool:
        """Whether an observation now comes after instance ``k``'s (virtual) step at ``now``."""
        t, top = self.clock
        return t == now and k < top

    def interrupt(self, k: int, now: float) -> None:
        end = self.instances[k].interrupt(now, self.seen(k, now))
        if end is not None:
            self.schedule(k, end)

    def wake(self, k: int, now: float) -> None:
        if not self.scheduled[k]:
            self.schedule(k, now)

    def schedule(self, k: int, when: float) -> None:
        self.version[k] += 1
        heapq.heappush(self.events, (when, k, self.version[k]))
        self.scheduled[k] = True

    def loads(self, now: float) -> list:
        """Every instance's load after the iterations that ended by ``now``."""
        pacer = self.pacer
        return [inst.observed_load(now, self.seen(k, now), pacer) for k, inst in enumerate(self.instances)]

    def target(self, chosen: object) -> int:
        k = self.index.get(str(chosen))
        if k is None:
            raise PolicyError(f"router {self.router.name!r} chose unknown instance {chosen!r}")
        return k

    def arrive(self, req: SimRequest, now: float) -> None:
        loads = self.loads(now)
        k = self.target(self.router.route(_arrival_view(req), loads))
        self.instances[k].add(req, now)
        self.placements[req.request_id] = self.instances[k].instance_id
        self.interrupt(k, now)
        self.wake(k, now)

    def transition(self, src: SimInstance, seq: SimSequence, now: float) -> None:
        """Ask the router where ``seq``'s answering phase runs; start a migration if elsewhere."""
        if seq.status != "running":
            return
        loads = self.loads(now)
        need = src.blocks_for(seq.num_computed)  # a target must take its whole KV
        view = src.request_view(seq)  # staying needs room to go on: one more block of answer tokens
        chosen = self.router.route_transition(view, src.instance_id, loads, need, stay_blocks_needed=1)
        k = self.target(chosen)
        if self.instances[k] is src:
            return
        tokens = seq.num_computed
        blocks = src.release(seq)
        end = now + self.cost.migrate_s(tokens)
        record = MigrationRecord(seq.request_id, src.instance_id, self.instances[k].instance_id, now, end,
                                 tokens, blocks)  # fmt: skip
        self.moving.start(seq, record, k)

    def land(self) -> None:
        seq, record, k = self.moving.pop()
        dst = self.instances[k]
        if dst.run is not None:  # stop its run at the iteration in progress: the request joins next
            self.schedule(k, dst.cut(record.end_s, self.seen(k, record.end_s)))
        on_gpu = dst.receive(seq, record.end_s)
        blocks_in = seq.num_blocks if on_gpu else dst.blocks_for(seq.num_computed)
        self.moving.done.append(replace(record, blocks_in=blocks_in, on_gpu=on_gpu))
        self.wake(k, record.end_s)

    def check(self) -> None:
        """Every instance's KV accounting holds and every live request is in exactly one
        place (one instance's queues or in flight)."""
        seen: list[str] = [s.request_id for s in self.moving.in_flight()]
        for inst in self.instances:
            inst.check_blocks()
            seen += [s.request_id for s in inst.waiting + inst.running]
            if len(inst.by_id) != len(inst.waiting) + len(inst.running):
                raise PolicyError(f"instance {inst.instance_id}: request index out of step with its queues")
        if len(seen) != len(set(seen)):
            raise PolicyError("a request is in two places at once")

    def unreported(self) -> bool:
        """Whether a request finished since the last report (:meth:`take_finished`)."""
        return any(len(inst.finished) > n for inst, n in zip(self.instances, self.reported, strict=True))

    def take_finished(self) -> list[SimSequence]:
        """The requests finished since the last report, instance by instance, each
        instance's in the order they finished; they count as reported."""
        out: list[SimSequence] = []
        for k, inst in enumerate(self.instances):
            out += inst.finished[self.reported[k] :]
            self.reported[k] = len(inst.finished)
        return out

    def submit(self, req: SimRequest) -> None:
        """A request arriving at :attr:`now` (a program's, between two events)."""
        rid = req.request_id
        if req.arrival_s != self.now or rid in self.placements or any(e[1] == rid for e in self.pending):
            raise PolicyError(f"program request {rid} must be new and arrive at {self.now}")
        _check_requests([req], self.config)
        heapq.heappush(self.pending, (req.arrival_s, req.request_id, req))

    def stop(self, request_id: str) -> bool:
        """Stop a live request at :attr:`now`, freeing its KV; one still to arrive is
        dropped. False when it is not live here (finished, unknown, or in flight between
        instances: that one runs on)."""
        now = self.now
        if any(e[1] == request_id for e in self.pending):
            self.pending = [e for e in self.pending if e[1] != request_id]
            heapq.heapify(self.pending)
            return True
        k = next((k for k, inst in enumerate(self.instances) if request_id in inst.by_id), None)
        if k is None:
            return False
        self.interrupt(k, now)
        holder = self.instances[k]
        if holder.by_id[request_id].status not in ("waiting", "running"):
            return False
        holder.stop(request_id, "stop", now)
        return True

    def wake_at(self, when: float) -> None:
        """Have :meth:`run` yield at ``when`` (before the arrivals and steps then)."""
        heapq.heappush(self.wakeups, when)

    def begin_step(self, now: float, k: int) -> None:
        if now > self.config.max_sim_s:
            raise PolicyError(
                f"simulation passed max_sim_s={self.config.max_sim_s}; a policy is not making progress"
            )
        self.instances[k].finish_run(now)

    def end_step(self, now: float, k: int, check: bool) -> None:
        inst = self.instances[k]
        moved, inst.transitions = inst.transitions, []
        for seq in moved:  # placed before the next decision, so a leaving request is not batched
            self.transition(inst, seq, now)
        due = inst.step(now)
        if check:
            self.check()
        self.scheduled[k] = False
        if inst.has_work and due is not None:
            self.schedule(k, due)

    def has_events(self) -> bool:
        return bool(self.pending or self.events or len(self.moving) or self.wakeups)

    def run(
        self, *, check: bool = False, listen: bool = False, progress: Callable[[int, int], None] | None = None
    ) -> Iterator[float]:
        """Run the events in time order until none is left. With ``listen``, yields the
        time (:attr:`now`) whenever requests finished since the last report
        (:meth:`take_finished`): after a step's run is applied and before its next
        decision, and after any other event; and at each wake-up (:meth:`wake_at`), before
        the arrivals of that time. While it is suspended the driver may :meth:`submit` and
        :meth:`stop` requests at :attr:`now`."""
        inf, events, steps, wakeups = float("inf"), 0, self.events, self.wakeups
        now = self.now
        while self.pending or steps or len(self.moving) or wakeups:
            events += 1
            if progress is not None and events % _PROGRESS_EVERY == 0:
                _report_progress(self, progress)
            pending = self.pending  # a stop may have rebuilt it
            t_arrival = pending[0][0] if pending else inf
            t_step = steps[0][0] if steps else inf
            t_land = self.moving.next_s()
            if wakeups and wakeups[0] <= min(t_arrival, t_land, t_step):
                now = self.now = heapq.heappop(wakeups)
                while wakeups and wakeups[0] == now:
                    heapq.heappop(wakeups)
                yield now
                continue
            if t_arrival <= t_land and t_arrival <= t_step:
                now = t_arrival
                self.arrive(heapq.heappop(pending)[2], now)
            elif t_land <= t_step:
                now = t_land
                self.land()
            else:
                now, k, version = heapq.heappop(steps)
                if version != self.version[k]:
                    continue
                self.tick(now, k)
                self.begin_step(now, k)
                if listen and self.unreported():
                    self.now = now
                    yield now  # programs react before the next decision
                self.end_step(now, k, check)
            if listen and self.unreported():
                self.now = now
                yield now
        self.now = now
        if progress is not None:
            _report_progress(self, progress)

    def result(self) -> SimResult:
        """What the run did; every request must have finished."""
        instances = self.instances
        stuck = [s.request_id for inst in instances for s in inst.waiting + inst.running]
        if stuck:
            raise PolicyError(f"{len(stuck)} requests never finished (first: {stuck[0]}); the policy stalled")
        seqs = sorted((s for inst in instances for s in inst.finished), key=lambda s: s.request_id)
        return SimResult(self.config, instances[0].policy_name, self.router.name, tuple(seqs), self.now,
                         sum(inst.steps for inst in instances), self.placements,
                         tuple(self.moving.done))  # fmt: skip


_PROGRESS_EVERY = 4096  # loop events between progress reports


def _report_progress(loop: ClusterLoop, progress: Callable[[int, int], None]) -> None:
    finished = sum(len(inst.finished) for inst in loop.instances)
    progress(finished, len(loop.placements) + len(loop.pending))


def simulate(
    requests: Sequence[SimRequest],
    config: SimConfig,
    policy_factory: Callable[[], object],
    router: Router | None = None,
    *,
    check_every_step: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Run ``requests`` to completion; ``policy_factory()`` makes each instance's policy.
    At each request's reasoning->answering transition ``router.route_transition`` places
    its answering phase (PASCAL Algorithm 2); moving it costs ``cost.migrate_s``.
    ``progress(finished, known)`` is called every few thousand events and at the end
    (``known``: requests placed or still to arrive)."""
    loop = ClusterLoop(config, policy_factory, router if router is not None else LeastKVRouter())
    loop.pending = [(r.arrival_s, r.request_id, r) for r in _check_requests(requests, config)]  # sorted
    for _ in loop.run(check=check_every_step, progress=progress):
        pass
    return loop.result()
