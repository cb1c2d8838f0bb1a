"""WindowConsistencyRule: Dynasor's window consistency with a tolerance, as a stopping rule."""

from __future__ import annotations

import pathlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reasonserve.certainindex import AgreeSpanRule, ProbeObservation
from reasonserve.certainindex.stopping import WindowConsistencyRule
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.replay.probe_rules import WindowRule, online_first_stop
from reasonserve.replay.probe_runs import load_run

RUN = (
    pathlib.Path(__file__).resolve().parents[2] / "shared/data/probes/qwen3-8b__math500__seed_42__interval128"
)


def first_stop(rule, probes: list[tuple[str | None, str]]):
    state = rule.start()
    for i, (answer, text) in enumerate(probes):
        decision = state.observe(ProbeObservation(64 * (i + 1), answer, text))
        if decision.stop:
            return i, decision.answer
    return None


def test_at_most_tolerance_of_the_window_may_disagree():
    probes = [("1", ""), ("2", ""), ("1", ""), ("1", ""), ("1", "")]
    assert first_stop(WindowConsistencyRule(3, tolerance=1), probes) == (2, "1")  # 1, 2, 1: one disagrees
    assert first_stop(WindowConsistencyRule(3), probes) == (4, "1")  # all three must agree
    assert first_stop(WindowConsistencyRule(3, 1, min_tokens=64 * 4), probes) == (3, "1")
    hesitant = [("1", ""), ("1", "wait, no"), ("1", ""), ("1", "")]
    assert first_stop(WindowConsistencyRule(3), hesitant) == (3, "1")  # the hesitant probe is not counted
    assert first_stop(WindowConsistencyRule(3, hesitation=False), hesitant) == (2, "1")


@pytest.mark.parametrize(
    "kwargs", [{"window": 0}, {"window": 3, "tolerance": 3}, {"window": 2, "min_tokens": -1}]
)
def test_bad_settings_are_typed_errors(kwargs):
    with pytest.raises(InvalidArgumentError):
        WindowConsistencyRule(**kwargs)


@given(
    st.lists(st.tuples(st.sampled_from(["1", "2", "3", None]), st.sampled_from(["", "hmm"])), max_size=30),
    st.integers(1, 5),
)
def test_without_tolerance_it_decides_as_the_last_k_agree_rule(probes, k):
    ours, theirs = (
        first_stop(WindowConsistencyRule(k), probes),
        first_stop(AgreeSpanRule(k_probes=k, min_tokens=0), probes),
    )
    assert (ours is None) == (theirs is None)
    if ours is not None:
        assert ours[0] == theirs[0]


@pytest.mark.parametrize(("window", "tolerance"), [(4, 1), (6, 2), (3, 0)])
def test_it_takes_the_offline_replays_decisions_on_recorded_probes(window, tolerance):
    if not (RUN / "probes.csv.gz").is_file():
        pytest.skip(f"recorded probes not found at {RUN}")
    trajs = load_run(RUN)[:80]
    rule, replay = WindowConsistencyRule(window, tolerance), WindowRule(window, (window - tolerance) / window)
    stops = [(online_first_stop(rule, tr), replay.first_stop_by_estimator(tr)) for tr in trajs]
    assert all(ours == theirs for ours, theirs in stops)
    assert sum(ours is not None for ours, _ in stops) > 10  # the exits were compared, not only "no exit"
