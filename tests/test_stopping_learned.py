"""The learned rule, its risk-controlled threshold, and online == offline replay."""

import math
import pathlib
import random

import numpy as np
import pytest

from reasonserve.certainindex.answers.equivalence import AnswerClasses
from reasonserve.certainindex.conformal import (
    MAX_N,
    ThresholdRisk,
    choose_threshold,
    clopper_pearson_lower,
    clopper_pearson_upper,
)
from reasonserve.certainindex.stopping import AgreeSpanRule, ProbeObservation, default_rule
from reasonserve.certainindex.stopping.features import FEATURE_GROUPS, FEATURE_NAMES
from reasonserve.certainindex.stopping.learned import LogisticStopRule, fit_logistic
from reasonserve.core import InvalidArgumentError
from reasonserve.replay import stop_training
from reasonserve.replay.probe_rules import online_first_stop
from reasonserve.replay.probe_runs import Trajectory, _runs, load_run

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "probes"


def test_clopper_pearson_matches_the_beta_quantiles():
    # scipy.stats.beta.ppf(0.95, 4, 97) and beta.ppf(0.05, 3, 98)
    assert clopper_pearson_upper(3, 100, 0.05) == pytest.approx(0.0757107937, abs=1e-9)
    assert clopper_pearson_lower(3, 100, 0.05) == pytest.approx(0.0082258291, abs=1e-9)
    assert clopper_pearson_upper(0, 100, 0.05) == pytest.approx(1 - 0.05 ** (1 / 100), abs=1e-9)
    assert clopper_pearson_lower(0, 100, 0.05) == 0.0 and clopper_pearson_upper(100, 100, 0.05) == 1.0
    with pytest.raises(InvalidArgumentError):
        clopper_pearson_upper(5, 4, 0.1)
    with pytest.raises(InvalidArgumentError):
        clopper_pearson_upper(1, 4, 1.5)


def test_clopper_pearson_is_exact_up_to_max_n_and_a_typed_error_beyond():
    # scipy.stats.beta.ppf(0.95, 5001, 5000): the bound at k = n / 2 of the largest n allowed
    assert clopper_pearson_upper(MAX_N // 2, MAX_N, 0.05) == pytest.approx(0.5008229260, abs=1e-8)
    assert clopper_pearson_lower(MAX_N // 2, MAX_N, 0.05) == pytest.approx(1 - 0.5008229260, abs=1e-8)
    for bound in (clopper_pearson_upper, clopper_pearson_lower):
        with pytest.raises(InvalidArgumentError, match="limit"):
            bound(3, MAX_N + 1, 0.1)


def _synthetic_risks(rng, n, true_loss):
    """Per threshold (conservative first), harms of n programs drawn with rate true_loss[t] (nested)."""
    u = [rng.random() for _ in range(n)]
    return [ThresholdRisk(float(-t), sum(x < loss for x in u), 0, n) for t, loss in enumerate(true_loss)]


def test_chosen_threshold_keeps_the_loss_within_tolerance_at_the_stated_rate():
    true_loss = [0.0, 0.002, 0.004, 0.008, 0.012, 0.02, 0.05, 0.1]
    tolerance, delta, trials = 0.01, 0.1, 300
    rng = random.Random(0)
    over = savings = 0
    for _ in range(trials):
        chosen = choose_threshold(_synthetic_risks(rng, 2000, true_loss), tolerance, delta)
        index = 0 if chosen is None else int(-chosen.threshold)
        over += true_loss[index] > tolerance
        savings += index >= 2
    assert over / trials <= delta  # the guarantee
    assert savings / trials > 0.5  # and the rule is not vacuous: it usually goes past the first steps
    # Choosing by the empirical loss alone (no bound) overshoots far more often.
    rng = random.Random(0)
    naive_over = 0
    for _ in range(trials):
        risks = _synthetic_risks(rng, 2000, true_loss)
        ok = [r for r in risks if r.harms / r.n <= tolerance]
        naive_over += true_loss[int(-ok[-1].threshold)] > tolerance
    assert naive_over > over


def test_gains_offset_harms_and_nothing_passes_when_the_first_fails():
    gained = ThresholdRisk(0.5, harms=10, gains=60, n=1000)
    assert gained.bound(0.1) < 0 and choose_threshold([gained], 0.0) == gained
    assert choose_threshold([ThresholdRisk(0.9, 50, 0, 1000), ThresholdRisk(0.8, 0, 0, 1000)], 0.01) is None
    with pytest.raises(InvalidArgumentError):
        choose_threshold([gained], 1.5)


def test_fit_logistic_learns_the_direction_and_round_trips_json():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, len(FEATURE_NAMES)))
    unseen = [FEATURE_NAMES.index(n) for g in ("reasoning_text", "logprobs", "budget") for n in FEATURE_GROUPS[g]]
    x[:, unseen] = 0.0  # signals never seen: no weight
    y = (x[:, 1] + 0.1 * rng.normal(size=400) > 0).astype(float)
    rule = fit_logistic(x, y, np.ones(400))
    assert rule.weights[1] > 1 and all(rule.weights[j] == 0 for j in unseen)
    assert rule.requires == frozenset({"answers", "probe_text", "budget"})  # the budget exit reads the budget
    no_exit = LogisticStopRule(rule.weights, rule.means, rule.scales, rule.bias, 0.7, budget_exit=False)
    assert no_exit.requires == frozenset({"answers", "probe_text"})
    again = LogisticStopRule.from_json(rule.with_threshold(0.7).to_json())
    assert again.threshold == 0.7 and again.weights == rule.weights and again.budget_exit
    assert not LogisticStopRule.from_json(no_exit.to_json()).with_threshold(0.5).budget_exit
    with pytest.raises(InvalidArgumentError):
        LogisticStopRule(rule.weights, rule.means, rule.scales, rule.bias, 0.7, budget_exit="yes")
    with pytest.raises(InvalidArgumentError):
        LogisticStopRule.from_json({"features": ["x"], "weights": []})
    with pytest.raises(InvalidArgumentError):
        rule.with_threshold(1.5)
    with pytest.raises(InvalidArgumentError):
        fit_logistic(x[:, :3], y, np.ones(400))
    with pytest.raises(InvalidArgumentError):
        fit_logistic(np.full_like(x, np.nan), y, np.ones(400))


