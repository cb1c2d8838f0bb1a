"""Early-exit exploration (issue #16): the numbers of docs/benchmarks.md, "Early exit" subsection.

Usage: ``python benchmarks/stop_exploration.py [--data ../shared/data] [--cache PATH] [--only NAME]``.
Experiments (``--only``, repeatable; all by default): ``ceiling`` (in-sample frontiers), ``oracles``,
``hopeless`` (the "going nowhere" measurements and the combined exit rule), ``scale_free`` (thresholds
carried as quantiles, per-model standardised features), ``escot`` (ES-CoT-style features), ``trees``
(small boosted trees), ``probe_text`` (the probe-text signals in and out), ``reasoning_text``
(reasoning-text signals on text-probed traces of three models), ``figure``
(``docs/img/early_exit_curves.png`` and the numbers read off it). Everything
goes through the library's code path (``stop_training.streams``, ``sweep``, the risk test,
``fit_logistic``); held-out numbers leave one model out. The probe streams take about a minute to build;
``--cache`` keeps them in a pickle (rebuilt when missing).
"""

from __future__ import annotations

import argparse
import itertools
import pathlib
import pickle
import time

import numpy as np

from reasonserve.certainindex.stopping import default_rule
from reasonserve.certainindex.stopping.features import FEATURE_NAMES
from reasonserve.certainindex.stopping.learned import fit_logistic
from reasonserve.replay.probe_runs import load_run
from reasonserve.replay.stop_training import (
    DELTA,
    TOLERANCES,
    _chosen,
    _grid,
    _scores,
    _training_rows,
    agree_runs,
    budget_exit,
    streams,
    sweep,
    threshold_quantile,
)

HOPELESS_QUANTILES = (None, 0.999, 0.995, 0.99, 0.98, 0.97, 0.95)


# ---------------------------------------------------------------- data


def load_streams(data: pathlib.Path, cache: pathlib.Path | None) -> list:
    if cache is not None and cache.exists():
        with open(cache, "rb") as f:
            return pickle.load(f)
    t0 = time.time()
    folders = sorted(p for p in (data / "probes").iterdir() if p.is_dir())
    items = streams([tr for folder in folders for tr in load_run(str(folder))])
    print(f"built {len(items)} streams in {time.time() - t0:.0f} s", flush=True)
    if cache is not None:
        with open(cache, "wb") as f:
            pickle.dump(items, f)
    return items


def model_of(s) -> str:
    return s.group[0]


def split(items: list, model: str) -> tuple[list, list]:
    return [s for s in items if model_of(s) != model], [s for s in items if model_of(s) == model]


def models(items: list) -> list[str]:
    return sorted({model_of(s) for s in items})


# ---------------------------------------------------------------- scores


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-np.clip(z, -700, 700)))


def raw_scores(rule, s) -> np.ndarray:
    """The logistic score per probe (no answer gating, no running maximum), vectorised."""
    z = rule.bias + ((s.features - np.array(rule.means)) / np.array(rule.scales)) @ np.array(rule.weights)
    return sigmoid(z)


def logit_scores(rule, s) -> np.ndarray:
    """Vectorised ``stop_training._scores`` for a budget-exit rule."""
    if not len(s.features):
        return np.zeros(0)
    return budget_exit(np.where(s.current >= 0, raw_scores(rule, s), -1.0), s)


def hopeless_rows(items: list):
    """Training rows labelled "the full run's final answer is wrong"."""
    x, _, w = _training_rows(items)
    y = np.concatenate([np.full(len(s.features), float(not s.trajectory.final_correct))
                        for s in items if len(s.features)])  # fmt: skip
    return x, y, w


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney, ties counted half)."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    i = 0
    while i < len(scores):
        j = i
        while j + 1 < len(scores) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    pos = labels.astype(bool)
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


# ---------------------------------------------------------------- evaluation


def fmt(o) -> str:
    return f"{100 * o.savings:.1f}% at {-100 * o.accuracy_loss:+.2f}"


