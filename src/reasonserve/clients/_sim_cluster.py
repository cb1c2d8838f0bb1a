"""A :class:`~reasonserve.clients.sim.SimClient`'s requests on a simulated cluster: the
simulator's event loop (:class:`~reasonserve.sim.cluster.ClusterLoop`) driven by an
asyncio event loop whose programs react at the simulator's virtual time.

Virtual time moves only when every coroutine waits: the asyncio loop asks its selector to
wait (``select`` with a timeout other than 0) only when nothing is ready to run, and
:class:`_SimSelector` then runs the simulation to its next report (requests finished, or
a wake-up due) instead, resolving the futures of what finished. So every program has
reacted to one report (submitted, aborted, reported its progress) before the next
decision of any instance. Timers of the asyncio loop itself (``asyncio.sleep``,
``wait_for``) keep wall-clock time; virtual waits are :meth:`_Cluster.sleep_until`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import selectors
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter

from reasonserve.clients.errors import ClientError
from reasonserve.clients.protocol import ProgramProgress
from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError
from reasonserve.core.views import ProgramView, SchedulerView
from reasonserve.policies.router import LeastKVRouter, Router
from reasonserve.sim.cluster.config import SimConfig
from reasonserve.sim.cluster.result import SimResult
from reasonserve.sim.cluster.sequence import SimSequence
from reasonserve.sim.cluster.simulator import ClusterLoop
from reasonserve.sim.workloads.requests import SimRequest

__all__ = ["SimCluster", "program_of", "run_on"]

_PROGRAM_ID = attrgetter("program_id")


@dataclass(frozen=True)
class SimCluster:
    """Where a :class:`~reasonserve.clients.sim.SimClient` runs its requests: ``config``'s
    instances, each under a policy from ``policy_factory()``, placed by ``router`` (None:
    least KV), as :func:`~reasonserve.sim.simulate` runs a workload (``check_every_step``:
    check KV accounting and request placement after every step, as it does)."""

    config: SimConfig
    policy_factory: Callable[[], object]
    router: Router | None = None
    check_every_step: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.config, SimConfig):
            raise InvalidTypeError(f"config must be a SimConfig, got {type(self.config).__name__}")
        if not callable(self.policy_factory):
            raise InvalidArgumentError(f"policy_factory must be callable, got {self.policy_factory!r}")


def program_of(request_id: str) -> str | None:
    """The program a request belongs to: ``{program_id}/...`` (None: no ``/``)."""
    return request_id.rpartition("/")[0] or None


@dataclass(slots=True)
class _Program:
    program_id: str
    arrival_s: float  # when its first request arrived
    live: set[str] = field(default_factory=set)  # its requests submitted and not finished
    progress: ProgramProgress = field(default_factory=ProgramProgress)
    cached: ProgramView | None = None  # the view until the next change

    def view(self) -> ProgramView:
        if self.cached is None:
            p = self.progress
            self.cached = ProgramView(self.program_id, tuple(sorted(self.live)), self.arrival_s, p.knob,
                                      p.max_knob, p.certainty, p.done)  # fmt: skip
        return self.cached


class _Cluster:
    """The cluster loop, its programs' progress and the requests' futures."""

    def __init__(self, spec: SimCluster) -> None:
        router = spec.router if spec.router is not None else LeastKVRouter()
        self.loop = ClusterLoop(spec.config, spec.policy_factory, router, programs=self.views)
        self.check = spec.check_every_step
        self.programs: dict[str, _Program] = {}
        self.waiters: dict[str, Callable[[SimSequence], None]] = {}  # request id -> told when it finishes
        self.sleepers: list[tuple[float, int, asyncio.Future]] = []  # a heap
        self._order = itertools.count()
        self._events: Iterator[float] | None = None  # the loop's run(), suspended at its latest report
        self.aio: asyncio.AbstractEventLoop | None = None

    # what the client does at the loop's now ------------------------------------------
    def submit(self, req: SimRequest, on_finish: Callable[[SimSequence], None]) -> None:
        self.loop.submit(req)
        self.waiters[req.request_id] = on_finish
        pid = req.program_id
        if pid is not None:
            program = self.programs.setdefault(pid, _Program(pid, req.arrival_s))
            program.live.add(req.request_id)
            program.cached = None

    def check_fits(self, request_id: str, prompt_tokens: int, max_tokens: int) -> None:
        """A request up to ``max_tokens`` long must fit an instance's KV (before its tokens are drawn)."""
        config = self.loop.config
        limit = config.num_blocks * config.block_size
        if prompt_tokens + max_tokens > limit:
            need = prompt_tokens + max_tokens
            raise InvalidArgumentError(f"request {request_id} may need {need} tokens of KV; an instance has "
                                       f"{limit}")  # fmt: skip

    def stop(self, request_id: str) -> int:
        """Stop a request now (its KV freed); returns the tokens it generated. One in flight
        between instances runs on, unheard."""
        seq = next((inst.by_id[request_id] for inst in self.loop.instances if request_id in inst.by_id), None)
        self.loop.stop(request_id)
        self._forget(request_id)
        return 0 if seq is None else seq.num_output

    def _forget(self, request_id: str) -> None:
        self.waiters.pop(request_id, None)
        program = self.programs.get(program_of(request_id) or "")
        if program is not None and request_id in program.live:
            program.live.discard(request_id)
            program.cached = None

    def report(self, program_id: str, progress: ProgramProgress) -> None:
        if not isinstance(program_id, str) or not program_id:
            raise InvalidArgumentError(f"program_id must be a non-empty str, got {program_id!r}")
        if not isinstance(progress, ProgramProgress):
            raise InvalidTypeError(f"progress must be a ProgramProgress, got {type(progress).__name__}")
        program = self.programs.setdefault(program_id, _Program(program_id, self.loop.now))
        program.progress, program.cached = progress, None

    def views(self, view: SchedulerView) -> tuple[ProgramView, ...]:
        """The progress of the programs with a request in ``view``, by program id."""
        pids = set(map(_PROGRAM_ID, view.waiting))
        pids.update(map(_PROGRAM_ID, view.running))
        programs = self.programs
        return tuple(programs[p].view() for p in sorted(pids & programs.keys()))

    def sleep_until(self, when: float) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self.sleepers, (when, next(self._order), fut))
        self.loop.wake_at(when)
        return fut

    # virtual time ---------------------------------------------------------------------
    def advance(self) -> bool:
        """Run the simulation to its next report and tell what finished and who wakes;
        False when it has nothing left to run."""
        if self._events is None:
            if not self.loop.has_events():
                return False
            self._events = self.loop.run(listen=True, check=self.check)
        try:
            next(self._events)
        except StopIteration:
            self._events = None
        now = self.loop.now
        for seq in self.loop.take_finished():
            tell = self.waiters.pop(seq.request_id, None)
            self._forget(seq.request_id)
            if tell is not None:
                tell(seq)
        while self.sleepers and self.sleepers[0][0] <= now:
            fut = heapq.heappop(self.sleepers)[2]
            if not fut.done():
                fut.set_result(None)
        return True

    def result(self) -> SimResult:
        """What the cluster ran, once nothing is left to run (requests no one waits for
        any more run to their end first)."""
        if self._events is not None or self.loop.has_events():
            for _ in self._events or self.loop.run(listen=True, check=self.check):
                self.loop.take_finished()
            self._events = None
        return self.loop.result()


