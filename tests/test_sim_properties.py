"""Simulator properties over generated workloads, for every policy: no request lost or
duplicated, KV accounting never negative or over capacity (checked after every step),
every request completes with all its tokens, and runs are deterministic."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.core import PolicyError
from reasonserve.policies import FCFSPolicy, RoundRobinPolicy
from reasonserve.policies.app_fifo import AppFIFOPolicy
from reasonserve.policies.dynasor import DynasorPolicy
from reasonserve.policies.lpm import LPMPolicy
from reasonserve.policies.pascal import PascalPolicy
from reasonserve.policies.router import LeastKVRouter, PascalRouter
from reasonserve.sim import SimConfig, SimRequest, simulate

POLICIES = {
    "fcfs": FCFSPolicy,
    "round_robin": lambda: RoundRobinPolicy(quantum=8),
    "pascal": lambda: PascalPolicy(quantum=8, demote_threshold_tokens=60),
    "dynasor": lambda: DynasorPolicy(starvation_bound_s=0.5),
    "app_fifo": AppFIFOPolicy,
    "lpm": LPMPolicy,
}

REQUEST = st.tuples(
    st.floats(0, 3), st.integers(1, 40), st.integers(0, 60), st.integers(0, 40), st.integers(0, 3)
).filter(lambda t: t[2] + t[3] >= 1)


@st.composite
def workloads(draw):
    rows = draw(st.lists(REQUEST, min_size=1, max_size=14))
    reqs = [
        SimRequest(f"q{i:02d}", a, p, r, n, f"g{g}" if g else None) for i, (a, p, r, n, g) in enumerate(rows)
    ]
    cfg = SimConfig(
        num_instances=draw(st.integers(1, 3)),
        block_size=draw(st.sampled_from([4, 16])),
        kv_capacity_tokens=draw(st.sampled_from([160, 320, 1024])),
        max_num_seqs=draw(st.integers(1, 6)),
        max_num_batched_tokens=draw(st.sampled_from([16, 64, 512])),
        preemption=draw(st.sampled_from(["swap", "recompute"])),
        model="qwen2.5-7b",
        decode_steps_per_event=draw(st.sampled_from([1, 5])),
    )
    return reqs, cfg


def _timeline(res):
    return [(s.request_id, s.finished_s, tuple(s.answer_times), s.num_preemptions) for s in res.sequences]


@pytest.mark.parametrize("name", sorted(POLICIES))
@settings(max_examples=25, deadline=None)
@given(workloads(), st.booleans())
def test_every_request_completes_once_with_sound_kv_accounting(name, work, pascal_router):
    reqs, cfg = work
    router = PascalRouter() if pascal_router else LeastKVRouter()
    res = simulate(reqs, cfg, POLICIES[name], router, check_every_step=True)
    assert [s.request_id for s in res.sequences] == sorted(r.request_id for r in reqs)
    for s in res.sequences:
        assert s.num_output == s.req.output_tokens and len(s.answer_times) == s.req.answer_tokens
        assert s.finish_reason == "length" and s.finished_s >= s.req.arrival_s
        assert s.answer_times == sorted(s.answer_times)
    assert set(res.placements) == {r.request_id for r in reqs}
    again = simulate(reqs, cfg, POLICIES[name], router)
    assert _timeline(again) == _timeline(res)  # deterministic given the workload (and its seed)


class _Overcommit:
    """Admits everything: the simulator must refuse, not corrupt its KV accounting."""

    name = "overcommit"

    def decide(self, view):
        from reasonserve.core.decisions import Admit

        return [Admit(r.request_id) for r in view.waiting]


class _Idle:
    name = "idle"

    def decide(self, view):
        return []


def test_bad_policies_are_refused_not_silently_wrong():
    cfg = SimConfig(num_instances=1, kv_capacity_tokens=64, block_size=16, model="qwen2.5-7b")
    reqs = [SimRequest(f"q{i}", 0.0, 30, 5, 5) for i in range(4)]
    with pytest.raises(PolicyError, match="KV blocks"):
        simulate(reqs, cfg, _Overcommit)
    with pytest.raises(PolicyError, match="never finished"):
        simulate(reqs, cfg, _Idle)
