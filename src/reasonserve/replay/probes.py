"""``reasonserve replay probes``: certainindex on real probe-in-the-middle recordings.

Reports, on the same trajectories: the full-trajectory baseline, the Dynasor presets,
a window sweep, TV-test rules, the oracles (context only), the fixed development
setting, and the **calibrated** rule: an agreement span in tokens plus a minimum length
(:class:`TokenWindowRule`), chosen by cross-validation over (model, dataset) groups,
so its numbers are out-of-sample. The JSON's top-level ``baseline_accuracy``,
``accuracy``, ``baseline_cost``, ``cost`` (mean tokens) and ``savings`` describe the
*headline setting*: by default the shipped :data:`DEV_SETTING`, chosen on the
development runs and applied unchanged (``--setting``, see
:mod:`reasonserve.replay.settings`); ``calibrated`` holds the cross-validated rule.
"""

from __future__ import annotations

import glob
import pathlib
from collections import defaultdict
from collections.abc import Callable, Sequence

from reasonserve.certainindex.answers.equivalence import equivalent
from reasonserve.certainindex.calibration import choose, cross_validate
from reasonserve.certainindex.estimators.probe_consistency import PRESETS
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.replay import _report
from reasonserve.replay.probe_rules import (
    OracleRule,
    TargetOracleRule,
    TokenWindowRule,
    TVRule,
    WindowRule,
    evaluate,
)
from reasonserve.replay.probe_runs import Trajectory, load_run
from reasonserve.replay.settings import TOKEN_KEYS, resolve_setting

__all__ = [
    "DEV_SETTING",
    "calibration_candidates",
    "headline_rule",
    "replay_probes",
    "replay_trajectories",
    "run_folders",
    "token_breakdown",
]

SWEEP = (2, 3, 5, 8, 12, 16, 24, 32, 48)
Progress = Callable[[int, int, str], None]  # (done, total, what)

# The setting `reasonserve calibrate probes` chooses on all 21 development runs (4,376
# trajectories, tolerance 0.5 points). Replayed unchanged on any other recordings, it
# shows how a setting chosen here generalizes; on the development runs it is in-sample.
DEV_SETTING = TokenWindowRule(2432, 2048)


def calibration_candidates() -> list[TokenWindowRule]:
    """Agreement spans of 4,096 down to 128 tokens; most conservative first (see :func:`choose`)."""
    return [TokenWindowRule(t, m) for t in range(4096, 127, -128) for m in (2048, 1024, 512, 0)]


def run_folders(
    runs: Sequence[str] | None, runs_glob: str | None, data_root: pathlib.Path | None
) -> list[pathlib.Path]:
    """The ``--run`` folders, else those ``--runs`` matches, else ``data_root/probes/*``."""
    if runs:
        folders = [pathlib.Path(r) for r in runs]
    else:
        if runs_glob is not None:
            pattern = runs_glob
        elif data_root is not None:
            pattern = str(data_root / "probes" / "*")
        else:
            raise InvalidArgumentError("no probe runs named: give --run DIR, --runs GLOB or a data root")
        folders = sorted(pathlib.Path(p) for p in glob.glob(pattern) if pathlib.Path(p).is_dir())
    if not folders:
        raise InvalidArgumentError("no probe run folders found (use --run DIR or --runs GLOB)")
    return folders


def _folds(trajs: list[Trajectory]) -> list[list[Trajectory]]:
    """(model, dataset) groups; a single group falls back to 5 folds by problem."""
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        model, dataset = [*t.run.split("__"), "?"][:2]
        groups[f"{model}/{dataset}"].append(t)
    if len(groups) >= 2:
        return list(groups.values())
    folds: list[list[Trajectory]] = [[] for _ in range(5)]
    for t in trajs:
        folds[sum(map(ord, t.key[1])) % 5].append(t)  # stable across processes
    return [f for f in folds if f]


def token_breakdown(trajs: Sequence[Trajectory]) -> dict[str, dict]:
    """Where the baseline's tokens go: by how each trajectory ended and whether it is right."""
    total = sum(t.tokens_used for t in trajs) or 1
    kinds: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        ended = {True: "finished", False: "hit the budget", None: "end not recorded"}[t.finished]
        kinds[f"{ended}, {'right' if t.final_correct else 'wrong'}"].append(t)
    return {name: {"trajectories": len(ts), "token_share": sum(t.tokens_used for t in ts) / total,
                   "mean_tokens": sum(t.tokens_used for t in ts) / len(ts)}
            for name, ts in sorted(kinds.items())}  # fmt: skip


def headline_rule(setting: str, dev: TokenWindowRule) -> TokenWindowRule | None:
    """The rule a ``--setting`` string names (``None``: the calibrated rule)."""
    return resolve_setting(setting, TOKEN_KEYS, dev, TokenWindowRule.from_setting)


def replay_probes(
    folders: Sequence[pathlib.Path],
    *,
    tolerance: float = 0.005,
    setting: str = "dev",
    grade=equivalent,
    stopping: bool = False,
    progress: Progress | None = None,
) -> dict:
    """Replay probe-run folders (see module docstring), grading answers with ``grade``.

    ``stopping``: add the early-exit section (:mod:`reasonserve.replay.stop_report`)
    under ``"stopping"``. Rows that were read but not replayed are counted in ``"skipped"``.
    ``progress(done, total, what)`` hears of each run loaded and each stage after.
    """
    rule = headline_rule(setting, DEV_SETTING)  # a bad setting fails before the runs are read
    skipped: dict[str, int] = {}
    trajs = []
    for i, folder in enumerate(folders):
        trajs += load_run(folder, grade=grade, skipped=skipped)
        if progress is not None:
            progress(i + 1, len(folders), "runs loaded")
    report = replay_trajectories(trajs, runs=[f.name for f in folders], tolerance=tolerance, headline=rule,
                                 progress=progress)  # fmt: skip
    report["skipped"] = skipped
    if stopping:
        from reasonserve.replay.stop_report import stopping_report

        report["stopping"] = stopping_report(trajs, progress=progress)
    return report


