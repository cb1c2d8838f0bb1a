"""PASCAL's intra-instance scheduler (Kim et al., "PASCAL: A Phase-Aware Scheduling
Algorithm for Serving Reasoning-based LLMs", §IV-C).

Two queues (:mod:`~reasonserve.policies.pascal.rule`: which queue a request is in and how
much of its quantum it used). KV blocks go to the high queue first; answering requests use
what is left and are preempted first when memory runs out (swap by default, as the paper
offloads to CPU). Each queue is round-robin with its own token ``quantum``: a running
request that used its quantum ranks behind the waiting requests of its queue.

Controlled preemption with the token pacer (§IV-C): in the low queue, running requests
within their quantum keep their seats ahead of waiting ones (round-robin turns change
only when a quantum is used up), and among running ones the request whose user has the
most paced answer tokens still to read (latest ``paced_until_s``) ranks last, so it is
the one preempted when reasoning needs the memory; a request whose reader is starving
or has no answer token yet ranks first. A host without a pacer (``paced_until_s`` None
everywhere) gets turn order.

Each queue's admission is head-of-line on its own (§IV-B/§IV-C: answering requests "rely
on whatever GPU memory remains once the high-priority queue has allocated KV cache space
for reasoning requests"): a reasoning request that does not fit blocks the reasoning
requests behind it, not the answering requests, which may use the blocks it cannot. It
still ranks ahead of every answering request, so it takes their blocks once they would
make it fit.

``starving_first`` (an option beyond the paper, off by default): a waiting answering
request whose reader the pacer reports starving (:meth:`TokenPacer.starving` at the
view's time) ranks ahead of the running answering requests, earliest release time first.

Pure: the ranking is a function of the view. The token pacer and QoE live in
:mod:`reasonserve.policies.pacer`, instance placement (Algorithms 1 and 2) in
:mod:`reasonserve.policies.router`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from typing import ClassVar

from reasonserve.core.checks import check_int
from reasonserve.core.columns import PHASE_CODES, columns_of
from reasonserve.core.decisions import Decision
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.core.phase import Phase
from reasonserve.core.policy import QUIET_FOREVER
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies._order import chunked, column_order, ordered
from reasonserve.policies._ranked import Fill, Segment, all_fit, fill_segments
from reasonserve.policies.pacer import TokenPacer
from reasonserve.policies.pascal.rule import HIGH, LOW, in_low_queue, place

__all__ = ["PascalPolicy"]

_BY_TURN = attrgetter("enqueued_s", "request_id")  # a request's round-robin turn
_ANSWERING = Phase.ANSWERING
_NO_PACE = float("-inf")  # no answer token yet, or no pacer: ranks first in its group


def _paced(r: RequestView) -> tuple:
    """Low-queue order of running requests: the reader that runs dry first goes first."""
    until = r.paced_until_s
    is_paced = until is not None and until == until  # NaN (a broken host value) reads as no pacer
    return (until if is_paced else _NO_PACE, r.enqueued_s, r.request_id)


@dataclass(slots=True)
class _LastView:
    """What a policy read of the last view it was given, each entry with the tuple it was
    read from (compared by identity; a pair, so a reader sees a key and its value together).
    Only a cache: the answers are the same without it."""

    running: tuple[Sequence[RequestView], list[tuple[int, int]]] | None = None
    waiting: tuple[Sequence[RequestView], tuple[bool, bool]] | None = None


@dataclass(frozen=True, slots=True)
class PascalPolicy:
    quantum: int = 500  # tokens, for each queue (paper §V-A)
    demote_threshold_tokens: int = 5000  # paper §V-A
    mode: str | None = "swap"
    name: str = "pascal"
    starving_first: TokenPacer | None = None  # beyond the paper: resume starving readers first
    _seen: _LastView = field(default_factory=lambda: _LastView(), init=False, repr=False, compare=False)
    # nothing waiting and every running request fits (block counts >= 0, as hosts build them):
    # the ranking orders only requests that all keep their seats
    quiet_without_waiting: ClassVar[bool] = True  # see reasonserve.core.policy

    def __post_init__(self) -> None:
        check_int("quantum", self.quantum, 1)
        check_int("demote_threshold_tokens", self.demote_threshold_tokens, 0)
        if self.mode not in (None, "recompute", "swap"):
            raise InvalidArgumentError(f"mode must be None, 'recompute' or 'swap', got {self.mode!r}")
        if self.starving_first is not None and not isinstance(self.starving_first, TokenPacer):
            kind = type(self.starving_first).__name__
            raise InvalidArgumentError(f"starving_first must be None or a TokenPacer, got {kind}")

    def queue(self, r: RequestView) -> int:
        """0 (high: prefill/reasoning) or 1 (low: answering, or demoted reasoning)."""
        return place(r, self.demote_threshold_tokens)[0]

    def quantum_used(self, r: RequestView) -> int:
        """Tokens ``r`` computed since it was admitted and since it entered its queue."""
        return place(r, self.demote_threshold_tokens)[1]

    def rank_key(self, r: RequestView, running: bool) -> tuple:
        """``decide``'s ranking as a sort key (without ``starving_first``, which reads the
        view's time; admission stays head-of-line per queue)."""
        queue, used = place(r, self.demote_threshold_tokens)
        expired = running and used >= self.quantum
        if queue == HIGH:
            return (HIGH, int(expired), _NO_PACE, r.enqueued_s, r.request_id)
        if not running:
            return (LOW, 1, _NO_PACE, r.enqueued_s, r.request_id)
        return (LOW, 2 if expired else 0, *_paced(r))

    def decide(self, view: SchedulerView) -> Sequence[Decision]:
        if not view.waiting and all_fit(view):  # the ranking orders only running requests that all fit
            return []
        fresh_hi, expired_hi, fresh_lo, expired_lo = self._running_by_queue(view.running)
        waiting_hi, waiting_lo = self._waiting_by_queue(view)  # lazily, by turn
        starving: list[RequestView] = []
        if self.starving_first is not None:
            waiting_lo = list(waiting_lo)
            dry = [self._starving(r, view.now_s) for r in waiting_lo]  # read each pacer once
            starving = sorted(compress(waiting_lo, dry), key=_paced)
            waiting_lo = [r for r, d in zip(waiting_lo, dry, strict=True) if not d]
        fill = Fill(view, self.mode)
        high: list[Segment] = [(fresh_hi, waiting_hi, _BY_TURN), (expired_hi, (), _BY_TURN)]
        fill_segments(fill, high)
        fill.blocked = False  # the low queue's admission: with what the high queue could not use
        fresh_lo, expired_lo = sorted(fresh_lo, key=_paced), sorted(expired_lo, key=_paced)
        low: list[Segment] = [((), starving, _BY_TURN), (fresh_lo, (), _BY_TURN), ((), waiting_lo, _BY_TURN),
                              (expired_lo, (), _BY_TURN)]  # fmt: skip
        fill_segments(fill, low)
        return fill.preempts + fill.admits

    def _running_by_queue(self, running: Sequence[RequestView]) -> tuple[list, list, list, list]:
        """The running requests of the high queue (within their quantum, expired) and of the
        low queue (within, expired); the high ones by turn."""
        parts: tuple[list, list, list, list] = ([], [], [], [])
        quantum = self.quantum
        for r, (queue, used) in zip(running, self._placed(running), strict=True):
            parts[2 * queue + (used >= quantum)].append(r)
        fresh_hi, expired_hi, fresh_lo, expired_lo = parts
        return ordered(fresh_hi, "enqueued_s"), ordered(expired_hi, "enqueued_s"), fresh_lo, expired_lo

    def _waiting_by_queue(self, view: SchedulerView) -> tuple[Iterable[RequestView], Iterable[RequestView]]:
        """The waiting requests of the high and of the low queue, each by turn (enqueue time,
        id), lazily: a walk stops once its queue's admission is blocked. With the host's
        columns, the turn order is one numpy sort of the enqueue-time column and the queue
        rule runs on the phase and token columns."""
        limit = self.demote_threshold_tokens
        if view.waiting_columns is not None:
            cols = columns_of(view)
            order = column_order(cols.column("enqueued_s"), view.waiting)
            if order is not None:
                answering = cols.column("phase") == PHASE_CODES[Phase.ANSWERING]
                tokens = cols.column("num_prompt_tokens") + cols.column("num_output_tokens")
                low = in_low_queue(answering, tokens, limit)[order]
                at = view.waiting.__getitem__
                return map(at, chunked(order[~low])), map(at, chunked(order[low]))
        turn = ordered(view.waiting, "enqueued_s")  # each walk reads only as far as its admission goes
        return _of_queue(turn, limit, False), _of_queue(turn, limit, True)

    def _starving(self, r: RequestView, now_s: float) -> bool:
        until = r.paced_until_s
        return until is not None and self.starving_first.starving(until, now_s)  # type: ignore[union-attr]

    def quiet_steps(self, view: SchedulerView) -> int:
        """No decision stays no decision while the ranking holds (the blocks left for the
        first waiting request of each queue only shrink as the batch decodes): with nothing
        waiting, for ever; else until a running request's quantum expires in a queue with
        requests waiting, or a running reasoning request passes the demotion threshold. With
        ``starving_first``, one step while a waiting answering reader has not run dry yet
        (it may at any time)."""
        if not view.waiting:
            return QUIET_FOREVER
        limit = self.demote_threshold_tokens
        if self.starving_first is not None and any(  # a reader may start starving at any step
            self.queue(r) == LOW and r.paced_until_s is not None and not self._starving(r, view.now_s)
            for r in view.waiting
        ):
            return 1
        steps, fresh = QUIET_FOREVER, [QUIET_FOREVER, QUIET_FOREVER]  # per queue: the first quantum to expire
        for r, (queue, used) in zip(view.running, self._placed(view.running), strict=True):
            if used < self.quantum:
                fresh[queue] = min(fresh[queue], self.quantum - used)
            if queue == HIGH:  # demoted once its sequence passes the threshold
                steps = min(steps, limit + 1 - r.num_prompt_tokens - r.num_output_tokens)
        waits = self._waits(view.waiting)
        for queue in (HIGH, LOW):  # an expiry matters only with requests of its queue waiting
            if fresh[queue] < steps and waits[queue]:
                steps = fresh[queue]
        return max(1, steps)

    def _placed(self, running: Sequence[RequestView]) -> list[tuple[int, int]]:
        """:func:`place` of each running request (read once per view: ``decide`` and then
        ``quiet_steps`` ask it of the same view)."""
        seen = self._seen.running
        if seen is not None and seen[0] is running:
            return seen[1]
        limit = self.demote_threshold_tokens
        placed = [place(r, limit) for r in running]
        self._seen.running = (running, placed)
        return placed

    def _waits(self, waiting: Sequence[RequestView]) -> tuple[bool, bool]:
        """Whether some waiting request is in the high queue, in the low queue (read once
        per waiting tuple: a host keeps it while its queue holds)."""
        seen = self._seen.waiting
        if seen is not None and seen[0] is waiting:
            return seen[1]
        limit, found = self.demote_threshold_tokens, [False, False]
        for r in waiting:
            low = in_low_queue(r.phase is _ANSWERING, r.num_prompt_tokens + r.num_output_tokens, limit)
            found[low] = True
            if found[HIGH] and found[LOW]:
                break
        waits = (found[HIGH], found[LOW])
        self._seen.waiting = (waiting, waits)
        return waits


def _of_queue(turn: Iterable[RequestView], limit: int, low: bool) -> Iterator[RequestView]:
    """The requests of ``turn`` in the low queue if ``low``, else those in the high queue."""
    answering = Phase.ANSWERING
    for r in turn:
        if in_low_queue(r.phase is answering, r.num_prompt_tokens + r.num_output_tokens, limit) == low:
            yield r

