"""Coarse event steps (``decode_steps_per_event``): a decode-only batch runs several
iterations per decision, each timed by the cost model, without changing what a lone
request experiences; and the closed-form decode timing equals step-by-step timing."""

import pytest

from reasonserve.policies.pascal import PascalPolicy
from reasonserve.sim import SimConfig, SimRequest, simulate


@pytest.mark.parametrize("k", [2, 7, 16])
def test_a_lone_request_sees_the_same_token_times(k):
    reqs = [SimRequest("a", 0.0, 40, 37, 23)]
    base = SimConfig(num_instances=1, kv_capacity_tokens=4096, model="qwen2.5-7b")
    exact = simulate(reqs, base, PascalPolicy).sequences[0]
    coarse_res = simulate(reqs, SimConfig(**{**_fields(base), "decode_steps_per_event": k}), PascalPolicy)
    coarse = coarse_res.sequences[0]
    assert coarse.answer_times == pytest.approx(exact.answer_times, rel=1e-9)
    assert coarse.end_of_thinking_s == pytest.approx(exact.end_of_thinking_s, rel=1e-9)
    assert coarse.finished_s == pytest.approx(exact.finished_s, rel=1e-9)


def _fields(cfg):
    return {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}


def test_decode_iterations_match_step_by_step_costs():
    cost = SimConfig(model="qwen2.5-32b").cost_model()
    contexts = [100, 2000, 5000]
    steps = [cost.step_s([(1, c + i) for c in contexts]) for i in range(9)]
    assert cost.decode_iterations_s(3, sum(contexts), 9) == pytest.approx(steps, rel=1e-12)


def test_runs_end_at_phase_transitions_so_the_router_is_asked_in_time():
    cfg = SimConfig(num_instances=2, kv_capacity_tokens=4096, model="qwen2.5-7b", decode_steps_per_event=64)
    reqs = [SimRequest("A", 0.0, 100, 5, 10), SimRequest("B", 0.0, 100, 300, 5), SimRequest("C", 0.0, 100, 300, 5)]
    from reasonserve.policies.router import PascalRouter

    res = simulate(reqs, cfg, lambda: PascalPolicy(quantum=50), PascalRouter(), check_every_step=True)
    [m] = res.migrations
    a = res.sequences[0]
    assert m.request_id == "A" and m.start_s == pytest.approx(a.end_of_thinking_s)
