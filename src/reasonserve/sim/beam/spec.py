"""Speculative beam extension in the beam-search simulator (FlashTTS §4.1, Algorithm 1).

Beams that finished their step while stragglers of the same iteration still decode are
speculative candidates. Every generator round the two-phase control
(:class:`~reasonserve.policies.flashtts.control.TwoPhaseSpeculation`) decides on a view of
the generator; in phase 2 SelectSpec fills free seats with branches. Branch ``k`` of beam
``b`` pre-generates the step of ``b``'s ``k``-th child (a pure function of ``b``, so
selection never depends on it). When the iteration's generation ends, branches stop;
after selection the kept children start with their branch's tokens (copy 0 all of them,
other copies a truncated prefix). Tokens of branches whose beam was not kept are wasted.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from reasonserve.core.decisions import Preempt
from reasonserve.core.phase import Phase
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies.flashtts.control import SpeculationState, TwoPhaseSpeculation
from reasonserve.policies.flashtts.spec import SelectSpec
from reasonserve.sim.beam.engine import GenTask
from reasonserve.sim.beam.tree import Beam

if TYPE_CHECKING:
    from reasonserve.sim.beam.run import BeamRun

__all__ = ["Speculation", "copy_index"]


def copy_index(beam_id: str) -> int:
    """k for the k-th copy of a kept beam (``parent.k``); 0 for a request's first beams."""
    head, _, tail = beam_id.rpartition(".")
    return int(tail) if head else 0


