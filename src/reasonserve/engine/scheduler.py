"""The scheduler: queues, frozen views, a policy object's decisions, blocks, preemption.

Each step :meth:`Scheduler.schedule` builds a :class:`SchedulerView`, asks the policy and
follows the host contract every host shares (:mod:`reasonserve.core.hosting`): it validates
every decision (all or none are applied), applies them (stop/abort, preempt, admit in the
given order), then hands out the step's token budget in the policy's order
(``Order``/``TokenBudget``; by default running order, decodes first) and grows block tables.
The scheduler never picks whom to admit or preempt, with one exception for liveness: when
no running request can get a block and the policy preempted nothing, the last request in
the step's order is preempted.

The waiting queue is also kept as columns (:class:`~reasonserve.core.column_store.ColumnStore`,
updated as requests enter and leave it), so the view's waiting requests and their
``waiting_columns`` cost one copy per step, not a view built per waiting request: a waiting
request's view is built when it enters the queue (nothing a view reports changes while it waits).
"""

from __future__ import annotations

from collections.abc import Callable

from reasonserve.core.column_store import ColumnStore
from reasonserve.core.hosting import Plan, check_decisions, hand_out_live
from reasonserve.core.policy import check_policy, policy_name
from reasonserve.core.views import ProgramView, RequestView, SchedulerView
from reasonserve.engine.block_manager import BlockManager, OutOfBlocks
from reasonserve.engine.engine_config import EngineConfig
from reasonserve.engine.model_runner import ModelRunner
from reasonserve.engine.sequence import Sequence

__all__ = ["Scheduler"]