def frontier(items: list, scores: list, n: int = 300) -> list[str]:
    """In-sample best empirical savings within each tolerance (no confidence bound)."""
    fin = np.concatenate([sc[np.isfinite(sc)] for sc in scores if len(sc)])
    grid = sorted(set(np.quantile(fin, np.linspace(0, 1, n)).tolist()) | {np.inf}, reverse=True)
    res = sweep(items, scores, grid)
    out = []
    for tol in TOLERANCES:
        within = [o for _, o in res if o.accuracy_loss <= tol + 1e-12]
        out.append(fmt(max(within, key=lambda o: o.savings)) if within else "none within")
    return out


def report(name: str, outs: dict) -> None:
    """Print pooled and per-held-out-model results, ``outs[tol]`` a list over held-out models."""
    print(name)
    for t in TOLERANCES:
        pooled = sum(outs[t][1:], outs[t][0])
        per_model = "; ".join(fmt(o) for o in outs[t])
        print(f"  tol {100 * t:g} pt: {fmt(pooled)}  (per held-out model: {per_model})")


def lomo(items: list, fit, score, threshold=None) -> dict:
    """Leave one model out: ``fit(train)``, ``score(fitted, s)``; the risk test picks the threshold,
    ``threshold(fitted, train, test, train_scores, test_scores, th)`` may move it for the held-out model."""
    outs = {t: [] for t in TOLERANCES}
    for m in models(items):
        train, test = split(items, m)
        fitted = fit(train)
        trs, tes = [score(fitted, s) for s in train], [score(fitted, s) for s in test]
        risks = [r for r, _ in sweep(train, trs, _grid(trs))]
        for t in TOLERANCES:
            th = _chosen(risks, t, DELTA)
            if threshold is not None:
                th = threshold(fitted, train, test, trs, tes, th)
            outs[t].append(sweep(test, tes, [th])[0][1])
    return outs


def fit_default(train: list):
    return fit_logistic(*_training_rows(train))


# ---------------------------------------------------------------- experiments


def ceiling(items: list) -> None:
    """In-sample frontiers: fitted and scored on all runs, per model, and k-agree with the budget exit."""
    rule = fit_default(items)
    print("best savings within 0 / 0.5 / 1 / 2 pt, empirical loss, in-sample")
    print("  logistic + budget exit, fitted on all:", frontier(items, [logit_scores(rule, s) for s in items]))
    for m in models(items):
        _, its = split(items, m)
        own = fit_default(its)
        print(f"  {m}, fitted on itself:", frontier(its, [logit_scores(own, s) for s in its]))
    print("  k-agree + budget exit:", frontier(items, [budget_exit(agree_runs(s), s) for s in items]))


def oracle(items: list, hopeless: bool) -> tuple[float, float]:
    """Exit at the first probe equal to the final answer; with ``hopeless``, cut every eventually-wrong
    run at its first answered probe. Returns (savings, accuracy change)."""
    total = sum(s.trajectory.tokens_used for s in items)
    cost = correct = 0
    for s in items:
        tr = s.trajectory
        pos = np.array(tr.positions)
        if hopeless and not tr.final_correct and len(pos) and (s.current >= 0).any():
            i = int(np.argmax(s.current >= 0))
            cost, correct = cost + pos[i], correct + s.right[i]
            continue
        equal = np.where(s.current == tr.final_class)[0] if tr.final_class >= 0 else []
        if len(equal):
            cost, correct = cost + pos[equal[0]], correct + tr.final_correct
        else:
            cost, correct = cost + tr.tokens_used, correct + tr.final_correct
    base = sum(s.trajectory.final_correct for s in items)
    return 1 - cost / total, (correct - base) / len(items)


def oracles(items: list) -> None:
    for name, hopeless in (("first probe equal to the final", False), ("+ wrong runs cut at once", True)):
        sv, dacc = oracle(items, hopeless)
        print(f"oracle, {name}: savings {100 * sv:.1f}%, accuracy {100 * dacc:+.2f} pt")


def wrong_run_stats(items: list) -> None:
    for m in [*models(items), None]:
        its = items if m is None else split(items, m)[1]
        tok = np.array([s.trajectory.tokens_used for s in its])
        fc = np.array([s.trajectory.final_correct for s in its])
        print(f"{m or 'all'}: {len(its)} runs, wrong {100 * (~fc).mean():.1f}%, wrong runs' share of tokens "
              f"{100 * tok[~fc].sum() / tok.sum():.1f}%, mean tokens right {tok[fc].mean():.0f} "
              f"wrong {tok[~fc].mean():.0f}")  # fmt: skip


