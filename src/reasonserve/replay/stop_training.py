"""Fit, calibrate and cross-validate learned early-exit rules on probe recordings.

Every trajectory is turned into a :class:`Stream` by feeding its probes to the same
:class:`~reasonserve.certainindex.stopping.features.FeatureState` that a
:class:`~reasonserve.certainindex.stopping.learned.LogisticStopRule` runs online; the
score of a probe is that rule's ``score`` (``inf`` at the last probe before the budget
when the rule exits there), so a threshold's first crossing here is the rule's first
stop online (tested). A probe is labelled 1 when exiting there costs
no accuracy (its answer is right, or the full run's is wrong). The threshold is the
last one of the passing prefix of a Clopper-Pearson risk test
(:func:`~reasonserve.certainindex.conformal.choose_threshold`), thresholds ordered from
the most conservative. Folds: by model (leave one model out) and by (model, dataset).

Regenerate the shipped rule (``certainindex/stopping/shipped_rule.py``) with::

    python -m reasonserve.replay.stop_training --data ../shared/data \\
        --out src/reasonserve/certainindex/stopping/shipped_rule.py
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from reasonserve.certainindex.calibration import Outcome
from reasonserve.certainindex.conformal import ThresholdRisk, choose_threshold
from reasonserve.certainindex.stopping.features import FEATURE_NAMES, FeatureState
from reasonserve.certainindex.stopping.learned import LogisticStopRule, fit_logistic
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.replay.probe_runs import Trajectory

__all__ = [
    "Stream",
    "StreamCV",
    "agree_runs",
    "budget_exit",
    "cross_validate_streams",
    "finite_scores",
    "fit_rule",
    "held_out_scores",
    "streams",
    "sweep",
    "threshold_quantile",
]

TOLERANCES = (0.0, 0.005, 0.01, 0.02)
_ANSWERED = FEATURE_NAMES.index("answered")
DELTA = 0.1  # the chosen threshold's loss exceeds the tolerance with probability <= DELTA (exchangeable data)


@dataclass(frozen=True)
class Stream:
    """One trajectory's features and outcomes per probe (see module docstring)."""

    trajectory: Trajectory
    features: np.ndarray  # [P, F]
    current: np.ndarray  # [P] class of the current answer (-1: none yet)
    right: np.ndarray  # [P] is the current answer right?
    budget_end: np.ndarray  # [P] is this the last probe before the budget?

    @property
    def group(self) -> tuple[str, str]:
        model, dataset = [*self.trajectory.run.split("__"), "?"][:2]
        return model, dataset


def streams(trajs: Sequence[Trajectory]) -> list[Stream]:
    out = []
    for tr in trajs:
        state = FeatureState()
        feats, current, end = [], [], []
        for obs in tr.observations():
            feats.append(state.update(obs))
            current.append(tr.class_of(state.current_answer) if state.current_answer is not None else -1)
            end.append(state.at_budget_end(obs))
        cur = np.array(current, dtype=np.int64)
        right = np.array([c >= 0 and tr.class_correct[c] for c in current], dtype=bool)
        x = np.array(feats, dtype=np.float64).reshape(len(feats), len(FEATURE_NAMES))
        out.append(Stream(tr, x, cur, right, np.array(end, dtype=bool)))
    return out


def _scores(rule: LogisticStopRule, s: Stream) -> np.ndarray:
    """The rule's score per probe, -1 where there is no answer yet; running maximum."""
    raw = np.array([rule.score(x) if c >= 0 else -1.0 for x, c in zip(s.features, s.current, strict=True)])
    return budget_exit(raw, s) if rule.budget_exit else _running_max(raw)


def budget_exit(raw: np.ndarray, s: Stream) -> np.ndarray:
    """``raw`` with ``inf`` (an exit at every threshold) at the answered last probe before the budget."""
    if len(raw):
        raw = np.where(s.budget_end & (s.current >= 0), np.inf, raw)
    return _running_max(raw)


def _running_max(raw: np.ndarray) -> np.ndarray:
    return np.maximum.accumulate(raw) if len(raw) else raw


def agree_runs(s: Stream) -> np.ndarray:
    """Probes the current answer has held (the "last k agree" score); running maximum."""
    runs, run, last = [], 0, -1
    answered = s.features[:, _ANSWERED] if len(s.features) else ()
    for c, seen in zip(s.current, answered, strict=True):
        if seen:  # an empty probe neither extends nor breaks the run
            run = run + 1 if c == last else 1
            last = c
        runs.append(run)
    return _running_max(np.array(runs, dtype=np.float64))


