"""The Ray Serve router's ranking without Ray: with fresh stats it is exactly the pure
PASCAL policy over the same loads; stale, missing or malformed stats give the documented
default ranking with a reason; a replica's stats are measured from a real engine."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _live_server import tiny_engine
from reasonserve.adapters.ray_serve.config import RayServeConfig
from reasonserve.adapters.ray_serve.job import Job
from reasonserve.adapters.ray_serve.ranking import Placement, rank
from reasonserve.adapters.ray_serve.stats import ReplicaStats, measure
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine import EngineConfig, SamplingParams
from reasonserve.policies.pacer import TokenPacer
from reasonserve.policies.router import PascalRouter

NOW = 1000.0
BLOCK = 4
PARAMS = SamplingParams(max_tokens=40, seed=1)


def _stats(m=0, ok=True, r=0, a=0, free=100, at=NOW - 0.1) -> dict:
    return ReplicaStats(m, ok, r, a, free, 200, r + a, at).to_dict()


STATS = st.builds(
    _stats,
    m=st.integers(0, 50),
    ok=st.booleans(),
    r=st.integers(0, 5),
    a=st.integers(0, 5),
    free=st.integers(0, 30),
)
REPLICAS = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), STATS, min_size=1, max_size=4)


def _rank(job, candidates, policy=None, recent=None, in_flight=None, max_age_s=0.5):
    return rank(job, candidates, NOW, policy=policy or PascalRouter(), block_size=BLOCK, max_age_s=max_age_s,
                recent=recent or {}, in_flight=in_flight or {})  # fmt: skip


@given(REPLICAS, st.integers(1, 30))
def test_placement_is_algorithm_1_over_the_same_loads(replicas, prompt_len):
    job = Job("q", tuple(range(prompt_len)), PARAMS)
    decision = _rank(job, replicas)
    loads = tuple(ReplicaStats.from_dict(replicas[r]).load(r) for r in sorted(replicas))
    assert decision.fallback is None and decision.loads == loads
    assert decision.chosen == PascalRouter().route(job.view(BLOCK), loads)
    assert sorted(decision.ranking) == sorted(replicas)


@given(REPLICAS, st.integers(1, 39), st.booleans(), st.booleans())
def test_answering_phase_is_algorithm_2_with_adaptive_migration(replicas, committed, migrate, adaptive):
    current = sorted(replicas)[-1]
    job = Job("q", (1, 2, 3), PARAMS).moved([5] * committed, current, "answer")
    policy = PascalRouter(migrate=migrate, adaptive=adaptive)
    decision = _rank(job, replicas, policy)
    expected = policy.route_transition(job.view(BLOCK), current, decision.loads, job.blocks(BLOCK),
                                       stay_blocks_needed=job.answer_blocks(BLOCK))  # fmt: skip
    assert decision.fallback is None and decision.chosen == expected


def test_adaptive_migration_stays_when_only_the_current_replica_has_room():
    job = Job("q", (1, 2, 3), PARAMS).moved([5] * 10, "b", "answer")
    need, stay = job.blocks(BLOCK), job.answer_blocks(BLOCK)
    assert stay < need
    replicas = {"a": _stats(r=0, free=need - 1), "b": _stats(r=3, free=stay)}
    assert _rank(job, replicas).chosen == "b"
    assert _rank(job, replicas, PascalRouter(adaptive=False)).chosen == "a"
    assert _rank(job, replicas, PascalRouter(migrate=False)).chosen == "b"
    replicas["a"] = _stats(r=0, free=need)
    assert _rank(job, replicas).chosen == "a"
    replicas["a"], replicas["b"] = _stats(r=0, free=need - 1), _stats(r=3, free=stay - 1)
    assert _rank(job, replicas).chosen == "a"  # no room to stay either: Algorithm 2's choice


def test_placements_after_the_stats_count_so_a_burst_is_spread():
    job = Job("q", (1, 2, 3), PARAMS)
    replicas = {"a": _stats(m=0), "b": _stats(m=5)}
    assert _rank(job, replicas).chosen == "a"
    recent = {"a": [Placement(NOW - 0.05, job.blocks(BLOCK), True)]}  # after the stats (NOW - 0.1)
    decision = _rank(job, replicas, recent=recent)
    assert decision.chosen == "b"
    assert decision.loads[0].kv_blocks_footprint == job.blocks(BLOCK)
    assert decision.loads[0].num_reasoning == 1
    old = {"a": [Placement(NOW - 0.2, job.blocks(BLOCK), True)]}  # already in the stats
    assert _rank(job, replicas, recent=old).chosen == "a"


@pytest.mark.parametrize(
    "bad, why",
    [
        (_stats(at=NOW - 0.6), "stale"),
        (None, "no routing stats"),
        ({}, "no routing stats"),
        ({**_stats(), "num_reasoning": -1}, "no routing stats"),
        ({**_stats(), "answering_slo_ok": 1}, "no routing stats"),
        ({**_stats(), "reported_at_s": float("nan")}, "no routing stats"),
    ],
)
def test_untrusted_stats_give_the_default_ranking_with_a_reason(bad, why):
    replicas = {"a": _stats(m=0), "b": _stats(m=9), "c": bad}
    job = Job("q", (1, 2, 3), PARAMS)
    decision = _rank(job, replicas, in_flight={"a": 3, "b": 1})
    assert why in decision.fallback and decision.loads == ()
    assert decision.ranking == ("c", "b", "a")  # least in flight first, ties by id
    answer = job.moved([5], "a", "answer")
    assert _rank(answer, replicas, in_flight={"a": 3}).ranking[0] == "a"  # no blind migration


def test_a_dead_current_replica_leaves_algorithm_2_without_the_stay_rule():
    job = Job("q", (1, 2, 3), PARAMS).moved([5] * 10, "gone", "answer")
    replicas = {"a": _stats(r=2, free=0), "b": _stats(r=1, free=0)}
    assert _rank(job, replicas).chosen == "b"


def test_stats_are_measured_from_a_real_engine(tmp_path):
    engine = tiny_engine(tmp_path, EngineConfig(block_size=4, num_blocks=64, end_of_thinking_token_id=255))
    empty = measure(engine, TokenPacer(0.1), quantum_tokens=4)
    assert (empty.kv_blocks_footprint, empty.num_reasoning, empty.free_kv_blocks) == (0, 0, 64)
    engine.add_request([1, 2, 3, 4, 5], SamplingParams(max_tokens=30, ignore_eos=True))
    for _ in range(3):
        engine.step()
    stats = measure(engine, TokenPacer(0.1), quantum_tokens=4)
    seq = engine.running[0]
    assert stats.num_reasoning == 1 and stats.num_fresh_answering == 0
    assert stats.kv_blocks_footprint == len(seq.block_table) == 64 - stats.free_kv_blocks
    seq.eot_index = 0  # as if its first token had ended the reasoning: answering from here
    answering = measure(engine, TokenPacer(0.1), quantum_tokens=4, now_s=seq.token_times[1])
    assert (answering.num_reasoning, answering.num_fresh_answering, answering.answering_slo_ok) == (0, 1, True)
    late = measure(engine, TokenPacer(0.1), quantum_tokens=4, now_s=seq.token_times[1] + 10.0)
    assert late.answering_slo_ok is False  # 10 s without a token at one per 100 ms: the pacer ran dry
    assert ReplicaStats.from_dict(late.to_dict()) == late
    # stalled for 10 s, then 20 tokens at once: the reader is 1.9 s of tokens behind the
    # generator at 10.5 s, so the buffer is not dry (the unshifted curve would say "behind")
    t0 = seq.token_times[1]
    seq.token_times[:] = [t0, t0] + [t0 + 10.0] * 20
    caught_up = measure(engine, TokenPacer(0.1), quantum_tokens=4, now_s=t0 + 10.5)
    assert caught_up.answering_slo_ok is True and TokenPacer(0.1).behind(t0, 21, t0 + 10.5)
    dry = measure(engine, TokenPacer(0.1), quantum_tokens=4, now_s=t0 + 12.1)
    assert dry.answering_slo_ok is False  # every buffered token read by 11.9 s, the next overdue


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"router": "random"}, "router"),
        ({"num_replicas": 0}, "num_replicas"),
        ({"stats_period_s": 0}, "stats_period_s"),
        ({"stats_max_age_s": 0.01}, "stats_max_age_s"),
        ({"max_migration_retries": -1}, "max_migration_retries"),
        ({"model": ""}, "model"),
    ],
)
def test_bad_config_names_the_field(kwargs, field):
    with pytest.raises(InvalidArgumentError, match=field):
        RayServeConfig(**{"model": "m", **kwargs})


def test_a_job_needs_a_seed_and_a_known_kind():
    with pytest.raises(InvalidArgumentError, match="seed"):
        Job("q", (1,), SamplingParams(max_tokens=4))
    with pytest.raises(InvalidArgumentError, match="kind"):
        Job("q", (1,), PARAMS, kind="teleport")


def test_serve_replicas_reports_bad_input_in_one_line(tmp_path, capsys):
    import importlib.util

    from reasonserve.cli import main
    from reasonserve.engine import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path / "tiny")
    assert main(["serve", "--model", str(path), "--replicas", "0"]) == 2
    err = capsys.readouterr().err
    has_ray = importlib.util.find_spec("ray") is not None
    assert ("num_replicas must be an int >= 1" if has_ray else "needs Ray Serve") in err
    assert "Traceback" not in err
