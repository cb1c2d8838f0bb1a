"""The event loop of the beam-search serving simulator (see :mod:`reasonserve.sim.beam`).

The GPU runs one model at a time: pending verification first (short prefill batches),
else the generator until its next event. Speculation (when on) is decided every
generator round by the two-phase control and filled by SelectSpec.
"""

from __future__ import annotations

import math
from collections import deque

from reasonserve.policies.flashtts.kv import PrefixCachedVerifier, RooflineKVAllocator
from reasonserve.policies.flashtts.lookahead import LookaheadVerification, VerifyCandidate
from reasonserve.policies.flashtts.prefix import prefix_order
from reasonserve.sim.beam.config import BeamServeConfig, BeamServeResult
from reasonserve.sim.beam.engine import Generator, GenTask, Verifier, VerifyTask
from reasonserve.sim.beam.spec import Speculation, copy_index
from reasonserve.sim.beam.tree import Beam, SearchTree
from reasonserve.sim.beam.workload import BeamRequest, StepPool

__all__ = ["BeamRun"]


class BeamRun:
    def __init__(self, requests: list[BeamRequest], pool: StepPool, config: BeamServeConfig) -> None:
        self.cfg, self.pool, self.time = config, pool, 0.0
        self.arrivals = deque(requests)
        self.sizes: dict[str, int] = {}
        self.trees: dict[str, SearchTree] = {}
        self.pending_gen: dict[str, int] = {}
        self.pending_ver: dict[str, int] = {}
        self.beams: list[tuple[str, str, int, float]] = []
        self.latencies: dict[str, float] = {}
        self.selections: dict[str, tuple[tuple[str, ...], ...]] = {}
        self.switch_s, self.last_model = 0.0, "gen"
        self.busy_s = {"generator": 0.0, "verifier": 0.0}  # GPU seconds per model (Fig. 13's breakdown)
        self._build_models()
        self.spec = Speculation(self, config.selector()) if config.speculation else None
        self.lookahead = LookaheadVerification(enabled=config.use_lookahead)

    def _build_models(self) -> None:
        cfg = self.cfg
        gen_cost, ver_cost = cfg.setting.costs()
        memory = cfg.setting.kv_bytes
        floor = cfg.search.max_model_len  # each side holds at least one longest sequence
        kv_g, kv_v = cfg.setting.generator.kv_bytes_per_token, cfg.setting.verifier.kv_bytes_per_token
        self.plan, seats_g, seats_v = None, cfg.max_num_seqs, cfg.max_num_seqs
        gen_bytes, ver_bytes = cfg.setting.baseline_kv_bytes()  # two vLLM instances, static split
        if cfg.roofline:  # one iteration: N verifications and N decodes of a step
            self.plan = RooflineKVAllocator(gen_cost, ver_cost).plan(
                memory_bytes=memory,
                num_beams=cfg.search.width,
                verify_tokens=self.pool.mean_sequence_tokens(),
                decode_tokens=self.pool.mean_step_tokens(),
                num_switches=2,
                **self._plan_models(),
            )
            gen_bytes, ver_bytes = self.plan.generator_kv_bytes, self.plan.verifier_kv_bytes
            seats_g = max(seats_g, self.plan.decode_batch)  # the allocator only raises vLLM's limit
            seats_v = max(seats_v, self.plan.prefill_batch)
            if not self.plan.offload:
                ver_bytes = max(ver_bytes, floor * kv_v)
                gen_bytes = memory - ver_bytes
        cap_g, cap_v = max(floor, int(gen_bytes // kv_g)), max(floor, int(ver_bytes // kv_v))
        self.capacities = {"generator": cap_g, "verifier": cap_v}
        self.gen = Generator(gen_cost, cap_g, seats_g, self.sizes)
        self.ver = Verifier(ver_cost, cap_v, seats_v, self.sizes, cfg.verifier_prefix_caching)

    def _plan_models(self) -> dict:
        """The allocator's view of the two models (``BeamServeConfig.roofline_plan``): with
        prefix caching a verification prefills the mean step and the copies of a kept beam
        (``branching`` of them, or ``roofline_prefix_share`` beams) share its cached path."""
        cfg = self.cfg
        share = cfg.search.branching if cfg.roofline_prefix_share is None else cfg.roofline_prefix_share
        models: dict = {}
        if cfg.roofline_plan != "whole_beams" and cfg.verifier_prefix_caching:
            models["verifier_cache"] = PrefixCachedVerifier(self.pool.mean_step_tokens(), share)
        if cfg.roofline_plan == "prefix_cached":
            models["generator_prefix_share"] = share
        return models

    def run(self) -> BeamServeResult:
        while True:
            self._arrive()
            if self.ver.queue:
                self._switch("ver")
                seconds, batch = self.ver.step()
                self.time += seconds
                self.busy_s["verifier"] += seconds
                self._verified(batch)
            elif self.gen.queue or self.gen.running:
                self._switch("gen")
                self._generate()
            elif self.arrivals:
                self.time = max(self.time, self.arrivals[0].arrival_s)
            else:
                break
        return BeamServeResult(self.beams, self.latencies, self.selections, self._counters(),
                               self.plan, self.capacities)  # fmt: skip

    def _counters(self) -> dict[str, float]:
        out = {"decode_tokens": self.gen.decode_tokens, "recompute_tokens": self.gen.recompute_tokens,
               "verifier_prefill_tokens": self.ver.prefill_tokens, "offload_switch_s": self.switch_s,
               "generator_evicted_tokens": self.gen.cache.evicted_tokens,
               "generator_s": self.busy_s["generator"], "verifier_s": self.busy_s["verifier"],
               "makespan_s": self.time}  # fmt: skip
        if self.spec is not None:
            out.update(self.spec.counters())
        return out

    def _switch(self, model: str) -> None:
        if self.plan is not None and self.plan.offload and model != self.last_model:
            seconds = self.gen.cost.swap_s(self.gen.cache.used) + self.ver.cost.swap_s(self.ver.cache.used)
            self.time += seconds
            self.switch_s += seconds
        self.last_model = model

    def _arrive(self) -> None:
        while self.arrivals and self.arrivals[0].arrival_s <= self.time:
            req = self.arrivals.popleft()
            tree = SearchTree(req, self.pool, self.cfg.search)
            self.trees[req.request_id] = tree
            self.sizes[tree.prompt_node] = req.prompt_tokens
            self._start_iteration(req.request_id, tree.active, {})

    # -- generation -------------------------------------------------------------------
    def _generate(self) -> None:
        prefill: list[tuple[int, int]] = []
        if self.spec is not None:
            self.spec.control()
        while self.gen.queue and self.gen.try_admit(self.gen.queue[0], prefill):
            self.gen.queue.popleft()
        if self.spec is not None:
            self.spec.fill(prefill)
        seconds = self.gen.cost.step_s(prefill)
        k = self._fit(min(t.remaining for t in self.gen.running)) if self.gen.running else 0
        if k and self.arrivals and self.arrivals[0].arrival_s > self.time:
            one = self.gen.decode_time(1)
            k = min(k, max(1, math.ceil((self.arrivals[0].arrival_s - self.time) / one)))
        if k:
            seconds += self.gen.decode_time(k)
        self.time += seconds
        self.busy_s["generator"] += seconds
        finished = self.gen.advance(k) if k else []
        for task in finished:
            self.gen.finish(task)
        for task in finished:  # branches first: a finished step may stop its request's branches
            if task.parent is not None:
                assert self.spec is not None  # only speculation runs branches
                self.spec.branch_done(task)
        for task in finished:
            if task.parent is None:
                self._step_done(task)

    def _fit(self, k: int) -> int:
        """The largest k' <= k steps whose growth fits, preempting (speculative first,
        then the newest) until at least one step fits."""
        while self.gen.running:
            n = len(self.gen.running)
            if self.gen.cache.make_room(k * n):
                return k
            free = self.gen.cache.capacity - self.gen.cache.used
            if free >= n:
                return free // n
            if self.spec is not None and self.spec.running():
                self.spec.stop_all("memory")
                continue
            victim = self.gen.running[-1]
            self.gen.release(victim)
            self.gen.queue.appendleft(victim)
        return 0

    def _step_done(self, task: GenTask) -> None:
        rid = task.request_id
        self.pending_gen[rid] -= 1
        if self.spec is not None and not task.beam.final:
            self.spec.candidate(rid, task.beam)
        if self.pending_gen[rid] == 0:
            self._end_generation(rid)

    def _end_generation(self, rid: str) -> None:
        tree = self.trees[rid]
        spec_done: dict[str, int] = {}
        if self.spec is not None:
            spec_done = self.spec.end_request(rid)
        todo = [b for b in tree.active if self.spec is None or not self.spec.preverified(b.beam_id)]
        groups = self.lookahead.group([self._verify_candidate(b, spec_done) for b in todo])
        by_id = {b.beam_id: b for b in todo}
        for g in groups:
            beam = by_id[g.beam_id]
            extra = (beam.child_ids[0],) if g.num_steps == 2 else ()
            self.ver.queue.append(VerifyTask(beam, rid, (*beam.path, beam.beam_id, *extra)))
        self.pending_ver[rid] = len(groups)
        if not groups:
            self._select(rid)

    def _verify_candidate(self, beam: Beam, spec_done: dict[str, int]) -> VerifyCandidate:
        child0 = beam.child_ids[0]
        tokens = spec_done.get(child0, 0) if not beam.final else 0
        complete = tokens > 0 and tokens == self.sizes.get(child0, -1)
        return VerifyCandidate(beam.beam_id, beam.step_tokens, tokens, complete)

    # -- verification and selection ---------------------------------------------------
    def _verified(self, batch: list[VerifyTask]) -> None:
        for task in batch:
            if self.spec is not None and len(task.nodes) > len(task.beam.path) + 1:
                self.spec.mark_preverified(task.nodes[-1])
            self.pending_ver[task.request_id] -= 1
            if self.pending_ver[task.request_id] == 0:
                self._select(task.request_id)

    def _select(self, rid: str) -> None:
        tree = self.trees[rid]
        done, children = tree.select()
        arrival = tree.request.arrival_s
        self.beams += [(rid, b.beam_id, b.tokens, self.time - arrival) for b in done]
        if not children:
            self.latencies[rid] = self.time - arrival
            self.selections[rid] = tuple(tree.selections)
            del self.trees[rid]
            if self.spec is not None:
                self.spec.forget(rid)
            return
        head = self.spec.head_starts(rid, children) if self.spec is not None else {}
        self._start_iteration(rid, children, head)

    def _start_iteration(self, rid: str, beams: list[Beam], head: dict[str, tuple[int, str | None]]) -> None:
        order = sorted(range(len(beams)), key=lambda i: (copy_index(beams[i].beam_id), i))
        beams = [beams[i] for i in order]  # copy by copy: parents interleaved (the baseline)
        if self.cfg.prefix_aware:
            beams = [beams[i] for i in prefix_order([(*b.path, b.beam_id) for b in beams])]
        tasks = 0
        context0 = self.trees[rid].request.prompt_tokens
        for b in beams:
            self.sizes[b.beam_id] = b.step_tokens
            progress, node = head.get(b.beam_id, (0, None))
            if progress < b.step_tokens:
                task = GenTask(b, rid, context0 + b.path_tokens, progress=progress)
                if node is not None and node != b.beam_id:  # share the branch's cached KV
                    task.head, task.shared = (node,), progress
                self.gen.queue.append(task)
                tasks += 1
        self.pending_gen[rid] = tasks
        if self.spec is not None:
            self.spec.new_iteration(rid, beams)
        if tasks == 0:
            self._end_generation(rid)
