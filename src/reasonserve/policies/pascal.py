"""PASCAL's intra-instance scheduler (Kim et al., "PASCAL: A Phase-Aware Scheduling
Algorithm for Serving Reasoning-based LLMs", §IV-C).

Two queues: the high-priority queue holds requests in the reasoning phase (prefill
included), the low-priority queue holds answering requests. KV blocks go to the high
queue first; answering requests use what is left and are preempted first when memory
runs out (swap by default, as the paper offloads to CPU). Each queue is round-robin
with its own token ``quantum`` (§V-A: 500 for each queue): a request's quantum counts
the tokens it computed since it was admitted *and* since it entered its queue, so a
request that reaches its end of thinking starts the low queue with a fresh quantum. A
running request that used its quantum ranks behind the waiting requests of its queue.
A reasoning request whose sequence exceeds ``demote_threshold_tokens`` (prompt +
generated tokens; the paper uses 5000) is demoted to the low queue.

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

Pure: the ranking is a function of the view (phase, token counts, quantum used, answer
tokens, pacer release time, enqueue time, id). The token pacer and QoE live in
:mod:`reasonserve.policies.pacer`; instance placement (Algorithms 1 and 2) in
:mod:`reasonserve.policies.router`; the per-step work (the running requests split by queue
and quantum, the queues by turn, the fill, the quiet-steps bound) in
:mod:`reasonserve.policies.pascal_queues`, which the simulator's build compiles.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter, is_
from typing import ClassVar

import numpy as np

from reasonserve.core.columns import QueueColumns, columns_of
from reasonserve.core.decisions import Decision
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.core.phase import Phase
from reasonserve.core.policy import QUIET_FOREVER
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies._order import chunked, column_order
from reasonserve.policies.pacer import TokenPacer
from reasonserve.policies.pascal_queues import NO_PACE as _NO_PACE
from reasonserve.policies.pascal_queues import (
    all_fit,
    fill_queues,
    queues_by_turn,
    quiet_steps,
    split_running,
)
from reasonserve.policies.pascal_queues import by_enqueue as _by_enqueue
from reasonserve.policies.pascal_queues import paced as _paced

__all__ = ["PascalPolicy"]

HIGH, LOW = 0, 1


def _check_int(name: str, value: object, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise InvalidArgumentError(f"{name} must be an int >= {low}, got {value!r}")


@dataclass(frozen=True, slots=True)
class PascalPolicy:
    quantum: int = 500  # tokens, for each queue (paper §V-A)
    demote_threshold_tokens: int = 5000  # paper §V-A
    mode: str | None = "swap"
    name: str = "pascal"
    starving_first: TokenPacer | None = None  # beyond the paper: resume starving readers first
    # nothing waiting and every running request fits (block counts >= 0, as hosts build them):
    # the ranking orders only requests that all keep their seats
    quiet_without_waiting: ClassVar[bool] = True  # see reasonserve.core.policy

    def __post_init__(self) -> None:
        _check_int("quantum", self.quantum, 1)
        _check_int("demote_threshold_tokens", self.demote_threshold_tokens, 0)
        if self.mode not in (None, "recompute", "swap"):
            raise InvalidArgumentError(f"mode must be None, 'recompute' or 'swap', got {self.mode!r}")
        if self.starving_first is not None and not isinstance(self.starving_first, TokenPacer):
            kind = type(self.starving_first).__name__
            raise InvalidArgumentError(f"starving_first must be None or a TokenPacer, got {kind}")

    def queue(self, r: RequestView) -> int:
        """0 (high: prefill/reasoning) or 1 (low: answering, or demoted reasoning)."""
        if r.phase is Phase.ANSWERING:
            return LOW
        return LOW if r.num_tokens > self.demote_threshold_tokens else HIGH

    def quantum_used(self, r: RequestView) -> int:
        """Tokens ``r`` computed since it was admitted and since it entered its queue (its
        answer tokens, or the tokens past the demotion threshold, when fewer)."""
        used = r.quantum_used
        if r.phase is Phase.ANSWERING:
            return used if r.num_answer_tokens is None else min(used, r.num_answer_tokens)
        over = r.num_tokens - self.demote_threshold_tokens  # > 0: demoted (from the start if its prompt is)
        return min(used, over) if over > 0 and r.num_prompt_tokens <= self.demote_threshold_tokens else used

    def rank_key(self, r: RequestView, running: bool) -> tuple:
        """``decide``'s ranking as a sort key (without ``starving_first``, which reads the
        view's time; admission stays head-of-line per queue)."""
        queue = self.queue(r)
        expired = running and self.quantum_used(r) >= self.quantum
        if queue == HIGH:
            return (HIGH, int(expired), _NO_PACE, r.enqueued_s, r.request_id)
        if not running:
            return (LOW, 1, _NO_PACE, r.enqueued_s, r.request_id)
        return (LOW, 2 if expired else 0, *_paced(r))

    def decide(self, view: SchedulerView) -> Sequence[Decision]:
        if not view.waiting and all_fit(view):  # the ranking orders only running requests that all fit
            return []
        fresh_hi, expired_hi, fresh_lo, expired_lo = split_running(
            view.running, self.quantum, self.demote_threshold_tokens
        )
        waiting_hi, waiting_lo = self._split_waiting(view)  # lazily, by turn
        high = (_by_enqueue(fresh_hi), _by_enqueue(expired_hi))
        starving: list[RequestView] = []
        if self.starving_first is not None:
            waiting_lo = list(waiting_lo)
            dry = [self._starving(r, view.now_s) for r in waiting_lo]  # read each pacer once
            starving = sorted((r for r, d in zip(waiting_lo, dry, strict=True) if d), key=_paced)
            waiting_lo = [r for r, d in zip(waiting_lo, dry, strict=True) if not d]
        return fill_queues(view, high, (fresh_lo, expired_lo), waiting_hi, waiting_lo, starving, self.mode)

    def _split_waiting(self, view: SchedulerView) -> tuple[Iterator[RequestView], Iterator[RequestView]]:
        """The waiting requests of the high and of the low queue, each by turn (enqueue time,
        id), lazily. With the host's columns: one numpy sort of the enqueue-time column and
        the demotion test on the token columns; a request's phase is read when it is reached.
        Else (or where the columns cannot decide as the objects do) one sort of the objects."""
        limit = self.demote_threshold_tokens
        if view.waiting_columns is not None:
            cols = columns_of(view)
            order = column_order(cols.column("enqueued_s"), view.waiting)
            demoted = _demoted(cols, limit)
            if order is not None and demoted is not None:
                return _walk_columns(view.waiting, order, demoted)
        return queues_by_turn(_by_enqueue(view.waiting), limit)  # self.queue(r) == LOW inlined

    def _starving(self, r: RequestView, now_s: float) -> bool:
        until = r.paced_until_s
        return until is not None and self.starving_first.starving(until, now_s)  # type: ignore[union-attr]

    def quiet_steps(self, view: SchedulerView) -> int:
        """No decision stays no decision while the ranking holds (the blocks left for the
        first waiting request of each queue only shrink as the batch decodes): with nothing
        waiting, for ever; else until a running request's quantum expires in a queue with
        requests waiting, or a running reasoning request passes the demotion threshold. With
        ``starving_first``, one step while a waiting answering reader has not run dry yet
        (it may at any time). One pass over the running requests
        (:func:`~reasonserve.policies.pascal_queues.quiet_steps`)."""
        if not view.waiting:
            return QUIET_FOREVER
        if self.starving_first is not None and any(  # a reader may start starving at any step
            self.queue(r) == LOW and r.paced_until_s is not None and not self._starving(r, view.now_s)
            for r in view.waiting
        ):
            return 1
        return quiet_steps(view, self.quantum, self.demote_threshold_tokens)


