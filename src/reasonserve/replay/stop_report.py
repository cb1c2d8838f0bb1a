"""The early-exit section of ``reasonserve replay probes``.

Beside the window rule it reports, on the same trajectories:

* the shipped :func:`~reasonserve.certainindex.stopping.default_rule` and the earlier
  window rule, both replayed through their incremental ``observe`` (what a host runs),
  overall, per model and per dataset, with how often an exit answer differs from the
  full run's final answer;
* the learned rule and the "last k probes agree" baseline cross-validated by **model**
  (leave one model out) and by (model, dataset), at the accuracy tolerances
  {0, 0.5, 1, 2} points, both chosen by the same Clopper-Pearson risk test, and, for
  context, k-agree with the learned rule's exit at the last probe before the budget;
* savings-vs-accuracy curves (held-out learned scores, k-agree with and without the
  budget exit, token window, oracle).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from reasonserve.certainindex.calibration import Outcome
from reasonserve.certainindex.stopping import default_rule, window_rule
from reasonserve.replay.probe_rules import OracleRule, online_first_stop
from reasonserve.replay.probe_runs import Trajectory
from reasonserve.replay.stop_training import (
    DELTA,
    TOLERANCES,
    agree_runs,
    budget_exit,
    cross_validate_streams,
    finite_scores,
    held_out_scores,
    streams,
    sweep,
)

__all__ = ["stopping_report"]


def _model(tr: Trajectory) -> str:
    return tr.run.split("__")[0]


def _dataset(tr: Trajectory) -> str:
    return [*tr.run.split("__"), "?"][1]


def _replayed(rule, trajs: Sequence[Trajectory]) -> dict:
    """Outcome of ``rule`` through ``observe``: overall, per model, per dataset, exit disagreement."""
    per: dict[str, dict[str, Outcome]] = {"model": {}, "dataset": {}}
    total = None
    exits = differ = 0
    for tr in trajs:
        stop = online_first_stop(rule, tr) if hasattr(rule, "start") else rule.first_stop(tr)
        right, cost = (tr.final_correct, tr.tokens_used) if stop is None else (
            tr.class_correct[stop[1]], tr.positions[stop[0]])  # fmt: skip
        if stop is not None:
            exits += 1
            differ += stop[1] != tr.final_class
        one = Outcome(1, float(right), float(cost), float(tr.final_correct), float(tr.tokens_used))
        total = one if total is None else total + one
        for kind, name in (("model", _model(tr)), ("dataset", _dataset(tr))):
            per[kind][name] = one if name not in per[kind] else per[kind][name] + one
    return {"outcome": total, "per_model": per["model"], "per_dataset": per["dataset"],
            "exits": exits, "exit_differs_from_final": differ / exits if exits else 0.0}  # fmt: skip


def _curves(items) -> dict[str, list[tuple[str, Outcome]]]:
    scores = held_out_scores(items, lambda s: s.group[0])
    quantiles = np.quantile(finite_scores(scores), np.linspace(0.5, 1.0, 40))
    grid = sorted({float(q) for q in quantiles}, reverse=True)
    runs = [agree_runs(s) for s in items]
    ended = [budget_exit(r, s) for r, s in zip(runs, items, strict=True)]
    spans = [np.maximum.accumulate(s.features[:, 1]) if len(s.features) else np.zeros(0) for s in items]
    token_grid = [float(np.log1p(t / 1024)) for t in range(8192, 255, -256)]
    ks = list(range(64, 0, -1))
    return {"learned, held-out model": _named([f"p>={t:.4f}" for t in grid], sweep(items, scores, grid)),
            "last k agree": _named([f"k={k}" for k in ks], sweep(items, runs, ks)),
            "last k agree + budget exit": _named([f"k={k}" for k in ks], sweep(items, ended, ks)),
            "answer held (tokens)": _named([f"{t:.3f}" for t in token_grid], sweep(items, spans, token_grid))}


def _named(labels, results) -> list[tuple[str, Outcome]]:
    return [(label, outcome) for label, (_, outcome) in zip(labels, results, strict=True)]

def stopping_report(trajs: Sequence[Trajectory], *, delta: float = DELTA,
                    progress: Callable[[int, int, str], None] | None = None) -> dict:  # fmt: skip
    """The section's numbers (see module docstring); ``_curves`` and ``_rows`` for printing.

    ``progress(done, total, what)`` hears of each of its five stages.
    """
    done = _Stages(progress, 5, "early-exit stages")
    trajs = list(trajs)
    shipped, window = default_rule(), window_rule()
    replays = {f"shipped default ({shipped.name})": _replayed(shipped, trajs),
               f"window rule ({window.name})": _replayed(window, trajs),
               "oracle (context)": _replayed(OracleRule(), trajs)}  # fmt: skip
    done()
    items = streams(trajs)
    done()
    section = {"delta": delta, "rules": {name: _rule_json(r) for name, r in replays.items()},
               "shipped_requires": sorted(shipped.requires)}  # fmt: skip
    if len({s.group[0] for s in items}) < 2 or len({s.group for s in items}) < 2:
        note = "cross-validation by model needs recordings of at least 2 models"
        return {**section, "cross_validated": note, "_rows": _rows(replays, {}, {}), "_curves": {}}
    by_model = cross_validate_streams(items, lambda s: s.group[0], TOLERANCES, delta)
    done()
    by_group = cross_validate_streams(items, lambda s: "/".join(s.group), TOLERANCES, delta)
    done()
    cv = {str(tol): _cv_json(by_model[tol], by_group[tol]) for tol in TOLERANCES}
    curves = _curves(items)
    done()
    return {**section, "cross_validated": cv, "_rows": _rows(replays, by_model, by_group), "_curves": curves}


class _Stages:
    """Calls ``progress(k, total, what)`` as each of ``total`` stages ends (nothing without one)."""

    def __init__(self, progress, total: int, what: str) -> None:
        self.progress, self.total, self.what, self.done = progress, total, what, 0
        if progress is not None:
            progress(0, total, what)

    def __call__(self) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total, self.what)


def _cv_json(m, g) -> dict:
    """One tolerance's held-out outcomes: ``m`` leaving one model out, ``g`` one (model, dataset)."""
    def per_fold(outs):
        return dict(zip(m.folds, [o.as_dict() for o in outs], strict=True))

    return {"learned, leave one model out": m.pooled_learned.as_dict(),
            "k agree, leave one model out": m.pooled_kagree.as_dict(),
            "k chosen per held-out model": m.kagree_chosen,
            "k agree + budget exit, leave one model out": m.pooled_kagree_budget.as_dict(),
            "k (+ budget exit) chosen per held-out model": m.kagree_budget_chosen,
            "learned, leave one (model, dataset) out": g.pooled_learned.as_dict(),
            "k agree, leave one (model, dataset) out": g.pooled_kagree.as_dict(),
            "learned per held-out model": per_fold(m.learned),
            "k agree per held-out model": per_fold(m.kagree)}  # fmt: skip


