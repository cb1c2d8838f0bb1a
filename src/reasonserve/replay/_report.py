"""Printing and saving replay reports: a table, JSON and an accuracy-vs-cost PNG."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence

from reasonserve.certainindex.calibration import Outcome


def table(title: str, rows: Sequence[tuple[str, Outcome]], cost_unit: str) -> str:
    width = max([34, *(len(name) for name, _ in rows)])
    header = f"{'rule':<{width}} {'accuracy':>9} {'d acc (pt)':>10} {'mean ' + cost_unit:>14} {'savings':>8}"
    lines = [title, header]
    for name, o in rows:
        lines.append(f"{name:<{width}} {o.accuracy:>9.4f} {-100 * o.accuracy_loss:>+10.2f} "
                     f"{o.cost / max(o.n, 1):>14.1f} {o.savings:>8.1%}")  # fmt: skip
    return "\n".join(lines)


def write_json(path: str | pathlib.Path, payload: dict) -> None:
    pathlib.Path(path).write_text(json.dumps(payload, indent=2, default=str))


def plot(path: str | pathlib.Path, title: str, curve: Sequence[tuple[str, Outcome]],
         marks: Sequence[tuple[str, Outcome]], cost_unit: str) -> bool:  # fmt: skip
    """Accuracy vs mean cost: ``curve`` as a line, ``marks`` as labelled points."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if curve:
        xs = [o.cost / max(o.n, 1) for _, o in curve]
        ax.plot(xs, [o.accuracy for _, o in curve], "o-", label="sweep", color="tab:blue")
    for name, o in marks:
        ax.scatter([o.cost / max(o.n, 1)], [o.accuracy], zorder=3)
        ax.annotate(name, (o.cost / max(o.n, 1), o.accuracy), fontsize=8, xytext=(4, 4),
                    textcoords="offset points")  # fmt: skip
    ax.set_xlabel(f"mean {cost_unit} per program")
    ax.set_ylabel("accuracy")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def plot_savings(path: str | pathlib.Path, title: str, curves: dict[str, Sequence[tuple[str, Outcome]]],
                 marks: Sequence[tuple[str, Outcome]]) -> bool:  # fmt: skip
    """Accuracy change (points) vs savings: one line per curve, ``marks`` as labelled points."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, points in curves.items():
        xs, ys = [100 * o.savings for _, o in points], [-100 * o.accuracy_loss for _, o in points]
        ax.plot(xs, ys, ".-", label=name)
    for name, o in marks:
        ax.scatter([100 * o.savings], [-100 * o.accuracy_loss], zorder=3, s=14)
        ax.annotate(name, (100 * o.savings, -100 * o.accuracy_loss), fontsize=6, xytext=(3, 3),
                    textcoords="offset points")  # fmt: skip
    ax.axhline(-0.5, color="grey", lw=0.8, ls="--")
    ax.axvline(30, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("reasoning-token savings (%)")
    ax.set_ylabel("accuracy change (points)")
    ax.set_ylim(-6, 1)
    ax.set_xlim(0, 60)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def print_calibration(report: dict, kind: str, out) -> None:
    """``reasonserve calibrate``: the setting chosen on everything, and how choosing holds up
    out of sample (each fold's setting chosen without that fold)."""
    unit = "trajectories" if "trajectories" in report else "questions"
    held = report["calibrated"]
    tolerance = 100 * report["tolerance"]
    out.write(f"calibrate {kind}: {report[unit]} {unit}, tolerance {tolerance:.2f} accuracy points\n")
    out.write(f"setting chosen on all of them: {report['chosen']}\n")
    out.write(f"  use it with: reasonserve replay {kind} --setting {report['chosen_spec']}\n")
    out.write(f"choice per held-out fold: {report['chosen_per_fold']}\n")
    out.write(f"out of sample (each fold replayed with the setting chosen without it): accuracy "
              f"{held['accuracy']:.4f} vs {held['baseline_accuracy']:.4f}, "
              f"savings {100 * held['savings']:.1f}%\n")  # fmt: skip
