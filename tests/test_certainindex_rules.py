"""Certaindex conventions stated in the docs, checked as behaviour: the Dynasor presets
(docs/certainindex.md's table) stop after exactly their window of agreeing probes, and
semantic entropy's edge cases (no answer yet: 0; one answer: 1) hold in every form; TV
stability reads every window of Dynasor's Definition 2; the agree-span rule, allocation
policies and the Clopper-Pearson risk bound at their boundaries, worked by hand."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.certainindex import (
    AgreeSpanRule,
    Combined,
    LengthPolicy,
    ParetoCurve,
    ProbeConsistency,
    ProbeObservation,
    ProgramStatus,
    SemanticEntropy,
    TVStability,
    tv_probe_bound,
)
from reasonserve.certainindex.conformal import (
    ThresholdRisk,
    choose_threshold,
    clopper_pearson_lower,
    clopper_pearson_upper,
)
from reasonserve.certainindex.estimators.probe_consistency import PRESETS
from reasonserve.certainindex.stopping import window_rule

# docs/certainindex.md: preset -> (window, probe interval in tokens)
DOCUMENTED = {"mild": (8, 64), "low": (5, 64), "mid": (3, 64), "high": (2, 64), "crazy": (2, 32)}


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_each_preset_stops_after_exactly_its_window_of_agreeing_probes(name):
    window, interval = DOCUMENTED[name]
    assert PRESETS[name][1] == interval
    rule = ProbeConsistency.preset(name)
    for agreeing in range(1, window + 3):
        certainty = rule.score([9] + [4] * agreeing)  # one other answer first, then agreement
        assert certainty == min(agreeing, window) / window
        assert rule.should_stop(certainty) == (agreeing >= window)


def test_semantic_entropy_has_no_certainty_before_any_answer():
    se = SemanticEntropy()
    assert se.score([]) == 0.0
    assert se.score([-1, -1]) == 0.0  # only empty answers
    assert se.score([5]) == 1.0 and se.score([-1, 5, -1]) == 1.0  # one answer cannot disagree
    assert se.from_ids(torch.tensor([[-1, -1], [0, -1]])).tolist() == [0.0, 1.0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-1, 4), max_size=12))
def test_semantic_entropy_forms_agree_with_the_formula(ids):
    """``(log n - H) / log n`` over the counted answers, with 0 for none and 1 for one;
    the incremental, whole-history and batched forms give it alike."""
    counted = [c for c in ids if c >= 0]
    n = len(counted)
    if n <= 1:
        want = float(n)
    else:
        h = -sum(counted.count(c) / n * math.log(counted.count(c) / n) for c in set(counted))
        want = (math.log(n) - h) / math.log(n)
    se = SemanticEntropy()
    assert se.score(ids) == pytest.approx(want, abs=1e-12)
    padded = ids + [-1] * (12 - len(ids))  # ids must lie below the row's length
    batched = se.from_ids(torch.tensor([padded, [-1] * 12]))
    assert batched.tolist() == pytest.approx([want, 0.0], abs=1e-6)


# TV stability (Dynasor App. E, Definition 2), on hand-worked histories with k = 2: the
# windows of k answers at shifts 1..k and of k - 1 answers at shifts 1..k - 1.
@pytest.mark.parametrize(
    ("history", "certainty"),
    [
        ([1, 1, 1, 1], 1.0),
        ([1, 1, 1, 2], 0.5),  # only the last k-window, {1, 2} against {1, 1}, moves: TV 1/2
        ([1, 2, 1, 2], 0.0),  # every k-window is {1, 2}; the (k-1)-windows {1} and {2}: TV 1
        ([1, 2, 2, 2], 0.0),  # k-windows {1, 2} against {2, 2}: 1/2; but (k-1)-windows {1}, {2}: 1
        ([1, 1, 1], 0.0),  # fewer than 2k answers
        ([3, 3, 1, 1, 1, 1], 1.0),  # only the last 2k count
    ],
)
def test_tv_stability_reads_every_window_of_definition_2(history, certainty):
    tv = TVStability(k=2, epsilon=0.25)
    assert tv.score(history) == certainty
    assert tv.should_stop(tv.score(history)) == (certainty >= 0.75)
    state = tv.start()
    for c in [-1, *history]:  # the incremental form, with an uncounted probe
        value = tv.update(state, c)
    assert value == certainty


def _tv_definition(y: list[int], k: int) -> float:
    """1 - max TV straight from Definition 2 (empirical distributions as dicts)."""

    def dist(window):
        return {g: window.count(g) / len(window) for g in set(window)}

    def tv(p, q):
        return sum(abs(p.get(g, 0.0) - q.get(g, 0.0)) for g in p.keys() | q.keys()) / 2

    pairs = [(y[0:k], y[j : j + k]) for j in range(1, k + 1)]
    pairs += [(y[0 : k - 1], y[j : j + k - 1]) for j in range(1, k)]
    return 1.0 - max(tv(dist(a), dist(b)) for a, b in pairs)


@settings(max_examples=80, deadline=None)
@given(k=st.integers(2, 5), data=st.data())
def test_tv_stability_equals_definition_2(k, data):
    y = data.draw(st.lists(st.integers(0, 3), min_size=2 * k, max_size=2 * k))
    assert TVStability(k=k).certainty_of(y) == pytest.approx(_tv_definition(y, k), abs=1e-12)


@pytest.mark.parametrize(("groups", "eps", "delta"), [(1, 0.5, 0.05), (3, 0.2, 0.1), (8, 0.9, 0.01)])
def test_tv_probe_bound_is_the_smallest_k_of_lemma_1(groups, eps, delta):
    def holds(k):
        return 2**groups * 4 * k * math.exp(-2 * (k - 1) * (eps / 3) ** 2) <= delta

    k = tv_probe_bound(groups, eps, delta)
    assert holds(k) and (k == 2 or not holds(k - 1))


def test_a_combined_signal_passes_at_its_threshold():
    result = Combined({"a": 0.5, "b": 0.25}).evaluate({"a": 0.5, "b": 0.25})
    assert result.certain and result.passed == {"a": True, "b": True}
    assert not Combined({"a": 0.5}).evaluate({"a": 0.4999}).certain


# agree-span (Dynasor): the answer must hold for ceil(tokens / interval) probes, the interval
# being the smallest gap between probe positions seen so far (the first probe's position first)
def _first_stop(rule, positions, answer="7"):
    state = rule.start()
    for p in positions:
        if state.observe(ProbeObservation(p, answer, "so the answer is 7")).stop:
            return p
    return None


def test_agree_span_infers_the_interval_from_the_smallest_gap_between_probes():
    rule = AgreeSpanRule(tokens=2048, min_tokens=0)
    positions = [1000 + 64 * i for i in range(40)]
    # 1000 first (window 3), then gaps of 64: window 32, reached at the 32nd probe
    assert _first_stop(rule, positions) == 1000 + 64 * 31
    # the first probe's position is the first gap: 32, so window 4 (the 4th probe, at 224)
    assert _first_stop(AgreeSpanRule(tokens=128, min_tokens=0), [32, 96, 160, 224, 288]) == 128 + 96
    assert _first_stop(AgreeSpanRule(tokens=128, min_tokens=0, interval_tokens=64), [32, 96]) == 96


def test_agree_span_waits_for_min_tokens():
    rule = AgreeSpanRule(tokens=64, min_tokens=300, interval_tokens=64)
    assert _first_stop(rule, [64 * i for i in range(1, 10)]) == 320


def test_the_earlier_shipped_rule_is_2432_tokens_of_agreement_at_least_2048_in():
    assert window_rule() == AgreeSpanRule(tokens=2432, min_tokens=2048)


# allocation (Dynasor intra-program) and the risk bound ---------------------------------------
def test_pareto_bins_include_their_lower_edge():
    curve = ParetoCurve(edges=(0.0, 0.5), budgets=(10, 2))
    assert [curve(c) for c in (0.0, 0.4999, 0.5, 1.0)] == [10, 10, 2, 2]


def test_pareto_fit_takes_the_quantile_of_each_bins_needs():
    needs = [5.0, 1.0, 4.0, 2.0, 3.0]
    at = {q: ParetoCurve.fit([0.95] * 5, needs, quantile=q, bins=2)(0.95) for q in (0.0, 0.25, 0.5, 1.0)}
    assert at == {0.0: 1, 0.25: 2, 0.5: 3, 1.0: 5}  # sorted needs[int(q * (n - 1))]


def test_length_policy_denies_at_exactly_max_tokens():
    policy = LengthPolicy(max_tokens=100)
    assert policy.grant(ProgramStatus(knob=1, certainty=0.0, tokens=99))
    assert not policy.grant(ProgramStatus(knob=1, certainty=0.0, tokens=100))


def test_clopper_pearson_bounds_have_their_closed_forms_at_the_edges():
    """With k = 0 or n - 1 (upper) and k = n or 1 (lower) the binomial tail is one term."""
    n, d = 10, 0.05
    assert clopper_pearson_upper(0, n, d) == pytest.approx(1 - d ** (1 / n), abs=1e-9)  # (1-p)^n = d
    assert clopper_pearson_upper(n - 1, n, d) == pytest.approx((1 - d) ** (1 / n), abs=1e-9)  # 1-p^n = d
    assert clopper_pearson_upper(n, n, d) == 1.0
    assert clopper_pearson_lower(n, n, d) == pytest.approx(d ** (1 / n), abs=1e-9)  # p^n = d
    assert clopper_pearson_lower(1, n, d) == pytest.approx(1 - (1 - d) ** (1 / n), abs=1e-9)
    assert clopper_pearson_lower(0, n, d) == 0.0


def test_the_loss_bound_splits_delta_between_harms_and_gains():
    """Learn-then-Test: harm upper bound and gain lower bound at delta / 2 each."""
    no_harm = ThresholdRisk(threshold=0.9, harms=0, gains=0, n=10)  # 1 - (delta/2)^(1/n) - 0
    all_gain = ThresholdRisk(threshold=0.8, harms=10, gains=10, n=10)  # 1 - (delta/2)^(1/n)
    for risk in (no_harm, all_gain):
        assert risk.bound(0.1) == pytest.approx(1 - 0.05**0.1, abs=1e-9)
    tolerance = no_harm.bound(0.1)
    assert choose_threshold([no_harm], tolerance=tolerance, delta=0.1) is no_harm  # passes at equality
    assert choose_threshold([no_harm], tolerance=tolerance - 1e-6, delta=0.1) is None
