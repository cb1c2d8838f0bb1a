"""KV migration at the reasoning->answering transition (PASCAL Algorithm 2 in the
simulator): it happens when the router says so, costs the cost model's transfer time,
and never loses KV or requests."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.cost.hardware import HARDWARE
from reasonserve.cost.model_spec import MODELS
from reasonserve.policies.pascal import PascalPolicy
from reasonserve.policies.router import LeastKVRouter, PascalRouter
from reasonserve.sim import RooflineCostModel, SimConfig, SimRequest, simulate

CFG = SimConfig(num_instances=2, kv_capacity_tokens=4096, model="qwen2.5-7b", block_size=16)


def _policy():
    return PascalPolicy(quantum=50, demote_threshold_tokens=5000)


def _three():  # all land on instance "0" (equal footprints, ties by id); A reasons briefly
    return [SimRequest("A", 0.0, 100, 5, 10), SimRequest("B", 0.0, 100, 300, 5), SimRequest("C", 0.0, 100, 300, 5)]


def test_answering_phase_moves_to_the_instance_with_fewest_reasoning_requests():
    res = simulate(_three(), CFG, _policy, PascalRouter(), check_every_step=True)
    assert set(res.placements.values()) == {"0"}
    [m] = res.migrations
    assert (m.request_id, m.source, m.target, m.on_gpu) == ("A", "0", "1", True)
    a = res.sequences[0]
    assert m.tokens == 100 + 5 - 1 and m.blocks_out == m.blocks_in == 7  # ceil(104 / 16)
    assert m.end_s - m.start_s == pytest.approx(CFG.cost_model().migrate_s(104))
    assert m.start_s >= a.end_of_thinking_s and a.answer_times[0] > m.end_s
    assert a.num_migrations == 1 and len(a.answer_times) == 10


@pytest.mark.parametrize("router", [PascalRouter(migrate=False), LeastKVRouter()])
def test_no_migration_keeps_the_answering_phase_in_place(router):
    res = simulate(_three(), CFG, _policy, router, check_every_step=True)
    assert res.migrations == () and all(s.num_migrations == 0 for s in res.sequences)


def test_migration_cost_is_the_papers_40ms_per_2048_tokens_and_validated():
    cost = CFG.cost_model()
    assert cost.migrate_s(2048) == pytest.approx(0.040) and cost.migrate_s(4096) == pytest.approx(0.080)
    with pytest.raises(InvalidArgumentError, match="migration_s_per_2048_tokens"):
        RooflineCostModel(HARDWARE["h100"], MODELS["qwen2.5-7b"], migration_s_per_2048_tokens=-1.0)


REQUEST = st.tuples(st.floats(0, 2), st.integers(1, 40), st.integers(1, 60), st.integers(0, 30))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(REQUEST, min_size=1, max_size=12),
    st.integers(2, 4),
    st.sampled_from([160, 320, 1024]),
    st.integers(1, 5),
    st.sampled_from([PascalRouter(), PascalRouter(adaptive=False)]),
    st.sampled_from([1, 6]),
)
def test_migration_never_loses_kv_or_requests(rows, n, capacity, seats, router, steps_per_event):
    reqs = [SimRequest(f"q{i:02d}", a, p, r, x) for i, (a, p, r, x) in enumerate(rows)]
    cfg = SimConfig(num_instances=n, kv_capacity_tokens=capacity, block_size=4, max_num_seqs=seats,
                    max_num_batched_tokens=64, model="qwen2.5-7b",
                    decode_steps_per_event=steps_per_event)  # fmt: skip
    res = simulate(reqs, cfg, lambda: PascalPolicy(quantum=8, demote_threshold_tokens=60), router,
                   check_every_step=True)  # fmt: skip
    assert [s.request_id for s in res.sequences] == sorted(r.request_id for r in reqs)
    for m in res.migrations:  # KV conserved across the move: same tokens, same blocks
        assert m.blocks_in == m.blocks_out == -(-m.tokens // cfg.block_size) and m.source != m.target
    moved = {s.request_id: s.num_migrations for s in res.sequences if s.num_migrations}
    assert sum(moved.values()) == len(res.migrations) and all(v == 1 for v in moved.values())
    for s in res.sequences:
        assert s.num_output == s.req.output_tokens and len(s.answer_times) == s.req.answer_tokens
