"""Correlation statistics and the SC signal-vs-compute analysis (SPEC 1.6)."""

import itertools
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.core import InvalidArgumentError
from reasonserve.replay import sc
from reasonserve.replay._stats import kendall_tau_b, pearson
from reasonserve.replay.sc_signals import majority_settled_at, signal_correlations


def _tau_b_by_definition(x, y):
    conc = disc = tx = ty = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        if dx == 0 and dy == 0:
            tx, ty = tx + 1, ty + 1
        elif dx == 0:
            tx += 1
        elif dy == 0:
            ty += 1
        elif dx * dy > 0:
            conc += 1
        else:
            disc += 1
    pairs = len(x) * (len(x) - 1) / 2
    denom = math.sqrt((pairs - tx) * (pairs - ty))
    return (conc - disc) / denom if denom else None


def test_hand_computed_coefficients():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # x = (1,2,3,4), y = (1,3,2,4): cov = 4, var_x = var_y = 5 -> r = 0.8; 5 of 6 pairs concordant.
    assert pearson([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    # Ties: x = (1,1,2), y = (1,2,3): 2 concordant, 1 tie in x -> 2 / sqrt(2 * 3).
    assert kendall_tau_b([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(6))


def test_undefined_coefficients_are_none_and_bad_input_is_typed():
    assert pearson([1.0], [2.0]) is None and kendall_tau_b([], []) is None
    assert pearson([1, 1, 1], [1, 2, 3]) is None and kendall_tau_b([1, 1, 1], [1, 2, 3]) is None
    with pytest.raises(InvalidArgumentError, match="length"):
        pearson([1, 2], [1])
    with pytest.raises(InvalidArgumentError, match="finite"):
        kendall_tau_b([1, float("nan")], [1, 2])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=2, max_size=25))
def test_kendall_matches_the_pairwise_definition(points):
    x, y = [float(a) for a, _ in points], [float(b) for _, b in points]
    expected = _tau_b_by_definition(x, y)
    got = kendall_tau_b(x, y)
    assert (got is None) == (expected is None)
    if got is not None:
        assert got == pytest.approx(expected)
        assert -1.0 - 1e-12 <= got <= 1.0 + 1e-12


def test_majority_settled_at():
    correct = [True, False]
    assert majority_settled_at([0, 0, 0], correct) == 1
    assert majority_settled_at([1, 0, 0], correct) == 3  # 1 leads, then a tie goes to 1 (seen first)
    assert majority_settled_at([0, 1, 1, 0, 0], correct) == 4  # correct at 1-2, lost at 3, back at 4 (tie)
    assert majority_settled_at([-1, -1, 0], correct) == 3  # empty answers do not vote
    assert majority_settled_at([1, 1, 0], correct) is None


def _question(qid, answers, gold, rewards=None, lengths=None):
    rewards = rewards or [math.nan] * len(answers)
    return sc.make_question(qid, answers, rewards, gold, lengths)


def test_entropy_tracks_steps_and_unsolvable_questions_are_left_out():
    qs = [
        _question("easy", ["1"] * 6, "1", lengths=[100.0] * 6),
        _question("mid", ["2", "9", "2", "2", "2", "2"], "2", lengths=[300.0] * 6),  # ~1.3 steps
        _question("hard", ["3", "8", "9", "3", "7", "3"], "3", lengths=[200.0] * 6),  # ~2.5 steps
        _question("unsolvable", ["5", "5", "4", "4"], "4", lengths=[900.0] * 4),
    ]
    out = {c.signal: c for c in signal_correlations(qs, knob=3, orders=200, seed=1)}
    assert set(out) == {"semantic entropy", "mean length"}  # no rewards recorded
    assert out["semantic entropy"].questions == 3
    assert out["semantic entropy"].pearson > 0.8 and out["semantic entropy"].kendall == pytest.approx(1.0)
    # Lengths 100/300/200 against steps easy < mid < hard: one discordant pair of three.
    assert out["mean length"].kendall == pytest.approx(1 / 3)


def test_signal_correlations_reject_bad_settings():
    with pytest.raises(InvalidArgumentError, match="knob"):
        signal_correlations([], knob=0)
    with pytest.raises(InvalidArgumentError, match="orders"):
        signal_correlations([], knob=2, orders=0)
    with pytest.raises(InvalidArgumentError, match="lengths"):
        sc.make_question("q", ["1", "2"], [1.0, 1.0], "1", [10.0])


def test_replay_sc_reports_correlations_with_lengths_from_tokens(tmp_path):
    path = tmp_path / "s.jsonl"
    with open(path, "w") as fh:
        for q in range(12):
            wrong = q % 4  # harder questions: more wrong samples, and longer ones
            preds = [str(q)] * (8 - wrong) + [str(q + 100 + i) for i in range(wrong)]
            tokens = [1000 + 500 * wrong] * 8
            fh.write(json.dumps({"idx": q, "gt": str(q), "pred": preds, "tokens": tokens}) + "\n")
    report = sc.replay_sc(path)
    corr = report["signal_correlations"]
    assert corr["knob"] == 4
    by_name = {c["signal"]: c for c in corr["signals"]}
    assert by_name["mean length"]["questions"] == 12 and by_name["mean length"]["pearson"] > 0
    assert "mean reward" not in by_name
