"""PASCAL, Dynasor, App-FIFO and LPM on generated views: pure, within capacity, phase and
program ordering as the papers define it (PASCAL's low queue using what the high queue left); Dynasor's starvation bound in the simulator."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.core import Phase
from reasonserve.core.decisions import Admit, Preempt
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies.app_fifo import AppFIFOPolicy
from reasonserve.policies.dynasor import DynasorPolicy, DynasorState
from reasonserve.policies.lpm import LPMPolicy
from reasonserve.policies.pascal import PascalPolicy
from reasonserve.sim import SimConfig, SimRequest, simulate

FACTORIES = [PascalPolicy, DynasorPolicy, AppFIFOPolicy, LPMPolicy]


def _requests(prefix, running):
    return st.lists(
        st.builds(
            RequestView,
            request_id=st.sampled_from([f"{prefix}{i}" for i in range(12)]),
            arrival_s=st.floats(0, 100),
            phase=st.sampled_from([Phase.REASONING, Phase.ANSWERING] if running else list(Phase)[:3]),
            num_prompt_tokens=st.integers(1, 64),
            num_computed_tokens=st.integers(0, 80),
            num_output_tokens=st.integers(0, 200),
            num_blocks=st.integers(1, 6) if running else st.just(0),
            blocks_needed=st.integers(0, 1) if running else st.integers(1, 8),
            enqueued_s=st.floats(0, 100),
            quantum_used=st.integers(0, 20) if running else st.just(0),
            program_id=st.sampled_from([None, "pa", "pb", "pc"]),
            prefix_hashes=st.lists(st.integers(0, 3), max_size=3).map(tuple),
        ),
        max_size=10,
        unique_by=lambda r: r.request_id,
    )


VIEWS = st.builds(
    SchedulerView,
    now_s=st.floats(0, 200),
    waiting=_requests("w", False).map(tuple),
    running=_requests("r", True).map(tuple),
    free_blocks=st.integers(0, 20),
    block_size=st.just(16),
    max_num_seqs=st.integers(1, 16),
)


def _split(decisions):
    return ([d.request_id for d in decisions if isinstance(d, Admit)],
            [d.request_id for d in decisions if isinstance(d, Preempt)])  # fmt: skip


@settings(max_examples=200)
@given(VIEWS)
def test_ranked_policies_are_pure_and_never_overcommit(view):
    for factory in FACTORIES:
        policy = factory()
        first = list(policy.decide(view))
        assert list(policy.decide(view)) == first
        admitted, preempted = _split(first)
        by_id = {r.request_id: r for r in view.waiting + view.running}
        assert set(admitted) <= {r.request_id for r in view.waiting}
        assert set(preempted) <= {r.request_id for r in view.running}
        staying = [r for r in view.running if r.request_id not in preempted]
        need = sum(by_id[i].blocks_needed for i in admitted) + sum(r.blocks_needed for r in staying)
        assert need <= view.free_blocks + sum(by_id[i].num_blocks for i in preempted) or not admitted
        assert len(staying) + len(admitted) <= view.max_num_seqs or not admitted


def _kept_before(policy, view, r, admitted, preempted):
    """(blocks left, seats left) for ``r`` after every better-ranked request kept or admitted."""
    key = policy.rank_key(r, True)
    kept = [x for x in view.running if x.request_id not in preempted and policy.rank_key(x, True) < key]
    adm = [x for x in view.waiting if x.request_id in admitted and policy.rank_key(x, False) < key]
    taken = sum(x.num_blocks + x.blocks_needed for x in kept) + sum(x.blocks_needed for x in adm)
    blocks = view.free_blocks + sum(x.num_blocks for x in view.running) - taken
    return blocks, view.max_num_seqs - len(kept) - len(adm)


@settings(max_examples=300)
@given(VIEWS, st.integers(1, 20), st.integers(0, 300))
def test_pascal_gives_the_high_queue_kv_priority(view, quantum, threshold):
    policy = PascalPolicy(quantum=quantum, demote_threshold_tokens=threshold)
    admitted, preempted = _split(policy.decide(view))
    high = {r.request_id for r in view.waiting + view.running if policy.queue(r) == 0}
    assert all((r.phase is Phase.ANSWERING or r.num_tokens > threshold) == (r.request_id not in high)
               for r in view.waiting + view.running)  # fmt: skip
    for r in view.running:  # KV priority: a request loses its seat only if what better-ranked
        if r.request_id in preempted:  # requests left cannot hold it (so low never outranks high)
            blocks, seats = _kept_before(policy, view, r, admitted, preempted)
            assert r.num_blocks + r.blocks_needed > blocks or seats < 1


@settings(max_examples=300)
@given(VIEWS, st.integers(1, 20), st.integers(0, 300))
def test_pascal_low_queue_uses_what_a_blocked_reasoning_request_cannot(view, quantum, threshold):
    # §IV-B/C: answering requests get whatever the high queue has not allocated; a waiting
    # answering request is left out only if the requests ranked ahead of it left too little
    policy = PascalPolicy(quantum=quantum, demote_threshold_tokens=threshold)
    admitted, preempted = _split(policy.decide(view))
    left = [r for r in view.waiting if policy.queue(r) == 1 and r.request_id not in admitted]
    if not left:
        return
    first = min(left, key=lambda r: policy.rank_key(r, False))
    key = policy.rank_key(first, False)
    kept = [x for x in view.running if x.request_id not in preempted and policy.rank_key(x, True) < key]
    adm = [x for x in view.waiting if x.request_id in admitted and policy.rank_key(x, False) < key]
    taken = sum(x.num_blocks + x.blocks_needed for x in kept) + sum(x.blocks_needed for x in adm)
    blocks = view.free_blocks + sum(x.num_blocks for x in view.running) - taken
    assert first.blocks_needed > blocks or len(kept) + len(adm) >= view.max_num_seqs


@settings(max_examples=200)
@given(VIEWS, st.floats(1, 150))
def test_dynasor_gangs_programs_and_escalates_starving_ones_first(view, bound):
    policy = DynasorPolicy(starvation_bound_s=bound)
    admitted, _ = _split(policy.decide(view))
    keys = policy.program_keys(view, DynasorState())

    def key(rid):
        r = {x.request_id: x for x in view.waiting + view.running}[rid]
        return keys[r.program_id if r.program_id is not None else "\x00" + r.request_id]

    left = [r.request_id for r in view.waiting if r.request_id not in admitted]
    for rid in admitted:  # admissions go in program-rank order: nothing left behind ranks before
        assert all(key(other) >= key(rid) for other in left)
    escalated = [rid for rid in admitted if key(rid)[0] == 0]
    if any(key(rid)[0] == 0 for rid in left):
        assert len(escalated) == len(admitted)  # nobody jumps a starving program


def test_dynasor_learns_program_lengths_and_runs_shorter_programs_first():
    def view(now, waiting, running=()):
        return SchedulerView(now, tuple(waiting), tuple(running), 100, 16, 1)

    def req(rid, pid, arrival, out=0):
        return RequestView(
            rid, arrival, Phase.PREFILL, 8, 0, out, num_blocks=0, blocks_needed=1, program_id=pid
        )

    policy = DynasorPolicy(starvation_bound_s=1e6)
    policy.decide(view(0.0, [], [req("a1", "long", 0.0, out=900), req("b1", "short", 0.1, out=10)]))
    policy.decide(view(1.0, []))  # both finished: history long=900, short=10 tokens per request
    decisions = policy.decide(view(2.0, [req("a2", "long", 1.5), req("b2", "short", 1.6)]))
    assert decisions == [Admit("b2")]  # one seat: the program with less remaining work
    assert DynasorPolicy(starvation_bound_s=0.1).decide(
        view(2.0, [req("a2", "long", 1.5), req("b2", "short", 1.6)])
    ) == [Admit("a2")]  # both starving: arrival order


def _starvation_workload(seed):
    """An overload of short requests (50/s; two seats serve about 30/s) and one long
    two-request program arriving at 0.3 s: under SJF it waits for the whole stream."""
    rng = random.Random(seed)
    shorts = [SimRequest(f"s{i:03d}", 0.02 * i + rng.uniform(0, 0.01), 20, 3, 2) for i in range(300)]
    return shorts + [SimRequest(f"p{i}", 0.3, 50, 150, 50, "big") for i in range(2)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_escalation_bounds_a_long_programs_wait_under_sjf(seed):
    cfg = SimConfig(num_instances=1, max_num_seqs=2, kv_capacity_tokens=2048, model="qwen2.5-7b")
    reqs, bound = _starvation_workload(seed), 2.0
    res = simulate(reqs, cfg, lambda: DynasorPolicy(starvation_bound_s=bound))
    waits = [s.first_token_s - s.req.arrival_s for s in res.sequences if s.req.program_id == "big"]
    assert max(waits) <= bound + 1.0  # escalated at the bound, admitted after the few older escalated shorts
    starved = simulate(reqs, cfg, lambda: DynasorPolicy(starvation_bound_s=1e6))
    waits = [s.first_token_s - s.req.arrival_s for s in starved.sequences if s.req.program_id == "big"]
    assert max(waits) > 2 * bound  # without escalation SJF starves it (part of its gang) behind the stream