def replay_trajectories(
    trajs: Sequence[Trajectory],
    *,
    runs: Sequence[str],
    tolerance: float,
    title: str = "replay probes",
    headline: TokenWindowRule | None = DEV_SETTING,
    headline_label: str = "setting",
    progress: Progress | None = None,
) -> dict:
    """Rules, sweep, oracle, the headline setting and the cross-validated rule on ``trajs``.

    ``headline``: the fixed rule the top-level numbers describe; ``None`` puts the
    cross-validated (calibrated, out-of-sample) rule there instead.
    """
    trajs = list(trajs)
    if not trajs:
        raise InvalidArgumentError("no trajectories to replay")
    rules: list = [WindowRule(w) for w in SWEEP]
    # Presets replay at the recorded probe interval (crazy's 32-token interval cannot).
    presets = [(f"preset {n} (window {w})", WindowRule(w)) for n, (w, _) in PRESETS.items()]
    tv = [TVRule(k, e) for k in (4, 8, 16) for e in (0.1, 0.25)]
    cv = cross_validate(calibration_candidates(), evaluate, _folds(trajs), tolerance, progress)
    calibrated = cv.pooled
    chosen, chosen_in_sample = choose(calibration_candidates(), evaluate, trajs, tolerance)
    base = evaluate(WindowRule(10**9), trajs)
    sweep = [(r.name, evaluate(r, trajs)) for r in rules]
    dev = evaluate(DEV_SETTING, trajs)
    rows = [("full trajectories (baseline)", base), *[(n, evaluate(r, trajs)) for n, r in presets], *sweep,
            *[(r.name, evaluate(r, trajs)) for r in tv], ("oracle (context)", evaluate(OracleRule(), trajs)),
            ("target oracle (context)", evaluate(TargetOracleRule(), trajs)),
            (f"probes development setting ({DEV_SETTING.name}), fixed", dev),
            ("calibrated, out-of-sample", calibrated)]  # fmt: skip
    top = calibrated if headline is None else dev if headline == DEV_SETTING else evaluate(headline, trajs)
    if headline is not None and headline != DEV_SETTING:
        rows.append((f"{headline_label} ({headline.name}), fixed", top))
    return {
        **top.as_dict(),
        "setting": "calibrated, out-of-sample" if headline is None else headline.name,
        "setting_spec": "calibrated" if headline is None else headline.spec,
        "calibrated": calibrated.as_dict(),
        "tolerance": tolerance,
        "title": title,
        "runs": list(runs),
        "trajectories": len(trajs),
        "chosen_per_fold": [c.name for c in cv.choices],
        "chosen": chosen.name,  # fitted on every trajectory given: the setting to deploy
        "chosen_spec": chosen.spec,
        "chosen_in_sample": chosen_in_sample.as_dict(),
        "fold_outcomes": [o.as_dict() for o in cv.fold_outcomes],
        "rules": {name: o.as_dict() for name, o in rows},
        "token_breakdown": token_breakdown(trajs),
        "_rows": rows,
        "_sweep": sweep,
    }


def print_and_save(report: dict, *, json_path: str | None, png_path: str | None, out) -> None:
    rows = report.pop("_rows")
    sweep = report.pop("_sweep")
    out.write(_report.table(f"{report['title']}: {report['trajectories']} trajectories from "
                            f"{len(report['runs'])} runs", rows, "tokens") + "\n")  # fmt: skip
    out.write(f"calibrated choice per held-out fold: {report['chosen_per_fold']}\n")
    out.write(f"setting chosen on all {report['trajectories']} trajectories: {report['chosen']} "
              f"(--setting {report['chosen_spec']})\n")  # fmt: skip
    out.write(f"headline (top-level JSON): {report['setting']}: accuracy {report['accuracy']:.4f} vs "
              f"{report['baseline_accuracy']:.4f}, savings {100 * report['savings']:.1f}%\n")  # fmt: skip
    out.write("baseline tokens by outcome: " + "; ".join(
        f"{k}: {v['trajectories']} traj, {100 * v['token_share']:.1f}% of tokens"
        for k, v in report["token_breakdown"].items()) + "\n")  # fmt: skip
    if "skipped" in report:
        counts = ", ".join(f"{n} {k}" for k, n in report["skipped"].items())
        out.write(f"rows read but not replayed: {counts or 'none'}\n")
    if "stopping" in report:
        from reasonserve.replay.stop_report import print_stopping

        stop_png = str(pathlib.Path(png_path).with_suffix("")) + "-stopping.png" if png_path else None
        print_stopping(report["stopping"], out, stop_png)
    if json_path:
        _report.write_json(json_path, report)
    if png_path:
        marks = [(n, o) for n, o in rows if n.startswith(("full", "oracle", "calibrated", "probes dev"))
                 or n.endswith("fixed")]  # fmt: skip
        _report.plot(png_path, f"{report['title']}: accuracy vs tokens", sweep, marks, "tokens")
