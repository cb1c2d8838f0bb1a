"""A quiet stretch: decode steps the policy declared decision-free (its ``quiet_steps``),
run as one event with results identical to stepping one decision at a time.

Stepping exactly, each of the stretch's steps would be an event at the previous step's
end: apply its tokens, ask the policy (no decisions), hand every running request one
token (allocating a KV block where it crosses a block boundary) and start the next
iteration. Here those events are virtual: the iterations are applied lazily, when the
instance is observed (a router reading its load, a migration landing, a request arriving
or being stopped) or at the stretch's last step, which is a real event. An observation
at time ``t`` sees exactly the virtual steps that stepping would have run before it:
those that end before ``t``, and those that end at ``t`` when a real step of a
higher-indexed instance at ``t`` already ran (the event loop breaks ties by instance
index). An arrival or a stop shortens the stretch to the iteration in progress, so the
policy decides again where stepping would first see the change.

Times replicate stepping's float arithmetic: an iteration that starts at ``s`` and lasts
``d`` stamps its tokens ``s + d``, and the next step event is at ``s + ((s + d) - s)``.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import accumulate
from typing import TYPE_CHECKING

from reasonserve.core.policy import QUIET_FOREVER, quiet_steps
from reasonserve.core.views import SchedulerView
from reasonserve.policies.pacer import TokenPacer
from reasonserve.policies.router import InstanceLoad
from reasonserve.sim.cluster.sequence import SimSequence

if TYPE_CHECKING:
    from reasonserve.sim.cluster.instance import SimInstance

__all__ = ["QuietRun", "start_quiet"]

Work = list[tuple[SimSequence, int]]


def start_quiet(inst: SimInstance, view: SchedulerView | None, work: Work, now_s: float) -> QuietRun | None:
    """The steps from ``now_s`` on that need no decision, as one run, or None when there
    are fewer than two (or quiet stretches are off). Called after a step whose decision
    was empty handed out ``work``; ``view`` None: a step the policy was not asked about
    (nothing waits, see :func:`reasonserve.core.policy.quiet_without_waiting`), quiet
    until an event."""
    c = inst.config
    if not c.skip_quiet_steps or c.decode_steps_per_event > 1 or len(work) != len(inst.running):
        return None
    to_event = QUIET_FOREVER  # a finish or an end of thinking
    for s, _ in work:  # every running request; decodes only (or one-token prefill tails)
        out = s.num_output
        if s.prompt_tokens + out - s.num_computed != 1:
            return None
        left = s.reasoning_tokens - out  # SimSequence.tokens_to_event, inlined
        if left <= 0:
            left += s.answer_tokens
        to_event = left if left < to_event else to_event
    if to_event < 2:  # an event at the next step: nothing to skip, whatever the policy says
        return None
    limit = min(QUIET_FOREVER if view is None else quiet_steps(inst.policy, view), to_event)
    if limit > 1:
        limit = _fitting_iterations(work, limit, c.block_size, inst.free_blocks)
    if limit < 2:
        return None
    run = QuietRun(work, now_s, _decode_durations(inst, work, limit))
    past = bisect_right(run.times, c.max_sim_s)  # a step past max_sim_s is a real event (it raises)
    if past < limit - 1:
        run.shorten(past + 1)
    return run


def _fitting_iterations(work: Work, limit: int, size: int, free: int) -> int:
    """The most iterations, up to ``limit``, whose hand-outs all fit the free blocks (the
    first one's already did): stepping would ask the policy at a step where they do not."""
    surely = free // len(work) * size  # in j more iterations a request takes <= ceil(j / size) blocks
    if surely >= limit - 1:
        return limit
    first_over = _Growth([s for s, _ in work], size, limit).first_over(free)
    return limit if first_over is None else min(limit, first_over)


class _Growth:
    """The KV blocks a decoding batch takes in its next ``k`` iterations (each request's
    token of iteration ``k`` included), ``k < most``. A request holding ``b`` blocks with
    ``c`` tokens computed takes its m-th new block at iteration ``t + (m - 1) * size``,
    ``t = b * size - c``. When every ``t`` is in [1, size] (its held blocks cover its next
    token and no more than a block beyond) that is ``n * (k // size)`` plus the ``t`` up to
    ``k % size``; otherwise every threshold below ``most``, sorted."""

    __slots__ = ("n", "offsets", "size", "thresholds")

    def __init__(self, running: list[SimSequence], size: int, most: int) -> None:
        offsets = sorted([s.num_blocks * size - s.num_computed for s in running])
        self.n, self.offsets, self.size, self.thresholds = len(offsets), offsets, size, None
        if offsets and (offsets[0] < 1 or offsets[-1] > size):
            thresholds: list[int] = []
            for t in offsets:
                thresholds += range(t, most, size)
            thresholds.sort()
            self.thresholds = thresholds

    def at(self, k: int) -> int:
        if self.thresholds is not None:
            return bisect_right(self.thresholds, k)
        q, r = divmod(k, self.size)
        return self.n * q + bisect_right(self.offsets, r)

    def first_over(self, free: int) -> int | None:
        """The first ``k`` with ``at(k) > free`` (None: none below ``most``)."""
        if self.thresholds is not None:
            return max(0, self.thresholds[free]) if free < len(self.thresholds) else None
        if not self.n:
            return None
        q, rem = divmod(free, self.n)  # n * q <= free; the (rem + 1)-th offset of block q + 1 passes it
        return q * self.size + self.offsets[rem]


def _decode_durations(inst: SimInstance, work: Work, iterations: int) -> list[float]:
    batch, context, cost = len(work), sum([s.num_computed for s, _ in work]), inst.cost
    if cost.decode_iterations_exact(batch, context, iterations):
        return cost.decode_iterations_s(batch, context, iterations)
    return [cost.step_s([(1, s.num_computed + i) for s, _ in work]) for i in range(iterations)]


class QuietRun:
    """``work``: (sequence, 1) for every running request, in hand-out order; ``ends``:
    each iteration's token timestamp; ``times``: the step event that ends it."""

    __slots__ = ("_summary", "applied", "ends", "times", "work")

    def __init__(self, work: Work, start_s: float, durations: list[float]) -> None:
        self.work, self.applied = work, 0
        self._summary: _LoadSummary | None = None
        if durations and start_s >= max(durations):  # (end - now) is exact (Sterbenz): now + it is end
            self.ends = list(accumulate(durations, initial=start_s))[1:]
            self.times = self.ends.copy()
            return
        ends: list[float] = []
        times: list[float] = []
        now = start_s
        for d in durations:
            end = now + d
            ends.append(end)
            now = now + (end - now)
            times.append(now)
        self.ends, self.times = ends, times

    @property
    def end_s(self) -> float:
        return self.times[-1]

    def processed(self, now_s: float, inclusive: bool) -> int:
        """Virtual steps run by an observation at ``now_s`` (``inclusive``: the one at
        ``now_s`` too); never the last step, which is a real event."""
        done = bisect_right(self.times, now_s) if inclusive else bisect_left(self.times, now_s)
        return min(done, len(self.times) - 1)

    def shorten(self, iterations: int) -> int:
        """Keep the first ``iterations``; returns how many were dropped."""
        dropped = len(self.times) - iterations
        del self.ends[iterations:], self.times[iterations:]
        return dropped

    def catch_up(self, inst: SimInstance, upto: int) -> None:
        """Apply iterations ``applied`` .. ``upto - 1`` to ``inst`` with the blocks their
        hand-outs took; the next one, if any, is in progress and holds the blocks its token
        needs. What :meth:`SimInstance._complete` does, for one decode token per iteration."""
        lo, n = self.applied, upto - self.applied
        if n <= 0:
            return
        self.applied, ends = upto, self.ends
        ahead, size, free = (1 if upto < len(ends) else 0), inst.config.block_size, inst.free_blocks
        stamps = ends[lo:upto]
        for s, _ in self.work:
            if s.status != "running":
                continue
            before = s.num_output
            r, out = s.reasoning_tokens, before + n
            s.num_output, s.num_computed, s.quantum_used = out, s.num_computed + n, s.quantum_used + n
            if before >= r:  # answering all along
                s.answer_times += stamps
            elif out >= r:  # reached its end of thinking, in the last iteration
                s.end_of_thinking_s = ends[lo + r - before - 1]
                if out > r:
                    s.answer_times.extend(ends[lo + r - before : upto])
            if before == 0:
                s.first_token_s = ends[lo]
            if out >= r + s.answer_tokens:
                inst.free_blocks = free
                inst._finish(s, "length", ends[upto - 1])
                free = inst.free_blocks
                continue
            if out == r:
                inst.transitions.append(s)
            grow = -(-(s.num_computed + ahead) // size) - s.num_blocks
            if grow > 0:
                free -= grow
                s.num_blocks += grow
        inst.free_blocks = free

    def load_at(self, inst: SimInstance, upto: int, now_s: float, pacer: TokenPacer) -> InstanceLoad | None:
        """What ``inst.load(now_s, pacer)`` reports after ``catch_up(inst, upto)``, without
        applying the iterations; None unless computable so (then settle and ask ``inst``).

        Closed form while ``applied < upto``: anything but :meth:`catch_up` that changes the
        instance during a stretch (an arrival, a stop, a landing) first cuts the stretch to
        what is applied, so the instance is the stretch's own doing here. Between its first
        and its last iteration no request finishes or ends its thinking (the stretch stops at
        the first), so the phases hold, a running answering request stays fresh (``a_i``)
        until its answer tokens reach the first quantum (``_LoadSummary.fresh_for``), and
        the blocks grow at block boundaries (:class:`_Growth`). A running
        answering request's reader has its latest token, from iteration ``upto - 1``: it is
        not starving while ``now_s`` is within ``tpot`` of that token (else None: the full
        pass decides)."""
        applied, tpot = self.applied, pacer.tpot_s
        if upto <= applied or now_s >= self.ends[upto - 1] + tpot:
            return None
        summary = self._summary
        if summary is None or summary.base != applied:
            summary = self._summary = _LoadSummary(inst, self, pacer)
        k = upto - applied
        free = inst.free_blocks - summary.growth.at(k)
        until = summary.waiting_until
        slo_ok = until is None or not now_s >= until + tpot  # not pacer.starving(until, now_s)
        footprint = inst.total_blocks - free + inst.host_blocks
        fresh = summary.fresh + len(summary.fresh_for) - bisect_right(summary.fresh_for, k)  # a_i then
        return InstanceLoad(inst.instance_id, footprint, slo_ok, summary.reasoning, fresh, free)


class _LoadSummary:
    """A stretch's load terms that hold from its next iteration to its last (see
    :meth:`QuietRun.load_at`), taken when ``base`` iterations were applied. After ``k``
    more iterations, ``a_i`` is ``fresh`` (the waiting answering requests within their
    first quantum) plus the running ones whose answer tokens have not reached it yet
    (``fresh_for`` entries above ``k``), and the running requests have taken
    ``growth.at(k)`` blocks (for the one after too, which is in progress then and holds
    the block its token needs)."""

    __slots__ = ("base", "fresh", "fresh_for", "growth", "reasoning", "waiting_until")

    def __init__(self, inst: SimInstance, run: QuietRun, pacer: TokenPacer) -> None:
        self.base = run.applied
        size, most, quantum = inst.config.block_size, len(run.times) - run.applied, inst.config.quantum_tokens
        reasoning = 0
        fresh_for: list[int] = []  # running answering requests: iterations until their first quantum is used
        for s in inst.running:  # exactly the stretch's requests (no decision changed them)
            answered = s.num_output - s.reasoning_tokens
            if answered < 0:
                reasoning += 1
            elif answered < quantum:
                fresh_for.append(quantum - answered)
        self.growth = _Growth(inst.running, size, most)
        waiting_reasoning, fresh, waiting_until = inst.waiting_load()
        fresh_for.sort()
        self.reasoning, self.fresh = reasoning + waiting_reasoning, fresh
        self.fresh_for, self.waiting_until = fresh_for, waiting_until
