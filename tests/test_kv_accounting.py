"""KV block accounting across admit / preempt (swap, recompute) / grow / finish (stop, abort,
length) / migrate, in the embedded engine's scheduler and block manager, in the simulator,
and in the Ray Serve router's view of its replicas.

Each host's numbers are checked against arithmetic written here from the requests' token
counts (never the host's own helpers): a running request needs ``ceil(tokens / block) -
held`` more blocks, a waiting one ``ceil(tokens / block)`` (a swapped one, its computed
tokens'); a plan fits when the seats last and the growth of the requests that stay plus
every admission fits the free blocks. Generated proposals probe that boundary: the host must
accept exactly the plans that fit and refuse the rest with nothing applied."""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import accumulate

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.adapters.ray_serve.job import Job
from reasonserve.adapters.ray_serve.ranking import Placement, rank
from reasonserve.adapters.ray_serve.stats import ReplicaStats
from reasonserve.core import PolicyError
from reasonserve.core.decisions import Abort, Admit, Preempt, Stop
from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint
from reasonserve.policies import FCFSPolicy
from reasonserve.policies.pascal import PascalPolicy
from reasonserve.policies.router import PascalRouter
from reasonserve.sim import SimConfig, SimRequest, simulate
from reasonserve.sim.cluster.instance import SimInstance


def _ceil(tokens: int, size: int) -> int:
    return -(-tokens // size)


def _fits(seats: int, running: int, admitted: int, growth: int, admissions: int, free: int) -> bool:
    return (admitted == 0 or running + admitted <= seats) and growth + admissions <= free


@dataclass
class Prober:
    """Each step: checks the view's block counts against the arithmetic above, then proposes
    FCFS's decisions, a preemption, a stop, or the first ``k`` waiting requests as admissions
    (the blocks they need, with or without the running requests' growth, straddle the free
    blocks), and records whether that proposal fits (``expect``)."""

    rng: random.Random
    state: object = None  # reads the host's requests for the reference arithmetic (set later)
    expect: bool | None = None
    name: str = "prober"

    def decide(self, view):
        need_run, need_wait = self.state(view)
        for r in view.running:
            assert r.blocks_needed == need_run[r.request_id], (r, need_run)
        for r in view.waiting:
            assert r.blocks_needed == need_wait[r.request_id], (r, need_wait)
        growth = sum(need_run.values())
        roll, self.expect = self.rng.random(), True
        if roll < 0.5 and view.waiting:  # admissions near the boundary
            sums = accumulate(need_wait[r.request_id] for r in view.waiting)
            seats = view.max_num_seqs - len(view.running)
            most = min(seats, sum(1 for total in sums if total <= view.free_blocks))  # seats, free blocks alone
            k = most if most and (growth or roll < 0.25) else self.rng.randint(1, len(view.waiting))
            chosen = view.waiting[:k]
            admissions = sum(need_wait[r.request_id] for r in chosen)
            self.expect = _fits(view.max_num_seqs, len(view.running), k, growth, admissions, view.free_blocks)
            return [Admit(r.request_id) for r in chosen]
        if roll < 0.6 and view.running:
            victim = self.rng.choice(view.running)
            kind = self.rng.choice([Preempt(victim.request_id, "swap"), Preempt(victim.request_id, "recompute"),
                                    Stop(victim.request_id), Abort(victim.request_id)])  # fmt: skip
            return [kind]
        return FCFSPolicy().decide(view)


# -- the embedded engine: scheduler + block manager ---------------------------------------------


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return Engine.from_pretrained(make_tiny_checkpoint(tmp_path_factory.mktemp("kv"))).model


def _engine_state(eng):
    size = eng.config.block_size

    def read(view):
        by_id = eng.scheduler.by_id
        need_run = {}
        for r in view.running:
            seq = by_id[r.request_id]
            need_run[r.request_id] = max(0, _ceil(len(seq.prompt) + len(seq.output), size) - len(seq.block_table))
        need_wait = {}
        for r in view.waiting:
            seq = by_id[r.request_id]
            tokens = seq.num_computed if seq.swapped is not None else len(seq.prompt) + len(seq.output)
            need_wait[r.request_id] = _ceil(tokens, size)
        return need_run, need_wait

    return read


def _engine_snapshot(eng):
    return ([s.request_id for s in eng.waiting], [s.request_id for s in eng.running], eng.blocks.num_free,
            [list(s.block_table) for s in eng.running])  # fmt: skip


def _check_engine_blocks(eng):
    eng.check_blocks()  # reference counts equal the live tables' uses; the free list is the rest
    size = eng.config.block_size
    for s in eng.running:  # a running request holds the blocks of its computed tokens
        assert len(s.block_table) >= _ceil(s.num_computed, size)
    for s in eng.waiting:  # a waiting one holds none (a swapped one keeps a host copy only)
        assert s.block_table == [] and (s.swapped is None or s.num_computed > 0)
    held = {b for s in eng.running for b in s.block_table}
    assert eng.blocks.num_free + len(held) == eng.config.num_blocks


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**31), mode=st.sampled_from(["recompute", "swap"]), size=st.sampled_from([2, 4]),
       blocks=st.integers(6, 12))  # fmt: skip
