"""PASCAL's per-step work on one view, as functions of the policy's parameters: the
running requests split by queue and quantum, a waiting queue by turn, the fill of both
queues into decisions, and the quiet-steps bound (:class:`~reasonserve.policies.pascal.
PascalPolicy` holds the parameters and the rules; read its docstring for the ranking).

A module of the compiled set (:mod:`reasonserve.native`): the simulator asks PASCAL for a
decision at every step that is not quiet, so these run compiled with the simulator when
the build could compile them, else as this source (the same code). Requests and views are
read field by field as Python reads them (``Any``: a host's ints, floats, NaNs or other
comparable values give the same decisions, or raise the same errors, either way).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from reasonserve.core.decisions import Decision
from reasonserve.core.phase import Phase
from reasonserve.core.policy import QUIET_FOREVER
from reasonserve.policies._order import order_tie_runs, ordered, ordered_plain
from reasonserve.policies._ranked import _Fill, fill_segments

__all__ = ["SHORT", "all_fit", "by_enqueue", "fill_queues", "paced", "queues_by_turn", "quiet_steps",
           "split_running"]  # fmt: skip

_ENQUEUED = attrgetter("enqueued_s")
_BY_TURN = attrgetter("enqueued_s", "request_id")  # a request's turn
NO_PACE = float("-inf")  # no answer token yet, or no pacer: ranks first in its group
SHORT = 256  # below this many requests Python's comparisons beat ordered()'s numpy passes


def paced(r: Any) -> tuple:
    """Low-queue order of running requests: the reader that runs dry first goes first."""
    until = r.paced_until_s
    is_paced = until is not None and until == until  # NaN (a broken host value) reads as no pacer
    return (until if is_paced else NO_PACE, r.enqueued_s, r.request_id)


def by_enqueue(requests: Any) -> list:
    """``requests`` by (enqueue time, id): :func:`ordered`, whose definition is
    :func:`ordered_plain` (the same order). A list shorter than :data:`SHORT` is read one
    comparison at a time (numpy's per-call cost dominates there): times strictly increasing,
    as it is; non-decreasing, each run of equal times by id (what the plain sort does with a
    list it finds in order); anything else (out of order, a NaN), the plain sort."""
    n = len(requests)
    if n >= SHORT:
        return ordered(requests, "enqueued_s")
    if n < 2:
        return list(requests)
    times = [r.enqueued_s for r in requests]
    if all(times[i] < times[i + 1] for i in range(n - 1)):
        return list(requests)
    if all(times[i] <= times[i + 1] for i in range(n - 1)):  # a NaN compares False: never with one
        ties = [i for i in range(n - 1) if times[i] == times[i + 1]]
        out = order_tie_runs(requests, ties, _ENQUEUED)
        if out is not None:
            return out
    return ordered_plain(requests, "enqueued_s")


def all_fit(view: Any) -> Any:
    """Whether every running request keeps its seat, in any order: they fit the seats and,
    with no negative cost, the blocks together (:meth:`_Fill.running` for each, in turn)."""
    running = view.running
    if len(running) > view.max_num_seqs:
        return False
    held = [r.num_blocks for r in running]
    needed = [r.blocks_needed for r in running]
    return sum(needed) <= view.free_blocks and min(held + needed, default=0) >= 0


def split_running(running: Any, quantum: Any, limit: Any) -> tuple[list, list, list, list]:
    """The running requests of the high queue (within their quantum, expired) and of the low
    queue (within, expired), in one pass: :meth:`PascalPolicy.queue` and
    :meth:`PascalPolicy.quantum_used` inlined."""
    answering = Phase.ANSWERING
    fresh_hi: list = []
    expired_hi: list = []
    fresh_lo: list = []
    expired_lo: list = []
    for r in running:
        used = r.quantum_used
        if r.phase is answering:
            answered = r.num_answer_tokens
            if answered is not None and answered < used:
                used = answered
            (expired_lo if used >= quantum else fresh_lo).append(r)
            continue
        over = r.num_prompt_tokens + r.num_output_tokens - limit
        if over <= 0:
            (expired_hi if used >= quantum else fresh_hi).append(r)
            continue
        if over < used and r.num_prompt_tokens <= limit:
            used = over
        (expired_lo if used >= quantum else fresh_lo).append(r)
    return fresh_hi, expired_hi, fresh_lo, expired_lo


def queues_by_turn(waiting: Any, limit: Any) -> tuple[Any, Any]:
    """The requests of ``waiting`` (in turn order) of the high queue and of the low queue,
    each lazily (a walk stops once its queue's admission is blocked)."""
    return _of_queue(waiting, limit, False), _of_queue(waiting, limit, True)


def _of_queue(waiting: Any, limit: Any, low: bool) -> Any:
    """The requests of ``waiting`` in the low queue (answering, or past ``limit``) if ``low``,
    else those in the high queue."""
    answering = Phase.ANSWERING
    for r in waiting:
        if bool(r.phase is answering or r.num_prompt_tokens + r.num_output_tokens > limit) == low:
            yield r


def fill_queues(
    view: Any, high: Any, low: Any, waiting_hi: Any, waiting_lo: Any, starving: Any, mode: Any
) -> list[Decision]:
    """The decisions of PASCAL's ranking: the high queue (``high``: its running requests within
    their quantum and expired, each by turn; the first interleaved with ``waiting_hi`` by
    turn), then the low queue (``starving`` readers; ``low``'s running requests within their
    quantum by :func:`paced`; ``waiting_lo`` by turn; ``low``'s expired by :func:`paced`),
    each queue's admission head-of-line on its own."""
    fresh_hi, expired_hi = high
    fresh_lo, expired_lo = low
    if len(fresh_lo) > 1:
        fresh_lo = sorted(fresh_lo, key=paced)
    if len(expired_lo) > 1:
        expired_lo = sorted(expired_lo, key=paced)
    fill = _Fill(view, mode)
    fill_segments(fill, [(fresh_hi, waiting_hi, _BY_TURN), (expired_hi, (), _BY_TURN)])
    fill.blocked = False  # the low queue uses what the high queue could not
    fill_segments(fill, [((), starving, _BY_TURN), (fresh_lo, (), _BY_TURN), ((), waiting_lo, _BY_TURN),
                         (expired_lo, (), _BY_TURN)])  # fmt: skip
    return fill.preempts + fill.admits


def quiet_steps(view: Any, quantum: Any, limit: Any) -> Any:
    """:meth:`PascalPolicy.quiet_steps` once something waits (and no starving reader may
    appear): until a running request's quantum expires in a queue with requests waiting,
    or a running reasoning request passes the demotion threshold; at least 1 (an int for
    int token counts; the host checks what it gets)."""
    wait_hi, wait_lo = waiting_queues(view.waiting, limit)
    answering = Phase.ANSWERING
    steps: Any = QUIET_FOREVER
    for r in view.running:
        used = r.quantum_used
        if r.phase is answering:
            answered = r.num_answer_tokens
            if answered is not None and answered < used:
                used = answered
            if wait_lo and used < quantum and quantum - used < steps:
                steps = quantum - used
            continue
        over = r.num_prompt_tokens + r.num_output_tokens - limit
        if over <= 0:  # high; it passes the demotion threshold in 1 - over steps
            if wait_hi and used < quantum and quantum - used < steps:
                steps = quantum - used
            if 1 - over < steps:
                steps = 1 - over
            continue
        if over < used and r.num_prompt_tokens <= limit:
            used = over
        if wait_lo and used < quantum and quantum - used < steps:
            steps = quantum - used
    return max(1, steps)


def waiting_queues(waiting: Any, limit: Any) -> tuple[bool, bool]:
    """Whether some waiting request is in the high queue, in the low queue (stops once both)."""
    answering = Phase.ANSWERING
    hi = lo = False
    for r in waiting:
        if r.phase is answering or r.num_prompt_tokens + r.num_output_tokens > limit:
            lo = True
        else:
            hi = True
        if hi and lo:
            break
    return hi, lo