_INT64_MAX = int(np.iinfo(np.int64).max)
_PHASE = attrgetter("phase")
_EAGER = 256  # waiting requests a column walk checks one by one before reading every phase


def _demoted(cols: QueueColumns, limit: int) -> np.ndarray | None:
    """Per waiting request, whether its tokens (prompt + generated) pass ``limit``, from the
    host's columns; None where int64 could overflow where Python's ints do not (a negative
    count, or ``limit`` beyond int64): then the objects decide."""
    prompt, output = cols.column("num_prompt_tokens"), cols.column("num_output_tokens")
    if limit > _INT64_MAX or (len(prompt) and min(int(prompt.min()), int(output.min())) < 0):
        return None
    return prompt > limit - output  # limit - output: in int64 for 0 <= output, 0 <= limit


def _walk_columns(
    waiting: Sequence[RequestView], order: np.ndarray, demoted: np.ndarray
) -> tuple[Iterator[RequestView], Iterator[RequestView]]:
    """(high, low) waiting requests in ``order``, lazily: a request is low if ``demoted`` or
    answering. Each walk reads the phase of a request when it reaches it for its first
    ``_EAGER`` candidates, then every waiting request's phase in one C-level pass (a walk
    that reaches that far usually finds few of its own: a queue of fresh arrivals has no
    answering request for the low walk to yield)."""
    answering = Phase.ANSWERING
    mask: list[np.ndarray] = []  # every waiting request's "answering", read once if needed

    def answering_rows() -> np.ndarray:
        if not mask:
            phases = map(is_, map(_PHASE, waiting), repeat(answering))
            mask.append(np.fromiter(phases, bool, len(waiting)))
        return mask[0]

    def high() -> Iterator[RequestView]:
        rows = order[~demoted[order]]
        for r in map(waiting.__getitem__, rows[:_EAGER].tolist()):
            if r.phase is not answering:
                yield r
        if len(rows) > _EAGER:
            rest = rows[_EAGER:]
            yield from map(waiting.__getitem__, chunked(rest[~answering_rows()[rest]]))

    def low() -> Iterator[RequestView]:
        head = order[:_EAGER]
        for i, d in zip(head.tolist(), demoted[head].tolist(), strict=True):
            r = waiting[i]
            if d or r.phase is answering:
                yield r
        if len(order) > _EAGER:
            rest = order[_EAGER:]
            yield from map(waiting.__getitem__, chunked(rest[(demoted | answering_rows())[rest]]))

    return high(), low()