def test_engine_blocks_are_conserved_and_plans_fit_exactly_when_the_arithmetic_says(model, seed, mode, size,
                                                                                     blocks):
    rng = random.Random(seed)
    prober = Prober(rng)
    config = EngineConfig(block_size=size, num_blocks=blocks, max_num_seqs=rng.randint(1, 6),
                          max_num_batched_tokens=rng.choice([3, 8, 64]), preemption=mode, mode="batch_invariant")  # fmt: skip
    eng = Engine(model, config, policy=prober)
    prober.state = _engine_state(eng)
    ids = [eng.add_request([rng.randrange(1, 256) for _ in range(rng.randint(1, 6))],
                           SamplingParams(max_tokens=rng.randint(1, 5), temperature=0.0)) for _ in range(rng.randint(1, 4))]  # fmt: skip
    done, steps = set(), 0
    while eng.has_unfinished():
        before = _engine_snapshot(eng)
        try:
            done |= {o.request_id for o in eng.step()}
        except PolicyError:
            assert prober.expect is False, "a plan that fits was refused"
            assert _engine_snapshot(eng) == before  # all or none: nothing applied
        else:
            assert prober.expect is not False, "a plan past the free blocks (or seats) was accepted"
        _check_engine_blocks(eng)
        steps += 1
        assert steps < 400, "no progress"
    assert eng.blocks.num_free == blocks
    assert done | {i for i in ids if i not in done} == set(ids)


def test_engine_refuses_an_admission_that_fits_the_free_blocks_but_not_the_growth(model):
    """Two running requests, each one token past a full block (they grow by one block each),
    three free blocks: admitting a two-block request fits the free blocks alone, not with the
    growth."""
    admitted = []

    class AdmitAll:
        name = "admit-all"

        def decide(self, view):
            admitted.append([r.request_id for r in view.waiting])
            return [Admit(r.request_id) for r in view.waiting]

    config = EngineConfig(block_size=4, num_blocks=5, max_num_seqs=4, mode="batch_invariant")
    eng = Engine(model, config, policy=AdmitAll())
    eng.add_request([1, 2, 3, 4], SamplingParams(max_tokens=4, temperature=0.0), request_id="a")
    eng.add_request([5, 6, 7, 8], SamplingParams(max_tokens=4, temperature=0.0), request_id="b")
    eng.step()  # both admitted (one block each) and prefilled: each now has a 5th token pending
    assert [s.request_id for s in eng.running] == ["a", "b"] and eng.blocks.num_free == 3
    eng.add_request([9, 9, 9, 9, 9], SamplingParams(max_tokens=2, temperature=0.0), request_id="c")
    before = _engine_snapshot(eng)
    with pytest.raises(PolicyError, match="growth"):
        eng.step()  # 2 blocks of growth + 2 for c > 3 free
    assert _engine_snapshot(eng) == before and admitted[-1] == ["c"]


# -- the simulator: an instance's admit / preempt / grow / finish, and migration --------------


