"""One simulated serving instance: queues, KV blocks, a policy object's decisions, and the
cost of each step. It follows the host contract the embedded engine follows too
(:mod:`reasonserve.core.hosting`: all-or-none validation, token hand-out in the policy's
order, decodes first, the liveness preemption), so the same policy objects run on both."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from reasonserve.core.errors import PolicyError
from reasonserve.core.hosting import Plan, check_decisions, hand_out_live
from reasonserve.core.phase import Phase
from reasonserve.core.policy import check_policy, policy_name, quiet_without_waiting
from reasonserve.core.views import ProgramView, RequestView, SchedulerView
from reasonserve.cost.profile import ProfileCostModel
from reasonserve.cost.roofline import RooflineCostModel
from reasonserve.policies.pacer import TokenPacer
from reasonserve.policies.router import InstanceLoad
from reasonserve.sim.cluster.config import SimConfig
from reasonserve.sim.cluster.quiet import QuietRun, start_quiet
from reasonserve.sim.cluster.run import StepRun
from reasonserve.sim.cluster.sequence import SimSequence
from reasonserve.sim.workloads.requests import SimRequest

__all__ = ["SimInstance"]

_PREFILL, _REASONING, _ANSWERING = Phase.PREFILL, Phase.REASONING, Phase.ANSWERING


def _pending(seqs: Sequence[SimSequence]) -> list[int]:
    """The tokens each of ``seqs`` has left to compute (its prompt and those sampled so far)."""
    return [s.prompt_tokens + s.num_output - s.num_computed for s in seqs]


class SimInstance:
    def __init__(
        self, instance_id: str, config: SimConfig, cost: RooflineCostModel | ProfileCostModel, policy: object
    ) -> None:
        self.instance_id, self.config, self.cost = instance_id, config, cost
        self.block_size = config.block_size
        self.policy, self.policy_name = check_policy(policy), policy_name(policy)
        self.total_blocks = self.free_blocks = config.num_blocks
        self.host_blocks = 0  # blocks' worth of KV swapped out to host memory
        self.waiting: list[SimSequence] = []
        self.running: list[SimSequence] = []
        self.by_id: dict[str, SimSequence] = {}
        self.finished: list[SimSequence] = []
        self.transitions: list[SimSequence] = []  # reached end of thinking this step (still running)
        self.run: StepRun | QuietRun | None = None  # the run in progress (applied as time passes)
        self.steps = 0
        self._waiting_views: dict[str, RequestView] = {}  # by request id, while it waits
        self._waiting_tuple: tuple[RequestView, ...] | None = None  # the queue's views while it holds
        self._waiting_load: tuple[int, int, float | None] | None = None  # see waiting_load
        self.pacer = TokenPacer(config.tpot_slo_s)  # PASCAL's token pacer over each answer
        # the programs' progress for a view (SchedulerView.programs), where the host reports it
        self.programs: Callable[[SchedulerView], tuple[ProgramView, ...]] | None = None
        quiet = config.skip_quiet_steps and config.decode_steps_per_event == 1
        self._idle_quiet = quiet and quiet_without_waiting(self.policy)  # see _batch_fits

    def _batch_fits(self) -> bool:
        """Every running request keeps its seat and gets the blocks its pending tokens need
        (what a policy declaring ``quiet_without_waiting`` needs to decide nothing when
        nothing waits; :func:`reasonserve.core.policy.quiet_without_waiting`)."""
        running, size = self.running, self.block_size
        if len(running) > self.config.max_num_seqs:
            return False
        need = 0
        for s in running:
            grow = -(-(s.prompt_tokens + s.num_output) // size) - s.num_blocks
            if grow > 0:
                need += grow
        return need <= self.free_blocks

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.config.block_size)

    # what the host contract reads (reasonserve.core.hosting.Host) ----------------------
    @property
    def max_num_seqs(self) -> int:
        return self.config.max_num_seqs

    def lookup(self, request_id: str) -> SimSequence | None:
        return self.by_id.get(request_id)

    def released(self, leaving: list[SimSequence]) -> int:
        return sum(s.num_blocks for s in leaving)

    def growth(self, s: SimSequence) -> int:
        """More blocks running ``s`` needs for all its pending tokens."""
        more = -(-(s.prompt_tokens + s.num_output) // self.block_size) - s.num_blocks
        return more if more > 0 else 0

    def add(self, req: SimRequest, now_s: float) -> None:
        seq = SimSequence(req, now_s)
        self.waiting.append(seq)
        self._waiting_changed()
        self.by_id[req.request_id] = seq

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # views -----------------------------------------------------------------------------
    def request_view(self, s: SimSequence) -> RequestView:
        """``s`` (waiting or running) as the policy sees it."""
        return self.request_views((s,))[0]

    def request_views(self, seqs: Sequence[SimSequence]) -> tuple[RequestView, ...]:
        """:meth:`request_view` of each of ``seqs``, in one loop (a host builds one per
        running request per step)."""
        size, paced_until, views = self.block_size, self.paced_until, []
        for s in seqs:
            out, prompt, reasoning, times = s.num_output, s.prompt_tokens, s.reasoning_tokens, s.answer_times
            phase = _PREFILL if out == 0 else _REASONING if out < reasoning else _ANSWERING
            if s.status == "running":
                need, quantum = -(-(prompt + out) // size) - s.num_blocks, s.quantum_used
            else:
                need, quantum = -(-(s.num_computed if s.swapped else prompt + out) // size), 0
            if not times:
                until = None
            elif len(times) == s.paced_tokens:  # the pacer's fold is up to date
                until = s.paced_s
            else:
                until = paced_until(s)
            views.append(RequestView(
                s.request_id, s.arrival_s, phase, prompt, s.num_computed, out, 0, s.num_blocks,
                need if need > 0 else 0, s.enqueued_s, quantum, reasoning + s.answer_tokens, s.program_id,
                s.prefix_hashes, False, s.swapped, len(times), until,
            ))  # fmt: skip
        return tuple(views)

    def paced_until(self, s: SimSequence) -> float | None:
        """When the pacer has released ``s``'s answer tokens so far, carried forward on ``s``
        (a left fold: the same wherever it resumes; every instance's pacer has the config's
        TPOT)."""
        times = s.answer_times
        if len(times) > s.paced_tokens:
            s.paced_s = self.pacer.released_until(times[s.paced_tokens :], s.paced_s)
            s.paced_tokens = len(times)
        return s.paced_s

    def _waiting_view(self, s: SimSequence) -> RequestView:
        """A waiting request's view, built once per stay in the queue (it does not change there)."""
        view = self._waiting_views.get(s.request_id)
        if view is None:
            view = self._waiting_views[s.request_id] = self.request_view(s)
        return view

    def admission_blocks(self, s: SimSequence) -> int:
        return self.blocks_for(s.num_computed if s.swapped else s.num_tokens)

    def _waiting_changed(self) -> None:
        """The waiting queue gained or lost a request (its requests do not change while
        they wait): drop what was cached of it."""
        self._waiting_tuple = self._waiting_load = None

    def waiting_load(self) -> tuple[int, int, float | None]:
        """The waiting requests' share of :meth:`load`: prefill/reasoning requests, answering
        requests within their first quantum, and the earliest pacer release among them
        (None: none has an answer token); kept while the queue holds."""
        cached = self._waiting_load
        if cached is not None:
            return cached
        reasoning = fresh = 0
        earliest: float | None = None
        quantum = self.config.quantum_tokens
        for s in self.waiting:
            out, think = s.num_output, s.reasoning_tokens
            if out == 0 or out < think:
                reasoning += 1
                continue
            fresh += out - think < quantum
            if s.answer_times:
                until = self.paced_until(s)
                if earliest is None or until < earliest:  # type: ignore[operator]
                    earliest = until
        cached = self._waiting_load = (reasoning, fresh, earliest)
        return cached

    def view(self, now_s: float) -> SchedulerView:
        c, waiting = self.config, self._waiting_tuple
        if waiting is None:
            waiting = self._waiting_tuple = tuple(map(self._waiting_view, self.waiting))
        running = self.request_views(self.running)
        view = SchedulerView(
            now_s, waiting, running, self.free_blocks, c.block_size, c.max_num_seqs, self.total_blocks,
            c.max_num_batched_tokens, self.steps, instance_id=self.instance_id,
        )  # fmt: skip
        programs = () if self.programs is None else self.programs(view)
        return replace(view, programs=programs) if programs else view

    def load(self, now_s: float, pacer: TokenPacer) -> InstanceLoad:
        """PASCAL's instance state (one pass over the live requests): ``t_i`` is False when
        an answering request's pacer has run dry (:meth:`TokenPacer.starving`), ``r_i``
        counts prefill/reasoning requests, ``a_i`` answering requests that have not
        exhausted their first quantum (fewer than ``config.quantum_tokens`` answer tokens,
        PASCAL §IV-B, Algorithm 2), running or waiting."""
        reasoning, fresh, earliest = self.waiting_load()  # a waiting reader starves first at the earliest
        behind, quantum = earliest is not None and pacer.starving(earliest, now_s), self.config.quantum_tokens
        for s in self.running:
            out, think = s.num_output, s.reasoning_tokens
            if out == 0 or out < think:  # Phase.PREFILL or Phase.REASONING
                reasoning += 1
                continue
            if out - think < quantum:  # its answer tokens so far
                fresh += 1
            if s.answer_times and not behind:
                behind = pacer.starving(self.paced_until(s), now_s)  # type: ignore[arg-type]
        used = self.total_blocks - self.free_blocks
        footprint = used + self.host_blocks
        return InstanceLoad(self.instance_id, footprint, not behind, reasoning, fresh, self.free_blocks)

    def observed_load(self, now_s: float, inclusive: bool, pacer: TokenPacer) -> InstanceLoad:
        """:meth:`load` at an observation at ``now_s`` (see :meth:`settle`); a quiet stretch
        answers in closed form where it can (:meth:`QuietRun.load_at`), without applying
        its iterations yet."""
        run = self.run
        if isinstance(run, QuietRun):
            load = run.load_at(self, run.processed(now_s, inclusive), now_s, pacer)
            if load is not None:
                return load
        self.settle(now_s, inclusive)
        return self.load(now_s, pacer)

    # one step --------------------------------------------------------------------------
    def finish_run(self, now_s: float) -> None:
        """Apply what is left of the run in progress (its requests' finishes and ends of
        thinking happen now; the latter wait in :attr:`transitions`)."""
        run = self.run
        if isinstance(run, QuietRun):
            run.catch_up(self, len(run.times))
        elif run is not None:
            self.advance(now_s, last=True)
        self.run = None

    def step(self, now_s: float) -> float | None:
        """Finish the run in progress, then decide, apply and start the next run; returns
        when the next step is due (None when nothing ran and nothing costs time)."""
        self.finish_run(now_s)
        view: SchedulerView | None = None
        if self._idle_quiet and not self.waiting and self._batch_fits():
            plan: Plan[SimSequence] = Plan()  # the policy declared it decides nothing here
        else:
            view = self.view(now_s)
            plan = check_decisions(self.policy.decide(view), self, self.policy_name)
        extra_s = self._apply(plan, now_s)
        self.steps += 1
        liveness: list[SimSequence] = []

        def preempt(s: SimSequence) -> None:  # the contract's liveness rule (its swap time is not charged)
            liveness.append(s)
            self._preempt(s, self.config.preemption, now_s)

        work = hand_out_live(
            plan, self.running, lookup=self.by_id.get, pending=_pending, grow=self._grow,
            max_num_batched_tokens=self.config.max_num_batched_tokens, preempt=preempt,
        )  # fmt: skip
        quiet = start_quiet(self, view, work, now_s) if work and plan.empty and not liveness else None
        if quiet is not None:
            self.run = quiet
            self.steps += len(quiet.times) - 1
            return quiet.end_s
        if not work:
            return now_s + extra_s if extra_s > 0 else None
        self.run = self._start_run(work, now_s + extra_s)
        self.steps += len(self.run.ends) - 1
        duration = self.run.end_s - now_s
        return now_s + duration if duration > 0 else None

    def settle(self, now_s: float, inclusive: bool = False) -> None:
        """Bring the run in progress up to an observation at ``now_s`` (``inclusive``: a
        quiet stretch's step ending at ``now_s`` has run, see :mod:`reasonserve.sim.cluster.quiet`)."""
        run = self.run
        if isinstance(run, QuietRun):
            run.catch_up(self, run.processed(now_s, inclusive))
        else:
            self.advance(now_s)

    def interrupt(self, now_s: float, inclusive: bool = False) -> float | None:
        """Something changed at ``now_s`` that the policy must see (an arrival, a stop): a
        quiet stretch ends with the iteration in progress; returns its new end, else None."""
        run = self.run
        if not isinstance(run, QuietRun):
            return None
        upto = run.processed(now_s, inclusive)
        run.catch_up(self, upto)
        if upto + 1 >= len(run.times):
            return None
        self.steps -= run.shorten(upto + 1)
        return run.end_s

    def _start_run(self, work: list[tuple[SimSequence, int]], start_s: float) -> StepRun:
        held = [s.num_blocks for s, _ in work]
        k, most = 1, self.config.decode_steps_per_event
        if most > 1 and all(s.num_tokens - s.num_computed == 1 for s, _ in work):  # decodes only
            k = min(most, min(s.tokens_to_event() for s, _ in work))
            while k > 1 and self._growth(work, k) > self.free_blocks:
                k -= 1
        if k == 1:
            return StepRun(work, start_s, [self.cost.step_s([(n, s.num_computed) for s, n in work])], held)
        for s, _ in work:  # reserve the blocks the later iterations fill
            grow = self.blocks_for(s.num_computed + k) - s.num_blocks
            if grow > 0:
                self.free_blocks -= grow
                s.num_blocks += grow
        context = sum(s.num_computed for s, _ in work)
        return StepRun(work, start_s, self.cost.decode_iterations_s(len(work), context, k), held)

    def _growth(self, work: list[tuple[SimSequence, int]], k: int) -> int:
        return sum(max(0, self.blocks_for(s.num_computed + k) - s.num_blocks) for s, _ in work)

    def advance(self, now_s: float, *, last: bool = False) -> None:
        """Apply the run's iterations that ended by ``now_s`` (the last one only if ``last``)."""
        run = self.run
        if not isinstance(run, StepRun):
            return
        upto = run.due(now_s, last=last)
        if upto > run.applied:
            self._complete(run, upto)

    def cut(self, now_s: float, inclusive: bool = False) -> float:
        """Stop the run at the iteration in progress at ``now_s`` (a request landed); give
        back the blocks reserved for the dropped iterations; returns when it ends."""
        run = self.run
        if run is None:
            return now_s
        if isinstance(run, QuietRun):  # as stepping's cut: the iteration in progress applies now
            upto = run.processed(now_s, inclusive) + 1
            self.steps -= run.shorten(upto)
            run.catch_up(self, upto)
            return run.ends[-1]
        upto = run.in_progress(now_s)
        if upto > run.applied:
            self._complete(run, upto)
        for (s, _), held in zip(run.work, run.held, strict=True):
            keep = max(held, self.blocks_for(s.num_computed))
            if s.status == "running" and s.num_blocks > keep:
                self.free_blocks += s.num_blocks - keep
                s.num_blocks = keep
        end = run.ends[upto - 1]
        run.ends = run.ends[:upto]
        return end

    def _apply(self, plan: Plan[SimSequence], now_s: float) -> float:
        extra_s = 0.0
        for rid, (kind, _) in plan.finish.items():
            self._finish(self.by_id[rid], kind, now_s)
        for rid, mode in plan.preempt.items():
            extra_s += self._preempt(self.by_id[rid], mode or self.config.preemption, now_s)
        for seq in plan.admit:
            extra_s += self._admit(seq)
        return extra_s

    def _admit(self, s: SimSequence) -> float:
        blocks = self.admission_blocks(s)
        cost = 0.0
        if s.swapped:
            cost, s.swapped = self.cost.swap_s(s.num_computed), False
            self.host_blocks -= blocks
        elif s.num_computed < s.req.cached_tokens:  # its cached prefix needs no prefill
            s.num_computed = s.req.cached_tokens
        self.free_blocks -= blocks
        s.num_blocks, s.quantum_used, s.status = blocks, 0, "running"
        self.waiting.remove(s)
        self._waiting_changed()
        del self._waiting_views[s.request_id]
        self.running.append(s)
        return cost

    def _preempt(self, s: SimSequence, mode: str, now_s: float) -> float:
        cost = 0.0
        if mode == "swap" and s.num_computed:
            cost, s.swapped = self.cost.swap_s(s.num_computed), True
            self.host_blocks += self.blocks_for(s.num_computed)
            s.num_swaps += 1
        else:
            s.num_computed = 0
        self.free_blocks += s.num_blocks
        s.num_blocks, s.status, s.enqueued_s = 0, "waiting", now_s
        s.num_preemptions += 1
        self.running.remove(s)
        self.waiting.append(s)
        self._waiting_changed()
        return cost

    def _grow(self, s: SimSequence, n: int) -> bool:
        """The blocks for ``n`` more tokens of ``s``; False, nothing taken, when not free."""
        grow = -(-(s.num_computed + n) // self.block_size) - s.num_blocks
        if grow > self.free_blocks:
            return False
        if grow > 0:
            self.free_blocks -= grow
            s.num_blocks += grow
        return True

    def _complete(self, run: StepRun | QuietRun, upto: int) -> None:
        """Apply iterations ``run.applied`` .. ``upto - 1`` of ``run``."""
        first = run.applied == 0
        lo, hi = max(run.applied, 1), upto
        run.applied = upto
        for s, n in run.work:
            if s.status != "running":
                continue
            done = emitted = False
            if first:
                s.num_computed += n
                s.quantum_used += n
                if s.num_computed == s.num_tokens:
                    emitted, done = True, s.emit(run.ends[0])
            if hi > lo and not done:
                s.num_computed += hi - lo
                s.quantum_used += hi - lo
                emitted, done = True, s.emit_many(run.ends[lo:hi])
            if done:
                self._finish(s, "length", run.ends[hi - 1] if hi > lo else run.ends[0])
            elif emitted and s.num_output == s.reasoning_tokens:
                self.transitions.append(s)

    # migration (PASCAL Algorithm 2) ------------------------------------------------------
    def release(self, s: SimSequence) -> int:
        """Take running ``s`` out to migrate it; returns the blocks its computed KV fills."""
        self.free_blocks += s.num_blocks
        s.num_blocks, s.status = 0, "migrating"
        self.running.remove(s)
        del self.by_id[s.request_id]
        return self.blocks_for(s.num_computed)

    def receive(self, s: SimSequence, now_s: float) -> bool:
        """Land migrated ``s`` with all its KV: in GPU blocks as a running request when they
        (and a seat) are free, else staged in host memory as a swapped waiting request.
        Returns True when it landed on the GPU."""
        blocks = self.blocks_for(s.num_computed)
        self.by_id[s.request_id] = s
        s.num_migrations += 1
        s.quantum_used = 0
        if blocks < self.free_blocks and len(self.running) < self.config.max_num_seqs:
            self.free_blocks -= blocks
            s.num_blocks, s.status, s.swapped = blocks, "running", False
            self.running.append(s)
            return True
        self.host_blocks += blocks
        s.num_blocks, s.status, s.swapped, s.enqueued_s = 0, "waiting", True, now_s
        self.waiting.append(s)
        self._waiting_changed()
        return False

    def stop(self, request_id: str, reason: str, now_s: float) -> None:
        """Finish a live request now (``reason``: "stop" or "abort"), freeing its KV."""
        self._finish(self.by_id[request_id], reason, now_s)

    def _finish(self, s: SimSequence, reason: str, now_s: float) -> None:
        if s.status == "running":
            self.free_blocks += s.num_blocks
            self.running.remove(s)
        else:
            if s.swapped:
                self.host_blocks -= self.blocks_for(s.num_computed)
            self.waiting.remove(s)
            self._waiting_changed()
            self._waiting_views.pop(s.request_id, None)
        s.num_blocks, s.status, s.finish_reason, s.finished_s = 0, "finished", reason, now_s
        s.paced_tokens, s.paced_s = 0, None  # a cache of live requests, not a result: the same however it ran
        del self.by_id[s.request_id]
        self.finished.append(s)

    def check_blocks(self) -> None:
        """KV accounting: never negative, never over capacity, held blocks add up."""
        held = sum(s.num_blocks for s in self.running)
        if not (0 <= self.free_blocks <= self.total_blocks and held + self.free_blocks == self.total_blocks):
            raise PolicyError(
                f"instance {self.instance_id}: KV accounting broken "
                f"(free {self.free_blocks}, held {held}, total {self.total_blocks})"
            )
        if self.host_blocks < 0:
            raise PolicyError(f"instance {self.instance_id}: negative host KV ({self.host_blocks})")