def at_share(s, q: float) -> int:
    return min(len(s.right) - 1, int(q * len(s.right)))


def current_answer_and_auc(items: list) -> None:
    """Is the current answer right at 25/50/75% of the length; held-out AUC of a "will be wrong" score."""
    for m in models(items):
        train, its = split(items, m)
        h = fit_logistic(*hopeless_rows(train))
        for q in (0.25, 0.5, 0.75):
            wrong = [s.right[at_share(s, q)] for s in its if not s.trajectory.final_correct and len(s.right)]
            right = [s.right[at_share(s, q)] for s in its if s.trajectory.final_correct and len(s.right)]
            with_probes = [s for s in its if len(s.features)]
            hs = np.array([raw_scores(h, s)[at_share(s, q)] for s in with_probes])
            ys = np.array([not s.trajectory.final_correct for s in with_probes])
            print(
                f"{m} at {q:.0%} of length: current answer right on wrong runs {100 * np.mean(wrong):.1f}%,"
                f" on right runs {100 * np.mean(right):.1f}%; held-out AUC(final wrong) {auc(ys, hs):.3f}"
            )


def shipped_on_wrong_runs(items: list) -> None:
    rule = default_rule()
    wrong = [s for s in items if not s.trajectory.final_correct]
    exited = saved = total = 0
    for s in wrong:
        sc = logit_scores(rule, s)
        j = np.searchsorted(sc, rule.threshold) if len(sc) else 0
        total += s.trajectory.tokens_used
        if len(sc) and j < len(sc):
            exited, saved = exited + 1, saved + s.trajectory.tokens_used - s.trajectory.positions[j]
    print(
        f"default_rule() on the {len(wrong)} wrong runs: exits {exited}, saves {100 * saved / total:.1f}% "
        "of their tokens"
    )


def combine(settle: np.ndarray, hopeless: np.ndarray, t2: float) -> np.ndarray:
    """Exit when the settle score passes t1 (swept) or, from then on, once the hopeless score passed t2."""
    hit = np.where(hopeless >= t2)[0] if len(settle) else []
    if len(hit):
        settle = settle.copy()
        settle[hit[0] :] = np.inf
    return settle


def hopeless_scores(rule, items: list) -> list:
    return [raw_scores(rule, s) if len(s.features) else np.zeros(0) for s in items]


def t2_grid(h_scores: list, qs=HOPELESS_QUANTILES) -> list[float]:
    pooled = np.concatenate([x for x in h_scores if len(x)])
    return [np.inf if q is None else float(np.quantile(pooled, q)) for q in qs]


def combined_lomo(items: list) -> None:
    """Settle or hopeless exit, held out by model; t1 by the risk test at delta / 7 per t2 (Bonferroni)."""
    outs = {t: [] for t in TOLERANCES}
    for m in models(items):
        train, test = split(items, m)
        r, h = fit_default(train), fit_logistic(*hopeless_rows(train))
        tr1, te1 = [logit_scores(r, s) for s in train], [logit_scores(r, s) for s in test]
        trh, teh = hopeless_scores(h, train), hopeless_scores(h, test)
        grid, cands = _grid(tr1), {t: [] for t in TOLERANCES}
        for t2 in t2_grid(trh):
            res = sweep(train, [combine(a, b, t2) for a, b in zip(tr1, trh, strict=True)], grid)
            risks = [x for x, _ in res]
            for t in TOLERANCES:
                th = _chosen(risks, t, DELTA / len(HOPELESS_QUANTILES))
                o = next(o for x, o in res if x.threshold == th)
                cands[t].append((o.savings, th, t2))
        for t in TOLERANCES:
            _, th, t2 = max(cands[t])
            combined = [combine(a, b, t2) for a, b in zip(te1, teh, strict=True)]
            outs[t].append(sweep(test, combined, [th])[0][1])
    report("settle or hopeless exit, held out by model (Bonferroni over 7 t2)", outs)