def _sim_state(inst: SimInstance):
    size = inst.config.block_size

    def read(view):
        need_run = {s.request_id: max(0, _ceil(s.prompt_tokens + s.num_output, size) - s.num_blocks)
                    for s in inst.running}  # fmt: skip
        need_wait = {s.request_id: _ceil(s.num_computed if s.swapped else s.prompt_tokens + s.num_output, size)
                     for s in inst.waiting}  # fmt: skip
        return need_run, need_wait

    return read


def _check_sim_blocks(inst: SimInstance):
    size = inst.config.block_size
    assert inst.free_blocks + sum(s.num_blocks for s in inst.running) == inst.total_blocks
    assert 0 <= inst.free_blocks <= inst.total_blocks
    for s in inst.running:
        assert s.num_blocks >= _ceil(s.num_computed, size)
    assert all(s.num_blocks == 0 for s in inst.waiting)
    assert inst.host_blocks == sum(_ceil(s.num_computed, size) for s in inst.waiting if s.swapped)


def _sim_snapshot(inst: SimInstance):
    return ([s.request_id for s in inst.waiting], [s.request_id for s in inst.running], inst.free_blocks,
            inst.host_blocks, [s.num_blocks for s in inst.running])  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), mode=st.sampled_from(["recompute", "swap"]), size=st.sampled_from([4, 16]))
def test_simulated_blocks_are_conserved_and_plans_fit_exactly_when_the_arithmetic_says(seed, mode, size):
    rng = random.Random(seed)
    config = SimConfig(num_instances=1, block_size=size, kv_capacity_tokens=size * rng.randint(6, 14),
                       max_num_seqs=rng.randint(1, 5), max_num_batched_tokens=rng.choice([8, 32, 512]),
                       preemption=mode, model="qwen2.5-7b", skip_quiet_steps=False)  # fmt: skip
    prober = Prober(rng)
    inst = SimInstance("0", config, config.cost_model(), prober)
    prober.state = _sim_state(inst)
    for i in range(rng.randint(1, 7)):
        prompt = rng.randint(1, 3 * size)
        inst.add(SimRequest(f"q{i}", 0.0, prompt, rng.randint(1, 2 * size), rng.randint(0, size)), 0.0)
    now, steps = 0.0, 0
    while inst.has_work:
        before = _sim_snapshot(inst)
        try:
            due = inst.step(now)
        except PolicyError:
            assert prober.expect is False, "a plan that fits was refused"
            assert _sim_snapshot(inst) == before
            due = None
        else:
            assert prober.expect is not False, "a plan past the free blocks (or seats) was accepted"
        _check_sim_blocks(inst)
        now = max(now, due or now) + 1e-3
        inst.finish_run(now)
        _check_sim_blocks(inst)
        steps += 1
        assert steps < 600, "no progress"
    assert inst.free_blocks == inst.total_blocks and inst.host_blocks == 0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 2), st.integers(1, 20), st.integers(1, 15), st.integers(1, 12)),
                min_size=2, max_size=12), st.sampled_from([4, 16]), st.integers(2, 3))  # fmt: skip
def test_migrations_move_every_block_and_lose_none(rows, size, instances):
    """PASCAL's router migrates answering phases: a request leaves its source with the blocks
    its computed tokens fill and lands with as many (in GPU blocks, or staged in host memory);
    every instance's accounting holds after every step and ends empty."""
    reqs = [SimRequest(f"q{i:02d}", a, p, r, n) for i, (a, p, r, n) in enumerate(rows)]
    config = SimConfig(num_instances=instances, block_size=size, kv_capacity_tokens=size * 12, max_num_seqs=4,
                       model="qwen2.5-7b")  # fmt: skip
    res = simulate(reqs, config, lambda: PascalPolicy(quantum=6, demote_threshold_tokens=50), PascalRouter(),
                   check_every_step=True)  # fmt: skip
    for m in res.migrations:
        assert m.blocks_out == _ceil(m.tokens, size) == m.blocks_in
    assert [s.request_id for s in res.sequences] == sorted(r.request_id for r in reqs)
    assert all(s.num_blocks == 0 and s.finish_reason == "length" for s in res.sequences)