class _SimSelector(selectors.BaseSelector):
    """The asyncio loop's selector: where the loop would wait, the simulation advances."""

    def __init__(self, cluster: _Cluster) -> None:
        self._inner, self._cluster = selectors.DefaultSelector(), cluster

    def register(self, fileobj, events, data=None):  # type: ignore[no-untyped-def]
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj):  # type: ignore[no-untyped-def]
        return self._inner.unregister(fileobj)

    def get_map(self):  # type: ignore[no-untyped-def]
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()

    def select(self, timeout: float | None = None):  # type: ignore[no-untyped-def]
        if timeout is None or timeout > 0:  # nothing is ready: every coroutine waits
            if self._cluster.advance():
                timeout = 0
            elif timeout is None:
                raise ClientError(
                    "every coroutine waits and the simulation has nothing left to run: "
                    "a program waits for something no simulated request will finish"
                )
        return self._inner.select(timeout)


def run_on(cluster: _Cluster, main) -> object:  # type: ignore[no-untyped-def]
    """Run ``main`` (a coroutine) to completion on an asyncio loop driving ``cluster``."""
    if cluster.aio is not None:
        raise InvalidArgumentError("this SimClient is already running programs")
    aio = asyncio.SelectorEventLoop(_SimSelector(cluster))
    cluster.aio = aio
    try:
        return aio.run_until_complete(main)
    finally:
        try:
            aio.run_until_complete(aio.shutdown_asyncgens())
        finally:
            aio.close()
            cluster.aio = None