def _trajectory(rng, p):
    target, wrong = str(p), str(p + 1000)
    n = rng.randint(0, 30)
    settle = rng.randint(0, n)
    answers = [rng.choice([wrong, None, str(p + 2000)]) if i < settle else target for i in range(n)]
    texts = [rng.choice(["", f"{a}}} \\]\n\nWait", f"{a}}} \\]\n\n**"]) for a in answers]
    classes = AnswerClasses()
    raw = [classes.add(a) for a in answers]
    final = classes.add(target if rng.random() < 0.8 else wrong)
    correct = tuple(classes.representative(c) == target for c in range(len(classes)))
    run_at, current_at = _runs(raw)
    budget = rng.choice([0, 64 * n + 50, 64 * n - 10, 64 * max(1, n // 2)])  # 0: not recorded
    return Trajectory(("math500", str(p), "0"), f"m{p % 2}__math500__s", target, 64 * n + 50, final, correct[final],
                      True, tuple(64 * (i + 1) for i in range(n)), tuple(raw), tuple(raw), correct, run_at,
                      current_at, answers=tuple(answers), texts=tuple(texts), budget=budget)  # fmt: skip


def _offline_stop(rule, stream):
    scores = stop_training._scores(rule, stream)
    j = int(np.searchsorted(scores, rule.threshold, side="left"))
    return None if j >= len(scores) else (j, int(stream.current[j]))


def test_online_decisions_equal_the_offline_sweep_on_synthetic_streams():
    rng = random.Random(1)
    trajs = [_trajectory(rng, p) for p in range(60)]
    items = stop_training.streams(trajs)
    rule = stop_training.fit_rule(items, tolerance=0.05)
    assert sum(bool(s.budget_end.any()) for s in items) > 10  # the budget exit is exercised
    for threshold in (rule.threshold, 0.5, 0.9, 0.99, 1.0):
        for budget_exit in (True, False):
            r = LogisticStopRule(rule.weights, rule.means, rule.scales, rule.bias, threshold, budget_exit=budget_exit)
            assert [online_first_stop(r, t) for t in trajs] == [_offline_stop(r, s) for s in items]
    # The k-agree score of the offline sweep is the online last-k-agree rule.
    for k in (1, 3, 6):
        offline = []
        for s in items:
            j = int(np.searchsorted(stop_training.agree_runs(s), k, side="left"))
            offline.append(None if j >= len(s.current) else (j, int(s.current[j])))
        online = [online_first_stop(AgreeSpanRule(k_probes=k, min_tokens=0, hesitation=False), t) for t in trajs]
        assert online == offline


def test_cross_validation_by_model_scores_held_out_models():
    rng = random.Random(2)
    items = stop_training.streams([_trajectory(rng, p) for p in range(80)])
    cv = stop_training.cross_validate_streams(items, lambda s: s.group[0], tolerances=[0.05])[0.05]
    assert cv.folds == ["m0", "m1"] and cv.pooled_learned.n == 80 and cv.pooled_kagree.n == 80
    assert all(1 <= k <= 200 for k in cv.kagree_chosen)
    with pytest.raises(InvalidArgumentError, match="2 groups"):
        stop_training.cross_validate_streams(items, lambda s: "one")


@pytest.mark.skipif(not DATA.is_dir(), reason="recorded probe runs not present (../shared/data/probes)")
def test_shipped_rule_online_equals_offline_on_recorded_trajectories():
    trajs = load_run(DATA / "qwen3-8b__math500__seed_42__interval128")[:40]
    trajs += load_run(DATA / "r1-distill-qwen-7b__amc23__seed_42")[:15]
    rule = default_rule()
    assert isinstance(rule, LogisticStopRule) and 0.5 < rule.threshold <= 1
    items = stop_training.streams(trajs)
    online = [online_first_stop(rule, t) for t in trajs]
    assert online == [_offline_stop(rule, s) for s in items]
    assert any(stop is not None for stop in online)
    assert all(math.isfinite(rule.score(x)) for s in items for x in s.features)


def one_feature_rule(feature: str, weight: float = 10.0, bias: float = -5.0) -> LogisticStopRule:
    """A rule whose score reads one feature (unit scale, threshold 0.5, no budget exit)."""
    weights = [0.0] * len(FEATURE_NAMES)
    weights[FEATURE_NAMES.index(feature)] = weight
    ones = (1.0,) * len(FEATURE_NAMES)
    return LogisticStopRule(tuple(weights), (0.0,) * len(FEATURE_NAMES), ones, bias=bias, threshold=0.5,
                            budget_exit=False)  # fmt: skip


def test_a_rule_fitted_on_logprobs_reads_them_deer_style():
    rule = one_feature_rule("answer_confidence")
    assert rule.requires == frozenset({"answers", "logprobs"})

    unsure = rule.start().observe(ProbeObservation(64, "3", answer_logprobs=(math.log(0.2), math.log(0.2))))
    sure = rule.start().observe(ProbeObservation(64, "3", answer_logprobs=(math.log(0.9), math.log(0.9))))
    missing = rule.start().observe(ProbeObservation(64, "3"))
    assert not unsure.stop and sure.stop and sure.answer == "3" and sure.certainty == pytest.approx(1 / (1 + math.exp(-4)))
    assert not missing.stop  # no log-probabilities: the confidence feature reads 0
    assert not rule.start().observe(ProbeObservation(64, None, answer_logprobs=(0.0,))).stop  # no answer, no exit


def test_the_budget_exit_returns_the_latest_answer_at_the_last_probe_before_the_budget():
    never = LogisticStopRule((0.0,) * len(FEATURE_NAMES), (0.0,) * len(FEATURE_NAMES), (1.0,) * len(FEATURE_NAMES),
                             bias=-30.0, threshold=0.99)  # fmt: skip
    state = never.start()
    decisions = [state.observe(ProbeObservation(p, a, budget_tokens=256)) for p, a in ((64, "1"), (128, "2"), (192, "3"))]
    assert [d.stop for d in decisions] == [False, False, True] and decisions[-1].answer == "3"
    silent = never.start()  # no answer yet at the budget's end: nothing to return, no exit
    assert not silent.observe(ProbeObservation(192, None, budget_tokens=256)).stop
    unknown = never.start()  # no budget given: the score alone decides
    assert not any(unknown.observe(ProbeObservation(p, "3")).stop for p in range(64, 100_000, 64))
    off = never.with_threshold(0.99)
    off = LogisticStopRule(off.weights, off.means, off.scales, off.bias, 0.99, budget_exit=False)
    assert not off.start().observe(ProbeObservation(192, "3", budget_tokens=256)).stop


def test_a_warm_up_moves_the_threshold_to_the_same_quantile_of_the_hosts_scores():
    rng = random.Random(3)
    trajs = [_trajectory(rng, p) for p in range(60)]
    items = stop_training.streams(trajs)
    fitted = stop_training.fit_rule(items, tolerance=0.05)
    assert fitted.threshold_quantile == stop_training.threshold_quantile(fitted, items, fitted.threshold)
    middle = float(np.median(fitted.answered_scores(t.observations() for t in trajs)))
    rule = fitted.with_threshold(middle, quantile=stop_training.threshold_quantile(fitted, items, middle))
    level = rule.threshold_quantile
    assert level is not None and 0.3 < level < 0.7
    assert LogisticStopRule.from_json(rule.to_json()).threshold_quantile == level
    programs = [t.observations() for t in trajs]
    scores = np.array(rule.answered_scores(programs))
    assert len(scores) == sum(int((s.current >= 0).sum()) for s in items)
    assert np.mean(scores < rule.threshold) == level
    # On the development programs themselves the warm-up threshold makes the same decisions.
    same = rule.for_warmup(programs)
    assert [online_first_stop(same, t) for t in trajs] == [online_first_stop(rule, t) for t in trajs]
    # A host whose scores run higher (every logit shifted up) gets a higher threshold at the same quantile.
    shifted = LogisticStopRule(rule.weights, rule.means, rule.scales, rule.bias + 2.0, rule.threshold,
                               threshold_quantile=level)  # fmt: skip
    moved = shifted.for_warmup(programs)
    host = np.array(shifted.answered_scores(programs))
    assert moved.threshold > rule.threshold and abs(np.mean(host < moved.threshold) - level) <= 1 / len(host)
    with pytest.raises(InvalidArgumentError):
        rule.with_threshold(rule.threshold).for_warmup(programs)  # no quantile recorded
    with pytest.raises(InvalidArgumentError):
        rule.for_warmup([[ProbeObservation(64, None)]])  # nothing answered
    with pytest.raises(InvalidArgumentError):
        rule.with_threshold(0.5, quantile=1.5)
