"""Certainindex estimators: hand-computed cases, batch = incremental, bad input."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.certainindex import (
    Combined,
    ProbeConsistency,
    ProbeTracker,
    RewardCertainty,
    SemanticEntropy,
    TVStability,
    entropy_certainty,
    group_answers,
    length_certainty,
    logprob_certainty,
    tv_probe_bound,
)
from reasonserve.core import InvalidArgumentError, InvalidTypeError

IDS = st.lists(st.integers(-1, 3), min_size=0, max_size=40)


def test_probe_consistency_hand_case():
    pc = ProbeConsistency(window=3)
    assert pc.score([0, 0, 0]) == 1.0
    assert pc.score([0, 1, 1]) == pytest.approx(2 / 3)
    assert pc.score([1, 1, -1, 1]) == 1.0  # uncounted probes are left out of the window
    assert pc.score([0, 0]) == pytest.approx(2 / 3)  # fewer than `window` probes: below 1
    assert pc.score([]) == 0.0


def test_regression_reference_early_exit_bug():
    """The reference `should_early_exit` returned True before checking consistency."""
    pc = ProbeConsistency.preset("mid")
    state = pc.start()
    for cid in (0, 1, 2):
        assert not pc.should_stop(pc.update(state, cid))
    for cid in (2, 2):
        certainty = pc.update(state, cid)
    assert pc.should_stop(certainty)


def test_hesitation_markers_match_whole_words_only():
    pc = ProbeConsistency()
    assert not pc.is_confident("Wait, let me re-check")
    assert not pc.is_confident("no.")
    assert not pc.is_confident("Hmm")
    assert pc.is_confident("I do not know")  # "no" inside "not"/"know" is not a marker
    assert pc.is_confident("butter and holds")
    assert pc.is_confident(None)


def test_tracker_excludes_empty_and_unconfident_probes():
    t = ProbeTracker(ProbeConsistency(window=2))
    t.observe("1/2")
    assert t.observe("", None) == 0.5
    assert t.observe("0.5", "wait") == 0.5
    assert t.observe("0.50") == 1.0
    assert t.answer in ("1/2", "0.5", "0.50")


@settings(max_examples=200)
@given(st.lists(IDS, min_size=1, max_size=6), st.integers(1, 6))
def test_probe_consistency_batch_equals_incremental(rows, window):
    width = max(len(r) for r in rows) or 1
    padded = [r + [-1] * (width - len(r)) for r in rows]
    pc = ProbeConsistency(window=window)
    batch = pc.scores(torch.tensor(padded))
    for i, row in enumerate(padded):
        for t in range(width):
            assert batch[i, t].item() == pytest.approx(pc.score(row[: t + 1]))


def test_presets_and_bad_arguments():
    assert ProbeConsistency.preset("mild").window == 8
    for bad in (dict(window=0), dict(window=1.5), dict(threshold=1.5), dict(threshold=-0.1)):
        with pytest.raises(InvalidArgumentError):
            ProbeConsistency(**bad)
    with pytest.raises(InvalidArgumentError):
        ProbeConsistency.preset("extreme")


def test_semantic_entropy_hand_values():
    se = SemanticEntropy()
    got = se.from_ids(torch.tensor([[0, 0, 0, 0], [0, 1, 2, 3], [0, 0, 1, -1], [-1, -1, -1, -1], [0, -1, -1, -1]]))
    h = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))
    expected = [1.0, 0.0, (math.log(3) - h) / math.log(3), 0.0, 1.0]
    assert got.tolist() == pytest.approx(expected, abs=1e-6)


@settings(max_examples=200)
@given(st.lists(st.lists(st.integers(-1, 7), min_size=8, max_size=8), min_size=1, max_size=5))
def test_semantic_entropy_batch_equals_incremental(rows):
    se = SemanticEntropy()
    batch = se.from_ids(torch.tensor(rows))
    for i, row in enumerate(rows):
        assert batch[i].item() == pytest.approx(se.score(row), abs=1e-6)


@settings(max_examples=200)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=6))
def test_entropy_certainty_grows_when_the_largest_group_grows(counts):
    before = entropy_certainty(torch.tensor([counts], dtype=torch.float32)).item()
    grown = list(counts)
    grown[counts.index(max(counts))] += 1
    after = entropy_certainty(torch.tensor([grown], dtype=torch.float32)).item()
    assert after >= before - 1e-6


def test_entropy_rejects_bad_counts_and_ids():
    with pytest.raises(InvalidArgumentError):
        entropy_certainty(torch.tensor([[1.0, float("nan")]]))
    with pytest.raises(InvalidArgumentError):
        entropy_certainty(torch.tensor([[-1.0, 2.0]]))
    with pytest.raises(InvalidArgumentError):
        SemanticEntropy().from_ids(torch.tensor([[0, 5]]))


def test_semantic_entropy_of_answer_strings_is_a_typed_error_that_says_how():
    se = SemanticEntropy()
    with pytest.raises(InvalidTypeError, match=r"group_answers") as caught:
        se.score(["42", "42", "41"])
    assert not isinstance(caught.value, ValueError)  # was a bare ValueError from int("42")
    for bad in (1.5, None, True):
        with pytest.raises(InvalidTypeError, match="class ids must be integers"):
            se.score([0, bad])
    with pytest.raises(InvalidArgumentError, match=">= -1"):
        se.score([0, -2])
    assert se.score(group_answers(["42", "42.0", "41"])) == se.score([0, 0, 1]) == pytest.approx(1 - math.log(3 / 2 ** (2 / 3)) / math.log(3))


def test_tv_stability():
    tv = TVStability(k=3, epsilon=0.2)
    assert tv.score([0] * 6) == 1.0
    assert tv.score([0] * 5) == 0.0  # needs 2k answers
    assert tv.score([0, 1] * 3) == pytest.approx(1 - 1 / 3)
    assert not tv.should_stop(tv.score([0, 1] * 3)) and tv.should_stop(tv.score([1, 0, 0, 0, 0, 0, 0]))
    state = tv.start()
    values = [tv.update(state, c) for c in [1, 0, -1, 0, 0, 0, 0, 0]]
    assert values[-1] == tv.score([1, 0, -1, 0, 0, 0, 0, 0])
    with pytest.raises(InvalidArgumentError):
        TVStability(k=1)


def test_tv_probe_bound_is_monotone():
    assert tv_probe_bound(2, 0.5) <= tv_probe_bound(4, 0.5) <= tv_probe_bound(4, 0.25)
    k = tv_probe_bound(3, 0.3, 0.05)
    assert 2**3 * 4 * k * math.exp(-2 * (k - 1) * (0.3 / 3) ** 2) <= 0.05


def test_reward_certainty_aggregates_and_missing_values():
    r = [0.2, 0.8, float("nan"), 0.5]
    assert RewardCertainty("mean").score(r) == pytest.approx(0.5)
    assert RewardCertainty("max").score(r) == 0.8
    assert RewardCertainty("min").score(r) == 0.2
    assert RewardCertainty("last").score(r) == 0.5
    assert RewardCertainty("product").score(r) == pytest.approx(0.08)
    assert RewardCertainty("mean", low=-1, high=1).score([0.0]) == 0.5
    assert RewardCertainty().score([float("inf"), float("nan")]) == 0.0
    batch = torch.tensor([r, [float("nan")] * 4])
    for agg in ("mean", "max", "min", "last", "product"):
        est = RewardCertainty(agg)
        assert est.scores(batch).tolist() == pytest.approx([est.score(r), 0.0])
    with pytest.raises(InvalidArgumentError):
        RewardCertainty("median")
    with pytest.raises(InvalidArgumentError):
        RewardCertainty(low=1, high=1)


def test_combined_requires_every_signal():
    c = Combined({"entropy": 0.7, "reward": 0.4})
    assert c.evaluate({"entropy": 0.8, "reward": 0.5}).certain
    assert not c.evaluate({"entropy": 0.8, "reward": 0.3}).certain
    assert not c.evaluate({"entropy": float("nan"), "reward": 0.9}).certain
    with pytest.raises(InvalidArgumentError):
        c.evaluate({"entropy": 0.9})
    with pytest.raises(InvalidArgumentError):
        Combined({"entropy": 1.5})


def test_baseline_signals():
    assert length_certainty(512, 1024) == 0.5 and length_certainty(5000, 1024) == 1.0
    assert logprob_certainty([math.log(0.5)] * 3) == pytest.approx(0.5)
    assert logprob_certainty([]) == 0.0 and logprob_certainty([float("nan")]) == 0.0
    with pytest.raises(InvalidArgumentError):
        length_certainty(-1, 10)