class Speculation:
    def __init__(self, run: BeamRun, selector: SelectSpec) -> None:
        self.run, self.selector = run, selector
        self.control_policy, self.state = TwoPhaseSpeculation(), SpeculationState()
        self.candidates: dict[str, list[Beam]] = {}  # request -> beams done with their step
        self.potentials: dict[str, int] = {}  # beam -> M_i
        self.used: dict[str, set[int]] = {}  # beam -> branches running or complete
        self.progress: dict[str, dict[str, int]] = {}  # request -> child -> speculative tokens
        self.tasks: dict[str, GenTask] = {}  # child -> running branch
        self.verified: set[str] = set()
        self.nodes: dict[str, str] = {}  # child -> cached node holding its branch's tokens
        self.stops = self.launched = self.kept_tokens = self.wasted_tokens = 0

    def counters(self) -> dict[str, float]:
        return {"spec_tokens": self.run.gen.spec_tokens, "spec_tokens_kept": self.kept_tokens,
                "spec_tokens_wasted": self.wasted_tokens, "spec_branches": self.launched,
                "speculation_stops": self.stops, "lookahead_verified": len(self.verified)}  # fmt: skip

    def new_iteration(self, rid: str, beams: list[Beam]) -> None:
        scores = {b.beam_id: b.prior_score for b in beams if b.prior_score is not None}
        if scores:
            self.potentials.update(self.selector.potentials(scores))
        self.candidates[rid] = []

    def candidate(self, rid: str, beam: Beam) -> None:
        self.candidates[rid].append(beam)

    def running(self) -> bool:
        return bool(self.tasks)

    def preverified(self, beam_id: str) -> bool:
        return beam_id in self.verified

    def mark_preverified(self, beam_id: str) -> None:
        self.verified.add(beam_id)

    def _stop(self, task: GenTask, keep: bool = False) -> None:
        """Stop a branch; with ``keep`` (its iteration ended) a branch whose tokens all have
        KV leaves them cached as node ``<child>~`` for the child's head start."""
        gen, child = self.run.gen, task.beam.beam_id
        whole = keep and task.kv == task.progress > 0
        kv = task.kv
        gen.release(task)
        if whole:
            node = f"{child}~"
            self.run.sizes[node] = task.progress
            gen.cache.make_room(kv)  # the tokens were private: the room exists
            gen.cache.add(node, task.progress)
            self.nodes[child] = node
        self.progress.setdefault(task.request_id, {})[child] = task.progress
        assert task.parent is not None  # a branch: it has its parent
        self.used[task.parent].discard(task.branch)
        del self.tasks[child]

    def stop_all(self, reason: str) -> None:
        for task in list(self.tasks.values()):
            self._stop(task)
        self.stops += 1
        self.state = SpeculationState(frozenset(), False, self.state.stops + 1)

    def control(self) -> None:
        """The two-phase decision on the generator as it is now (before admitting newly
        queued beams, so that an arrival stops speculation before it is served)."""
        state = SpeculationState(frozenset(self.tasks), self.state.speculating, self.state.stops)
        decisions, self.state = self.control_policy.decide(self._view(), state)
        victims = [self.tasks[d.request_id] for d in decisions if isinstance(d, Preempt)]
        for task in victims:
            self._stop(task)
        self.stops += bool(victims)

    def fill(self, prefill: list[tuple[int, int]]) -> None:
        """Phase 2 only: seats freed by finished beams go to SelectSpec's branches."""
        gen = self.run.gen
        # slots freed by finished beams only: the batch keeps the iterations' size (§4.1.1)
        batch = sum(len(self.run.trees[rid].active) for rid, beams in self.candidates.items() if beams)
        free = min(gen.max_seqs, batch) - len(gen.running)
        if not self.state.speculating or gen.queue or free <= 0:
            return
        by_id = {b.beam_id: (rid, b) for rid, beams in self.candidates.items() for b in beams}
        counts = {b: len(self.used.get(b, ())) for b in by_id}
        protected = self._protected()
        for slot in self.selector.rank(list(by_id), self.potentials, free, used=counts):
            rid, beam = by_id[slot.beam_id]
            if not self._launch(rid, beam, prefill, protected):
                break

    def _launch(self, rid: str, beam: Beam, prefill: list[tuple[int, int]], protected: int) -> bool:
        used = self.used.setdefault(beam.beam_id, set())
        branch = min(set(range(len(beam.child_ids))) - used)
        child = self.run.trees[rid].child(beam, branch)
        self.run.sizes[child.beam_id] = child.step_tokens
        done = self.progress.get(rid, {}).get(child.beam_id, 0)
        if done >= child.step_tokens:
            used.add(branch)
            return True
        context = self.run.trees[rid].request.prompt_tokens + child.path_tokens
        task = GenTask(child, rid, context, progress=done, parent=beam.beam_id, branch=branch)
        if not self._fits(task, protected) or not self.run.gen.try_admit(task, prefill):
            return False
        used.add(branch)
        self.tasks[child.beam_id] = task
        self.state = self.state.with_branches([child.beam_id])
        self.launched += 1
        return True

    def _protected(self) -> int:
        """Cached, unpinned tokens of the live iterations' beams (their paths and finished
        steps): the next iteration may need them, so speculation must not count them free."""
        cache, nodes = self.run.gen.cache, set[str]()
        for rid in self.candidates:
            for b in self.run.trees[rid].active:
                nodes.update(b.path)
                nodes.add(b.beam_id)
        return sum(cache.tokens[n] for n in nodes if n in cache.lru)

    def _fits(self, task: GenTask, protected: int) -> bool:
        """A branch starts only on a fully cached prefix (no recomputation for speculation)
        and takes only memory that no live beam holds or will need to finish its step (free,
        or cached for pruned beams and finished requests), for its whole step."""
        gen = self.run.gen
        _, missing = gen.cache.missing(task.nodes, self.run.sizes)
        if missing or task.unbacked:
            return False
        reserve = sum(t.remaining for t in gen.running if t.parent is None)
        reserve += sum(t.remaining for t in self.tasks.values())
        free = gen.cache.capacity - gen.cache.used + gen.cache.evictable - protected
        return missing + task.beam.step_tokens + reserve <= free

    def _view(self) -> SchedulerView:
        gen = self.run.gen
        head = gen.queue[0] if gen.queue else None
        waiting = () if head is None else (self._request(head),)
        running = tuple(self._request(t) for t in gen.running)
        free = gen.cache.capacity - gen.cache.used + gen.cache.evictable
        return SchedulerView(self.run.time, waiting, running, free, 1, gen.max_seqs, gen.cache.capacity)

    @staticmethod
    def _request(t: GenTask) -> RequestView:
        return RequestView(t.beam.beam_id, 0.0, Phase.REASONING, t.context, t.context + t.kv, t.progress,
                           num_blocks=t.kv, blocks_needed=1)  # fmt: skip

    def branch_done(self, task: GenTask) -> None:
        self.progress.setdefault(task.request_id, {})[task.beam.beam_id] = task.progress
        self.nodes[task.beam.beam_id] = task.beam.beam_id  # the child's own step node
        del self.tasks[task.beam.beam_id]

    def end_request(self, rid: str) -> dict[str, int]:
        """The iteration's generation ended: stop its branches; the tokens per child."""
        for task in [t for t in self.tasks.values() if t.request_id == rid]:
            self._stop(task, keep=True)
        self.candidates[rid] = []
        return dict(self.progress.get(rid, {}))

    def head_starts(self, rid: str, children: list[Beam]) -> dict[str, tuple[int, str | None]]:
        """(tokens, cached node holding them or None) each kept child starts with (Algorithm 1,
        lines 18-19): a child with its own branch keeps it (copy 0 all of it, others a
        truncated prefix); a copy without one starts from a truncated prefix of copy 0's
        branch (sharing its KV) and still writes at least one token of its own. Forgets the
        request's other branches (wasted)."""
        progress = self.progress.pop(rid, {})
        seed = self.run.trees[rid].request.seed
        head, used = {}, set()
        for c in children:
            k = copy_index(c.beam_id)
            own = progress.get(c.beam_id, 0)
            source = c.beam_id if own or k == 0 else f"{c.beam_id.rpartition('.')[0]}.0"
            base = progress.get(source, 0)
            rng = random.Random(f"{seed}|trunc|{c.beam_id}")
            cap = c.step_tokens if source == c.beam_id else c.step_tokens - 1
            tokens = min(self.selector.kept_tokens(base, k, rng), cap) if base else 0
            head[c.beam_id] = (tokens, self.nodes.get(source) if tokens else None)
            used.add(source)
            self.kept_tokens += tokens
        self.wasted_tokens += sum(t for child, t in progress.items() if child not in used)
        for b in [b for b in self.used if b.startswith(f"{rid}/")]:
            del self.used[b]
        for child in [c for c in self.nodes if c.startswith(f"{rid}/")]:
            del self.nodes[child]
        return head

    def forget(self, rid: str) -> None:
        self.candidates.pop(rid, None)
        for child in [c for c in self.nodes if c.startswith(f"{rid}/")]:
            del self.nodes[child]
        self.progress.pop(rid, None)
        for b in [b for b in self.used if b.startswith(f"{rid}/")]:
            del self.used[b]