def _rule_json(r: dict) -> dict:
    return {**r["outcome"].as_dict(), "exits": r["exits"],
            "exit_differs_from_final": r["exit_differs_from_final"],
            "per_model": {k: o.as_dict() for k, o in sorted(r["per_model"].items())},
            "per_dataset": {k: o.as_dict() for k, o in sorted(r["per_dataset"].items())}}  # fmt: skip


def _rows(replays, by_model, by_group) -> list[tuple[str, Outcome]]:
    rows = [(name, r["outcome"]) for name, r in replays.items()]
    for name, r in replays.items():
        if name.startswith("shipped"):
            rows += [(f"  shipped, model {k}", o) for k, o in sorted(r["per_model"].items())]
            rows += [(f"  shipped, dataset {k}", o) for k, o in sorted(r["per_dataset"].items())]
    for tol in by_model:
        pt = f"{100 * tol:g} pt"
        rows += [(f"learned @{pt}, leave-one-model-out", by_model[tol].pooled_learned),
                 (f"k agree @{pt}, leave-one-model-out (k={by_model[tol].kagree_chosen})",
                  by_model[tol].pooled_kagree),
                 (f"k agree + budget exit @{pt}, leave-one-model-out "
                  f"(k={by_model[tol].kagree_budget_chosen})", by_model[tol].pooled_kagree_budget),
                 (f"learned @{pt}, leave-one-(model, dataset)-out", by_group[tol].pooled_learned),
                 (f"k agree @{pt}, leave-one-(model, dataset)-out", by_group[tol].pooled_kagree)]  # fmt: skip
    return rows


def print_stopping(section: dict, out, png_path: str | None) -> None:
    from reasonserve.replay import _report

    rows = section.pop("_rows")
    curves = section.pop("_curves")
    title = f"early exit (certainindex.stopping; risk-test confidence {1 - section['delta']:g})"
    out.write(_report.table(title, rows, "tokens") + "\n")
    for name, r in section["rules"].items():
        out.write(f"{name}: exits {r['exits']}, exit answer differs from the full run's in "
                  f"{100 * r['exit_differs_from_final']:.1f}% of them\n")  # fmt: skip
    out.write(f"the shipped rule reads: {', '.join(section['shipped_requires'])}\n")
    if png_path and curves:
        _report.plot_savings(png_path, "early exit: savings vs accuracy loss (held-out model)", curves,
                             [(n, o) for n, o in rows if not n.startswith(" ")])  # fmt: skip
