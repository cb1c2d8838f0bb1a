"""The learned stopping rule's definition, checked by hand: ``score = sigmoid(bias + sum_j
w_j (x_j - mean_j) / scale_j)``, an exit once the score *reaches* the threshold, and a fit
that solves the stated objective (weighted logistic loss plus a ridge of ``l2 / 2 |beta|^2``
on the standardized features and the bias)."""

import math

import numpy as np

from reasonserve.certainindex import ProbeObservation
from reasonserve.certainindex.stopping import FEATURE_NAMES, LogisticStopRule, fit_logistic

D = len(FEATURE_NAMES)


def _rule(weights, means, scales, bias, threshold=0.5, budget_exit=False):
    return LogisticStopRule(
        tuple(weights), tuple(means), tuple(scales), bias, threshold, budget_exit=budget_exit
    )


def test_the_score_standardizes_each_feature_by_its_mean_and_scale():
    w, m, s = [0.0] * D, [0.0] * D, [1.0] * D
    w[3], m[3], s[3] = 2.0, 1.0, 4.0
    x = [0.0] * D
    x[3] = 9.0  # (9 - 1) / 4 = 2: z = -1 + 2 * 2 = 3
    assert _rule(w, m, s, bias=-1.0).score(x) == 1.0 / (1.0 + math.exp(-3.0))


def test_the_rule_exits_once_the_score_reaches_the_threshold():
    """All weights 0 and bias 0: every answered probe scores exactly 1/2."""
    at, above = (
        _rule([0.0] * D, [0.0] * D, [1.0] * D, 0.0, 0.5),
        _rule([0.0] * D, [0.0] * D, [1.0] * D, 0.0, 0.6),
    )
    probe = ProbeObservation(64, "42", "so the answer is 42")
    for rule, stop in ((at, True), (above, False)):
        decision = rule.start().observe(probe)
        assert decision.certainty == 0.5 and decision.stop is stop and decision.answer == "42"
    assert not at.start().observe(ProbeObservation(64, None, "hmm")).stop  # no answer yet: no exit


def test_the_fit_solves_the_ridge_logistic_objective():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(200, D))
    x[:, 7] = 3.0  # a constant feature
    y = (rng.random(200) < 1 / (1 + np.exp(-(x[:, 0] - 0.5 * x[:, 1])))).astype(float)
    w = rng.uniform(0.5, 2.0, size=200)
    rule = fit_logistic(x, y, w, l2=1e-2, iterations=40)
    assert rule.weights[7] == 0.0  # a signal never seen varying gets no weight
    z = np.hstack([(x - np.array(rule.means)) / np.array(rule.scales), np.ones((200, 1))])
    beta = np.array([*rule.weights, rule.bias])
    p = 1 / (1 + np.exp(-(z @ beta)))
    gradient = z.T @ (w / w.sum() * (p - y)) + 1e-2 * beta  # zero at the penalized optimum
    assert np.abs(gradient).max() < 1e-9
    assert abs(beta[0]) > 0.1 and beta[0] > 0 > beta[1]  # the signs the labels were drawn with
