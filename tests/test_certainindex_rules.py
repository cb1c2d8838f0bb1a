"""Certaindex conventions stated in the docs, checked as behaviour: the Dynasor presets
(docs/certainindex.md's table) stop after exactly their window of agreeing probes, and
semantic entropy's edge cases (no answer yet: 0; one answer: 1) hold in every form; TV
stability reads every window of Dynasor's Definition 2."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.certainindex import ProbeConsistency, SemanticEntropy, TVStability
from reasonserve.certainindex.estimators.probe_consistency import PRESETS

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