def sweep(items: Sequence[Stream], scores: Sequence[np.ndarray], thresholds: Sequence[float]):
    """Per threshold: (ThresholdRisk, Outcome) of exiting at the first score >= threshold."""
    th = np.asarray(thresholds, dtype=np.float64)
    harms, gains, correct, cost = (np.zeros(len(th), dtype=np.int64) for _ in range(4))
    base_correct = base_cost = 0
    for s, sc in zip(items, scores, strict=True):
        right, spent = _exits(s, sc, th)
        final = s.trajectory.final_correct
        harms += final & ~right
        gains += right & (not final)
        correct, cost = correct + right, cost + spent
        base_correct, base_cost = base_correct + final, base_cost + s.trajectory.tokens_used
    return [(ThresholdRisk(float(t), int(h), int(g), len(items)),
             Outcome(len(items), float(c), float(k), float(base_correct), float(base_cost)))
            for t, h, g, c, k in zip(th, harms, gains, correct, cost, strict=True)]  # fmt: skip


def _exits(s: Stream, sc: np.ndarray, th: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per threshold: is the answer returned right, and the tokens spent (first score >= threshold)."""
    tr = s.trajectory
    j = np.searchsorted(sc, th, side="left")
    stopped = j < len(sc)
    if not stopped.any():
        return np.full(len(th), tr.final_correct), np.full(len(th), tr.tokens_used, dtype=np.int64)
    at = np.minimum(j, len(sc) - 1)
    positions = np.asarray(tr.positions, dtype=np.int64)
    return (np.where(stopped, s.right[at], tr.final_correct),
            np.where(stopped, positions[at], tr.tokens_used))  # fmt: skip


def _grid(scores: Sequence[np.ndarray], n: int = 120) -> list[float]:
    """Candidate thresholds from the score distribution, most conservative first."""
    return sorted({float(q) for q in np.quantile(finite_scores(scores), np.linspace(0.2, 1.0, n))} | {1.01},
                  reverse=True)  # fmt: skip


def finite_scores(scores: Sequence[np.ndarray]) -> np.ndarray:
    """All finite scores pooled (the budget exits' ``inf`` left out), at least one value."""
    values = np.concatenate([sc for sc in scores if len(sc)] or [np.zeros(1)])
    values = values[np.isfinite(values)]
    return values if len(values) else np.zeros(1)


def _calibrated(items, scores, grid, tolerance, delta) -> float:
    return _chosen([risk for risk, _ in sweep(items, scores, grid)], tolerance, delta)


def _chosen(risks: Sequence[ThresholdRisk], tolerance: float, delta: float) -> float:
    """The risk test's threshold over ``risks`` (a grid's sweep), its first when none passes."""
    chosen = choose_threshold(risks, tolerance, delta)
    return chosen.threshold if chosen is not None else risks[0].threshold


def _training_rows(items: Sequence[Stream]):
    xs, ys, ws = [], [], []
    for s in items:
        if len(s.features):
            xs.append(s.features)
            ys.append((s.right | (not s.trajectory.final_correct)).astype(np.float64))
            ws.append(np.full(len(s.features), 1.0 / len(s.features)))
    if not xs:
        raise InvalidArgumentError("no probes to fit a stopping rule on")
    return np.vstack(xs), np.concatenate(ys), np.concatenate(ws)


def fit_rule(items: Sequence[Stream], tolerance: float, delta: float = DELTA) -> LogisticStopRule:
    """Fit the logistic score on ``items`` and calibrate its threshold on them."""
    rule = fit_logistic(*_training_rows(items))
    scores = [_scores(rule, s) for s in items]
    threshold = min(1.0, _calibrated(items, scores, _grid(scores), tolerance, delta))
    return rule.with_threshold(threshold, f"learned (tolerance {100 * tolerance:g} pt)",
                               threshold_quantile(rule, items, threshold))  # fmt: skip


def threshold_quantile(rule: LogisticStopRule, items: Sequence[Stream], threshold: float) -> float:
    """The share of ``items``' answered probes whose score is below ``threshold``."""
    answered = [s.features[s.current >= 0] for s in items if len(s.features)]
    x = np.vstack(answered) if answered else np.zeros((0, len(FEATURE_NAMES)))
    if not len(x):
        raise InvalidArgumentError("no answered probes to place a threshold among")
    scores = np.array([rule.score(row) for row in x])
    return float(np.mean(scores < threshold))


@dataclass(frozen=True)
class StreamCV:
    """Held-out outcome per fold and pooled: the learned rule, the k-agree baseline, and
    k-agree with the learned rule's exit at the budget (context: what the score adds)."""

    folds: list[str]
    learned: list[Outcome]
    kagree: list[Outcome]
    kagree_chosen: list[int]
    kagree_budget: list[Outcome]
    kagree_budget_chosen: list[int]

    @staticmethod
    def _pool(outs: list[Outcome]) -> Outcome:
        total = outs[0]
        for o in outs[1:]:
            total = total + o
        return total

    @property
    def pooled_learned(self) -> Outcome:
        return self._pool(self.learned)

    @property
    def pooled_kagree(self) -> Outcome:
        return self._pool(self.kagree)

    @property
    def pooled_kagree_budget(self) -> Outcome:
        return self._pool(self.kagree_budget)


def cross_validate_streams(
    items: Sequence[Stream],
    key: Callable[[Stream], str],
    tolerances: Sequence[float] = TOLERANCES,
    delta: float = DELTA,
) -> dict[float, StreamCV]:
    """Leave one group out (``key``: e.g. the model): fit and calibrate elsewhere, score here.

    The logistic score is fitted once per fold; its threshold, and ``k`` of the k-agree
    baseline, are chosen per tolerance by the same risk test on the other groups.
    """
    groups: dict[str, list[Stream]] = defaultdict(list)
    for s in items:
        groups[key(s)].append(s)
    if len(groups) < 2:
        raise InvalidArgumentError(f"need at least 2 groups to cross-validate, got {sorted(groups)}")
    names = sorted(groups)
    out = {tol: StreamCV(names, [], [], [], [], []) for tol in tolerances}
    runs = {id(s): agree_runs(s) for s in items}
    ended = {id(s): budget_exit(runs[id(s)], s) for s in items}
    ks = [float(k) for k in range(200, 0, -1)]
    for name in names:
        train = [s for g in names if g != name for s in groups[g]]
        test = groups[name]
        rule = fit_logistic(*_training_rows(train))
        train_scores = [_scores(rule, s) for s in train]
        test_scores = [_scores(rule, s) for s in test]
        learned = [risk for risk, _ in sweep(train, train_scores, _grid(train_scores))]
        agree = {id(score): [risk for risk, _ in sweep(train, [score[id(s)] for s in train], ks)]
                 for score in (runs, ended)}  # fmt: skip
        for tol, cv in out.items():
            th = min(1.0, _chosen(learned, tol, delta))
            cv.learned.append(sweep(test, test_scores, [th])[0][1])
            for score, outs, chosen in ((runs, cv.kagree, cv.kagree_chosen),
                                        (ended, cv.kagree_budget, cv.kagree_budget_chosen)):  # fmt: skip
                k = _chosen(agree[id(score)], tol, delta)
                chosen.append(int(k))
                outs.append(sweep(test, [score[id(s)] for s in test], [k])[0][1])
    return out


def held_out_scores(items: Sequence[Stream], key: Callable[[Stream], str]) -> list[np.ndarray]:
    """Per stream, the scores of a logistic rule fitted on the other groups (for curves)."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(items):
        groups[key(s)].append(i)
    scores: list[np.ndarray] = [np.zeros(0)] * len(items)
    for name, idx in groups.items():
        train = [items[i] for g, ids in groups.items() if g != name for i in ids]
        rule = fit_logistic(*_training_rows(train))
        for i in idx:
            scores[i] = _scores(rule, items[i])
    return scores

def write_default(rule: LogisticStopRule, path: str, source: str) -> None:
    """Write ``rule`` as the Python constant module ``certainindex/stopping/shipped_rule.py``."""
    import pprint

    body = pprint.pformat(rule.to_json(), width=100, compact=True, sort_dicts=False)
    text = (f'"""The shipped learned stopping rule (generated; do not edit).\n\n{source}\n"""\n\n'
            f'__all__ = ["DEFAULT_RULE"]\n\nDEFAULT_RULE = {body}\n')  # fmt: skip
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import glob
    import pathlib

    from reasonserve.replay.probe_runs import load_run

    parser = argparse.ArgumentParser(description="fit the shipped learned stopping rule on probe recordings")
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--tolerance", type=float, default=0.005)
    parser.add_argument("--delta", type=float, default=DELTA)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    pattern = str(pathlib.Path(args.data) / "probes" / "*")
    folders = sorted(p for p in glob.glob(pattern) if pathlib.Path(p).is_dir())
    items = streams([t for f in folders for t in load_run(f)])
    rule = fit_rule(items, args.tolerance, args.delta)
    rule = rule.with_threshold(rule.threshold, f"learned (shipped, tolerance {100 * args.tolerance:g} pt)",
                               rule.threshold_quantile)
    source = (f"Fitted by `python -m reasonserve.replay.stop_training --data {args.data} "
              f"--tolerance {args.tolerance} --delta {args.delta}\n--out {args.out}` on {len(items)} "
              f"trajectories from {len(folders)} probe runs.")  # fmt: skip
    write_default(rule, args.out, source)
    print(f"{rule.name}: threshold {rule.threshold:.6f}; written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