def combined_in_sample(items: list) -> None:
    r, h = fit_default(items), fit_logistic(*hopeless_rows(items))
    s1, hr = [logit_scores(r, s) for s in items], hopeless_scores(h, items)
    qs = (*HOPELESS_QUANTILES, 0.9)
    print("settle or hopeless exit, in-sample frontier per hopeless quantile (0 / 0.5 / 1 / 2 pt)")
    for q, t2 in zip(qs, t2_grid(hr, qs), strict=True):
        print(f"  q={q}:", frontier(items, [combine(a, b, t2) for a, b in zip(s1, hr, strict=True)], n=200))


def hopeless(items: list) -> None:
    wrong_run_stats(items)
    current_answer_and_auc(items)
    shipped_on_wrong_runs(items)
    combined_lomo(items)
    combined_in_sample(items)


def warmup_threshold(rule, train, test, _trs, _tes, th):
    """The threshold moved to its training quantile among the held-out model's answered probes."""
    th = min(1.0, th)
    moved = rule.with_threshold(th, quantile=threshold_quantile(rule, train, th))
    return moved.for_warmup([s.trajectory.observations() for s in test]).threshold


def running_max_quantile(_rule, _train, _test, trs, tes, th):
    """The same with the quantile of the running-maximum scores (answered probes, finite)."""
    ftr = np.concatenate([s[np.isfinite(s) & (s >= 0)] for s in trs if len(s)])
    fte = np.concatenate([s[np.isfinite(s) & (s >= 0)] for s in tes if len(s)])
    return float(np.quantile(fte, (ftr < th).mean())) if th <= 1 else th


def fit_newton(x, y, w, l2=1e-3, iterations=30):
    """Weighted L2 logistic regression on standardised columns (Newton steps) for extra feature columns."""
    mu, sd = x.mean(0), x.std(0)
    sd[sd < 1e-9] = 1
    z = np.hstack([(x - mu) / sd, np.ones((len(x), 1))])
    wn, b = w / w.sum(), np.zeros(z.shape[1])
    for _ in range(iterations):
        p = sigmoid(z @ b)
        grad = z.T @ (wn * (p - y)) + l2 * b
        hess = (z * (wn * p * (1 - p))[:, None]).T @ z + l2 * np.eye(len(b))
        b = b - np.linalg.solve(hess, grad)
    return mu, sd, b


def transformed_lomo(items: list, transform) -> dict:
    """Leave one model out with the feature rows ``transform(s)`` instead of ``s.features``."""
    x_of = {id(s): transform(s) for s in items}

    def fit(train):
        _, y, w = _training_rows(train)
        return fit_newton(np.vstack([x_of[id(s)] for s in train if len(s.features)]), y, w)

    def score(par, s):
        mu, sd, b = par
        if not len(s.features):
            return np.zeros(0)
        z = ((x_of[id(s)] - mu) / sd) @ b[:-1] + b[-1]
        return budget_exit(np.where(s.current >= 0, sigmoid(z), -1.0), s)

    return lomo(items, fit, score)


def per_model_zscore(items: list):
    stats = {}
    for m in models(items):
        x = np.vstack([s.features for s in split(items, m)[1] if len(s.features)])
        sd = x.std(0)
        sd[sd < 1e-9] = 1
        stats[m] = (x.mean(0), sd)

    def transform(s):
        mean, sd = stats[model_of(s)]
        return (s.features - mean) / sd if len(s.features) else s.features

    return transform


def scale_free(items: list) -> None:
    report("(a) threshold as a quantile, LogisticStopRule.for_warmup",
           lomo(items, fit_default, _scores, warmup_threshold))  # fmt: skip
    report("(a') quantile of the running-maximum scores",
           lomo(items, fit_default, logit_scores, running_max_quantile))  # fmt: skip
    report("(b) features standardised per model", transformed_lomo(items, per_model_zscore(items)))


def escot_columns(x: np.ndarray) -> np.ndarray:
    """Answer age / position, budget share x change rate, budget share x distinct, log position x change."""
    i_pos, i_age, i_dist, i_chg, i_bud = (FEATURE_NAMES.index(n) for n in
        ("log_position", "log_age", "log_distinct", "change_rate", "budget_fraction"))  # fmt: skip
    ratio = np.expm1(x[:, i_age]) / np.maximum(np.expm1(x[:, i_pos]), 1e-9)
    extra = [ratio, x[:, i_bud] * x[:, i_chg], x[:, i_bud] * x[:, i_dist], x[:, i_pos] * x[:, i_chg]]
    return np.hstack([x, np.stack(extra, axis=1)])