class Scheduler:
    def __init__(self, config: EngineConfig, policy, runner: ModelRunner, clock: Callable[[], float]) -> None:
        self.policy, self.name = check_policy(policy), policy_name(policy)
        self.config, self.runner, self.clock = config, runner, clock
        self.blocks = BlockManager(config.num_blocks, config.block_size)
        self.max_num_seqs = config.max_num_seqs
        self.waiting: list[Sequence] = []
        self.queue = ColumnStore()  # the waiting queue's views and columns, in its order
        self.running: list[Sequence] = []
        self.by_id: dict[str, Sequence] = {}
        self.steps = self.num_preemptions = 0

    # queues --------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        seq.status, seq.enqueued_s = "waiting", seq.arrival_s
        self._enqueue(seq)
        self.by_id[seq.request_id] = seq

    def _enqueue(self, seq: Sequence) -> None:
        self.waiting.append(seq)
        self.queue.append(self.waiting_view(seq))

    def _dequeue(self, seq: Sequence) -> None:
        self.waiting.remove(seq)
        self.queue.remove(seq.request_id)

    def finish(self, seq: Sequence, reason: str) -> None:
        """Retire a live request: free its blocks, forget it. The full blocks it computed
        stay in the prefix cache (output included), so a continuation of it, or a probe of
        its prefix, recomputes at most its last partial block; not after an error, and not
        a deterministic request's decoded KV in DVR mode (it came from the stock kernels)."""
        if seq.status == "running":
            if reason != "error" and not (self.config.mode == "dvr" and seq.params.deterministic):
                self.blocks.register_full_blocks(seq.block_table, seq.tokens, seq.num_computed, seq.kv_salt)
            self.blocks.free(seq.block_table)
            self.running.remove(seq)
        else:
            self._dequeue(seq)
        self.by_id.pop(seq.request_id, None)
        seq.block_table, seq.swapped = [], None
        seq.status, seq.finish_reason, seq.finished_s = "finished", reason, self.clock()

    def growth(self, seq: Sequence) -> int:
        """More blocks a running request needs to compute all its pending tokens."""
        bs = self.config.block_size
        return max(0, (len(seq.prompt) + len(seq.output) + bs - 1) // bs - len(seq.block_table))

    # what the host contract reads (reasonserve.core.hosting.Host) ----------------------
    @property
    def free_blocks(self) -> int:
        return self.blocks.num_free

    def lookup(self, request_id: str) -> Sequence | None:
        return self.by_id.get(request_id)

    def released(self, leaving: list[Sequence]) -> int:
        return self.blocks.released_by([s.block_table for s in leaving])

    def admission_blocks(self, seq: Sequence) -> int:
        """Blocks admitting a waiting request takes at most (prefix-cache hits take fewer)."""
        return self.blocks.blocks_for(seq.num_computed if seq.swapped is not None else seq.num_tokens)

    # views ---------------------------------------------------------------------------
    def waiting_view(self, s: Sequence) -> RequestView:
        """The view of a waiting request (built when it enters the queue)."""
        return _request_view(s, 0, self.admission_blocks(s), 0, s.swapped is not None)

    def view(self) -> SchedulerView:
        def running(s: Sequence) -> RequestView:
            held = self.blocks.exclusive(s.block_table)
            return _request_view(s, held, self.growth(s), s.quantum_used, False)

        cfg = self.config
        waiting, columns = self.queue.snapshot()
        return SchedulerView(
            self.clock(),
            waiting,
            tuple(map(running, self.running)),
            self.blocks.num_free,
            cfg.block_size,
            cfg.max_num_seqs,
            cfg.num_blocks,
            cfg.max_num_batched_tokens,
            self.steps,
            self._programs(),
            waiting_columns=columns,
        )

    def _programs(self) -> tuple[ProgramView, ...]:
        """Live requests grouped by ``program_id`` (ids sorted; programs by first arrival)."""
        members: dict[str, list[Sequence]] = {}
        for seq in self.by_id.values():
            if seq.program_id is not None:
                members.setdefault(seq.program_id, []).append(seq)
        views = [ProgramView(pid, tuple(sorted(s.request_id for s in seqs)), min(s.arrival_s for s in seqs))
                 for pid, seqs in members.items()]  # fmt: skip
        return tuple(sorted(views, key=lambda p: (p.arrival_s, p.program_id)))

    # one step ------------------------------------------------------------------------
    def schedule(self) -> tuple[list[tuple[Sequence, int]], list[tuple[Sequence, str]]]:
        """Returns (request, tokens to run) in order, and the requests a Stop/Abort decision
        finished with their reasons."""
        plan = check_decisions(self.policy.decide(self.view()), self, self.name)
        stopped = self._apply(plan)
        self.steps += 1
        return self._hand_out(plan), stopped

    def _apply(self, plan: Plan) -> list[tuple[Sequence, str]]:
        stopped = []
        for rid, (kind, reason) in plan.finish.items():
            seq = self.by_id[rid]
            self.finish(seq, kind)
            stopped.append((seq, reason))
        for rid, mode in plan.preempt.items():
            self.preempt(self.by_id[rid], mode or self.config.preemption)
        for seq in plan.admit:
            self._admit(seq)
        return stopped

    def _admit(self, seq: Sequence) -> None:
        if seq.swapped is not None:
            seq.block_table = self.blocks.allocate(self.blocks.blocks_for(seq.num_computed))
            self.runner.swap_in(seq.block_table, seq.swapped)
            seq.swapped = None
        else:
            seq.block_table, seq.num_computed = self.blocks.allocate_prompt(seq.tokens, seq.kv_salt)
            if not seq.num_preemptions:  # the first admission's hits (vLLM's rule): a readmission
                seq.num_cached_tokens = min(seq.num_computed, len(seq.prompt))  # reuses its own KV
        self._dequeue(seq)
        self.running.append(seq)
        seq.status, seq.quantum_used = "running", 0

    def preempt(self, seq: Sequence, mode: str) -> None:
        """Back to the waiting queue. ``recompute`` drops the KV; ``swap`` keeps a host copy."""
        if mode == "swap" and seq.num_computed:
            seq.swapped = self.runner.swap_out(seq.block_table, seq.num_computed)
            seq.num_swaps += 1
        else:
            seq.num_computed = 0
        self.blocks.free(seq.block_table)
        seq.block_table = []
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.running.remove(seq)
        seq.status, seq.enqueued_s = "waiting", self.clock()
        self._enqueue(seq)

    def _hand_out(self, plan: Plan) -> list[tuple[Sequence, int]]:
        return hand_out_live(
            plan, self.running, lookup=self.by_id.get, pending=lambda seqs: [s.num_pending for s in seqs],
            grow=self._grow, max_num_batched_tokens=self.config.max_num_batched_tokens,
            preempt=lambda s: self.preempt(s, self.config.preemption),
        )  # fmt: skip

    def _grow(self, seq: Sequence, n: int) -> bool:
        """Blocks for ``n`` more tokens of ``seq`` (no shared block is ever written: forks and
        the prefix cache share full blocks only); False, nothing taken, when none are free."""
        if seq.num_computed + n > len(seq.block_table) * self.config.block_size:
            try:
                for src, dst in self.blocks.ensure_capacity(seq.block_table, seq.num_computed + n):
                    self.runner.cache.copy_block(src, dst)
            except OutOfBlocks:
                return False
        return True


def _request_view(s: Sequence, blocks_held: int, blocks_needed: int, quantum_used: int, swapped: bool):
    """The frozen view of one request; the queue decides the blocks and quantum fields."""
    eot, out = s.eot_index, len(s.output)  # answer tokens: after the end of thinking (all without one)
    answers = out - eot - 1 if eot is not None else 0 if s.end_of_thinking else out
    return RequestView(
        s.request_id, s.arrival_s, s.phase, len(s.prompt), s.num_computed, len(s.output), s.params.priority,
        blocks_held, blocks_needed, s.enqueued_s, quantum_used, s.params.max_tokens, s.program_id,
        s.prefix_hashes, s.params.deterministic, swapped, answers,
    )  # fmt: skip
