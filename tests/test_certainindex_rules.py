"""Certaindex conventions stated in the docs, checked as behaviour: the Dynasor presets
(docs/certainindex.md's table) stop after exactly their window of agreeing probes, and
semantic entropy's edge cases (no answer yet: 0; one answer: 1) hold in every form."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.certainindex import ProbeConsistency, SemanticEntropy
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