def escot(items: list) -> None:
    n = len(FEATURE_NAMES) + 4
    outs = transformed_lomo(
        items, lambda s: escot_columns(s.features) if len(s.features) else np.zeros((0, n))
    )
    report("ES-CoT-style features added", outs)


def tree_model(x: np.ndarray, y: np.ndarray, w: np.ndarray):
    """Small boosted trees (scikit-learn, exploration only): depth 3, 100 rounds, no early stopping."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    model = HistGradientBoostingClassifier(max_depth=3, max_iter=100, learning_rate=0.1, early_stopping=False,
                                           random_state=0)  # fmt: skip
    return model.fit(x, y, sample_weight=w / w.mean())


def tree_scores(model, s) -> np.ndarray:
    if not len(s.features):
        return np.zeros(0)
    return budget_exit(np.where(s.current >= 0, model.predict_proba(s.features)[:, 1], -1.0), s)


def cross_fitted(train: list, fit, score) -> dict:
    """Scores of the training streams from models fitted without their own dataset (out of fold)."""
    datasets = sorted({s.group[1] for s in train})
    out = {}
    for d in datasets:
        model = fit([s for s in train if s.group[1] != d])
        out.update({id(s): score(model, s) for s in train if s.group[1] == d})
    return out


def trees(items: list) -> None:
    """Boosted trees over the shipped features, the label and weights of the logistic score, held out by
    model; the threshold by the risk test on (i) the training model's in-sample tree scores, (ii) its
    scores cross-fitted by dataset (trees fitted in-sample overfit, so (i) is optimistic)."""

    def fit(train):
        return tree_model(*_training_rows(train))

    report("boosted trees, threshold on in-sample training scores", lomo(items, fit, tree_scores))
    outs = {t: [] for t in TOLERANCES}
    for m in models(items):
        train, test = split(items, m)
        oof = cross_fitted(train, fit, tree_scores)
        trs = [oof[id(s)] for s in train]
        risks = [r for r, _ in sweep(train, trs, _grid(trs))]
        model = fit(train)
        tes = [tree_scores(model, s) for s in test]
        for t in TOLERANCES:
            outs[t].append(sweep(test, tes, [_chosen(risks, t, DELTA)])[0][1])
    report("boosted trees, threshold on training scores cross-fitted by dataset", outs)


def without(names: tuple[str, ...]):
    """A transform that zeroes the feature columns ``names`` (those signals not observed)."""
    cols = [FEATURE_NAMES.index(n) for n in names]

    def transform(s):
        x = s.features.copy()
        x[:, cols] = 0.0
        return x

    return transform


def probe_text(items: list) -> None:
    """The probe-text signals (hesitation word, what follows the ``}``) in and out, held out by model."""
    report("shipped features (refitted the same way)", transformed_lomo(items, lambda s: s.features))
    report("without probe text (hesitant, closes, reopens)", transformed_lomo(
        items, without(("text_seen", "hesitant", "closes", "reopens"))))  # fmt: skip
    report("without the hesitation word only", transformed_lomo(items, without(("hesitant",))))


def kagree_lomo(items: list) -> dict:
    """The "last k agree" baseline, k by the risk test on the other models."""
    return lomo(items, lambda train: None, lambda _, s: agree_runs(s))


def reasoning_text(data: pathlib.Path) -> None:
    """Reasoning-text signals held out by model: text-probed traces of three models (Qwen3-8B full texts,
    SkyThought 14B on AMC23 and 27B on MATH-500; ``replay.cot`` probing every 64 tokens, each probe carrying
    the reasoning since the previous one), leave one trace file (model) out."""
    from reasonserve.replay.cot import load_traces

    t0 = time.time()
    files = sorted((data / "reasoning_traces").glob("*.jsonl*"))
    trajs = [tr for f in files for tr in load_traces(f)]
    items = streams(trajs)
    print(f"built {len(items)} text-probed streams from {len(files)} files in {time.time() - t0:.0f} s")
    for m in models(items):
        its = split(items, m)[1]
        acc = np.mean([s.trajectory.final_correct for s in its])
        print(f"  {m}: {len(its)} traces, final accuracy {100 * acc:.1f}%")
    tail = ("tail_seen", "tail_hesitation", "tail_verifies", "tail_new_approach")
    report("with reasoning-text features", transformed_lomo(items, lambda s: s.features))
    report("without reasoning-text features", transformed_lomo(items, without(tail)))
    report("k agree", kagree_lomo(items))


# ---------------------------------------------------------------- the figure of docs/benchmarks.md

FIGURE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "img" / "early_exit_curves.png"
TARGET_SAVINGS, TOLERANCE_PT = 0.30, 0.5


def curve(items: list, scores: list, grid) -> list:
    """(savings, accuracy change in points) per threshold of ``grid``."""
    return [(o.savings, -100 * o.accuracy_loss) for _, o in sweep(items, scores, grid)]


def score_grid(scores: list, n: int = 200) -> list[float]:
    fin = np.concatenate([sc[np.isfinite(sc)] for sc in scores if len(sc)])
    return sorted(set(np.quantile(fin, np.linspace(0, 1, n)).tolist()) | {np.inf}, reverse=True)


def window_curve(items: list) -> list:
    """``AgreeSpanRule(t, 2048)`` (the window rule's family) for spans t, through the replay rule that
    equals it probe for probe (``TokenWindowRule``)."""
    from reasonserve.replay.probe_rules import TokenWindowRule, evaluate

    trajs = [s.trajectory for s in items]
    outs = [evaluate(TokenWindowRule(t, 2048), trajs) for t in range(12288, 127, -128)]
    return [(o.savings, -100 * o.accuracy_loss) for o in outs]


def read_off(points: list) -> str:
    """Best savings with a change >= -0.5 pt, and the change at 30% savings (interpolated)."""
    within = [sv for sv, d in points if d >= -TOLERANCE_PT - 1e-9]
    best = max(within) if within else 0.0
    pts = sorted(points)
    at = None
    for (s0, d0), (s1, d1) in itertools.pairwise(pts):
        if s0 <= TARGET_SAVINGS <= s1 and s1 > s0:
            at = d0 + (d1 - d0) * (TARGET_SAVINGS - s0) / (s1 - s0)
            break
    return f"best savings within -0.5 pt {100 * best:.1f}%; change at 30% " + (
        f"{at:+.2f} pt" if at is not None else "not reached"
    )


def figure_data(items: list) -> dict:
    """Every curve and point of the figure, printed as read off."""
    from reasonserve.replay.probe_rules import OracleRule, TokenWindowRule, evaluate
    from reasonserve.replay.stop_training import cross_validate_streams, held_out_scores

    held = held_out_scores(items, model_of)
    everything = fit_default(items)
    in_sample = [logit_scores(everything, s) for s in items]
    runs = [agree_runs(s) for s in items]
    cv = cross_validate_streams(items, model_of)
    trajs = [s.trajectory for s in items]
    settled, window = evaluate(OracleRule(), trajs), evaluate(TokenWindowRule(2432, 2048), trajs)
    first_equal = oracle(items, hopeless=False)
    data = {
        "curves": {
            "learned + budget exit, held out by model (the shipped rule's family)": curve(
                items, held, score_grid(held)
            ),
            "last k agree (k = 200 .. 1)": curve(items, runs, [float(k) for k in range(200, 0, -1)]),
            "window rule family: answer held t tokens, min 2,048": window_curve(items),
            "ceiling: learned + budget exit fitted and scored on all runs (in-sample)": curve(
                items, in_sample, score_grid(in_sample)
            ),
        },
        "calibrated": {
            "learned, risk test, held out by model": [(t, cv[t].pooled_learned) for t in TOLERANCES],
            "k agree, risk test, held out by model": [(t, cv[t].pooled_kagree) for t in TOLERANCES],
        },
        "points": {
            "window_rule() (2,432 tokens, min 2,048; fixed)": (window.savings, -100 * window.accuracy_loss),
            "oracle: every later probe equals the final answer": (
                settled.savings,
                -100 * settled.accuracy_loss,
            ),
            "oracle: first probe equal to the final answer": (first_equal[0], 100 * first_equal[1]),
        },
    }
    for name, pts in data["curves"].items():
        print(f"  {name}: {read_off(pts)}")
    for name, pts in data["calibrated"].items():
        print(f"  {name}: " + "; ".join(f"{100 * t:g} pt: {fmt(o)}" for t, o in pts))
    for name, (sv, d) in data["points"].items():
        print(f"  {name}: {100 * sv:.1f}% at {d:+.2f}")
    return data


def plot_figure(data: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.6), dpi=110)
    ax.axhspan(-TOLERANCE_PT, 3, xmin=0, xmax=1, color="0.93", zorder=0)
    ax.axhline(-TOLERANCE_PT, color="0.35", lw=0.8, ls="--")
    ax.axvline(100 * TARGET_SAVINGS, color="0.35", lw=0.8, ls="--")
    ax.fill_between([100 * TARGET_SAVINGS, 70], -TOLERANCE_PT, 3, color="#c8e6c9", zorder=0)
    ax.text(100 * TARGET_SAVINGS + 0.5, 1.15, "target: >= 30% savings\nat <= 0.5 pt loss", fontsize=8)
    styles = ["-", "-", "-.", ":"]
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:purple"]
    for (name, pts), ls, c in zip(data["curves"].items(), styles, colors, strict=True):
        pts = sorted(pts)
        ax.plot([100 * s for s, _ in pts], [d for _, d in pts], ls, color=c, lw=1.5, label=name)
    marks = zip(data["calibrated"].items(), ["tab:blue", "tab:orange"], ["o", "s"], strict=True)
    for (name, pts), c, mk in marks:
        ax.scatter([100 * o.savings for _, o in pts], [-100 * o.accuracy_loss for _, o in pts], color=c,
                   marker=mk, edgecolor="k", zorder=4, s=36,
                   label=f"{name} (tolerance 0 / 0.5 / 1 / 2 pt)")  # fmt: skip
        for t, o in pts:
            ax.annotate(f"{100 * t:g}", (100 * o.savings, -100 * o.accuracy_loss), fontsize=7, xytext=(4, -9),
                        textcoords="offset points")  # fmt: skip
    for (name, (sv, d)), mk in zip(data["points"].items(), ["D", "*", "P"], strict=True):
        ax.scatter([100 * sv], [d], marker=mk, s=70, color="k" if mk != "D" else "tab:green", zorder=5,
                   label=f"{name}: {100 * sv:.1f}%")  # fmt: skip
    ax.set_xlim(0, 62)
    ax.set_ylim(-5, 1.5)
    ax.set_xlabel("reasoning-token savings (%)")
    ax.set_ylabel("accuracy change (points) vs full runs")
    ax.set_title(
        "Early exit, 4,376 recorded trajectories of 2 models: savings vs accuracy change", fontsize=10
    )
    ax.legend(fontsize=7, loc="lower left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    print(f"  written {path}")


def figure(items: list) -> None:
    plot_figure(figure_data(items), FIGURE)


EXPERIMENTS = {"ceiling": ceiling, "oracles": oracles, "hopeless": hopeless, "scale_free": scale_free,
               "escot": escot, "trees": trees, "probe_text": probe_text, "figure": figure}  # fmt: skip
TEXT_EXPERIMENTS = {"reasoning_text": reasoning_text}  # read the reasoning traces, not the probe streams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"
    parser.add_argument("--data", type=pathlib.Path, default=data)
    parser.add_argument("--cache", type=pathlib.Path, default=None, help="pickle of the probe streams")
    parser.add_argument("--only", action="append", choices=sorted({**EXPERIMENTS, **TEXT_EXPERIMENTS}),
                        help="repeatable")  # fmt: skip
    args = parser.parse_args()
    names = args.only or [*EXPERIMENTS, *TEXT_EXPERIMENTS]
    items = load_streams(args.data, args.cache) if set(names) & set(EXPERIMENTS) else []
    for name in names:
        t0 = time.time()
        print(f"== {name}", flush=True)
        if name in TEXT_EXPERIMENTS:
            TEXT_EXPERIMENTS[name](args.data)
        else:
            EXPERIMENTS[name](items)
        print(f"({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