def test_simulator_refuses_an_admission_that_fits_the_free_blocks_but_not_the_growth():
    class AdmitAll:
        name = "admit-all"

        def decide(self, view):
            return [Admit(r.request_id) for r in view.waiting]

    config = SimConfig(num_instances=1, block_size=4, kv_capacity_tokens=4 * 5, max_num_seqs=4,
                       model="qwen2.5-7b", skip_quiet_steps=False)  # fmt: skip
    inst = SimInstance("0", config, config.cost_model(), FCFSPolicy())
    for rid in ("a", "b"):
        inst.add(SimRequest(rid, 0.0, 4, 4, 0), 0.0)
    now = inst.step(0.0)
    inst.finish_run(now)  # both prefilled: 5 tokens each (4 + their first), one block held each
    assert inst.free_blocks == 3 and [inst.growth(s) for s in inst.running] == [1, 1]
    inst.policy = AdmitAll()
    inst.add(SimRequest("c", now, 5, 2, 0), now)  # 2 blocks: fits the 3 free, not with the growth of 2
    before = _sim_snapshot(inst)
    with pytest.raises(PolicyError, match="growth"):
        inst.step(now)
    assert _sim_snapshot(inst) == before


# -- the Ray Serve router: its replicas' loads after its own recent placements -----------------

NOW = 1000.0
BLOCK = 4


def _stats(m=0, ok=True, r=0, a=0, free=100, at=NOW - 0.1) -> dict:
    return ReplicaStats(m, ok, r, a, free, 200, r + a, at).to_dict()


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from("abcd"), st.tuples(st.integers(0, 60), st.integers(0, 40)), min_size=1),
       st.lists(st.tuples(st.sampled_from("abcd"), st.floats(-0.3, 0.05), st.integers(0, 30), st.booleans()),
                max_size=8))  # fmt: skip
def test_router_loads_take_recent_placements_from_the_free_blocks(replicas, placed):
    """A placement made after a replica's stats moves its blocks from free to held: the load
    the policy sees keeps held + free (while free lasts), and one made before the stats is
    already in them."""
    stats = {rid: _stats(m=m, free=free) for rid, (m, free) in replicas.items()}
    recent: dict[str, list[Placement]] = {}
    for rid, dt, blocks, reasoning in placed:
        recent.setdefault(rid, []).append(Placement(NOW + dt, blocks, reasoning))
    job = Job("q", (1, 2, 3), SamplingParams(max_tokens=8, seed=1))
    decision = rank(job, stats, NOW, policy=PascalRouter(), block_size=BLOCK, max_age_s=0.5, recent=recent,
                    in_flight={})  # fmt: skip
    for load in decision.loads:
        m, free = replicas[load.instance_id]
        newer = [p for p in recent.get(load.instance_id, ()) if p.at_s > NOW - 0.1]
        taken = sum(p.blocks for p in newer)
        assert load.kv_blocks_footprint == m + taken
        assert load.free_kv_blocks == max(0, free - taken)
        assert load.num_reasoning == sum(p.reasoning for p in newer)


def test_a_burst_of_answering_phases_does_not_overfill_the_replica_it_chose():
    """Replica ``a`` has room for exactly one migrating request; the router just sent one
    there (after ``a``'s stats): the next one sees ``a`` full and stays on ``b`` (adaptive
    migration), instead of being sent to a replica with no free blocks."""
    job = Job("q2", (1, 2, 3), SamplingParams(max_tokens=40, seed=1)).moved([5] * 10, "b", "answer")
    need, stay = job.blocks(BLOCK), job.answer_blocks(BLOCK)
    replicas = {"a": _stats(r=0, free=need), "b": _stats(r=3, free=stay)}

    def decide(recent):
        return rank(job, replicas, NOW, policy=PascalRouter(), block_size=BLOCK, max_age_s=0.5, recent=recent,
                    in_flight={}).chosen  # fmt: skip

    assert decide({}) == "a"
    assert decide({"a": [Placement(NOW - 0.05, need, False)]}) == "b"
