"""A PNG of one simulation (``reasonserve sim --png``): the TTFT CDF, PASCAL's tail TTFT
per 256-token reasoning-length bin, and the QoE CDF with the answering SLO marked.
matplotlib is optional: without it the plot is skipped and the caller says so."""

from __future__ import annotations

import pathlib

from reasonserve.policies.pacer import TokenPacer
from reasonserve.sim.cluster.result import SimResult
from reasonserve.sim.metrics import request_metrics, tail_ttft_by_bin

__all__ = ["write_png"]


def _cdf(ax, values: list[float], label: str) -> None:
    ordered = sorted(values)
    n = len(ordered)
    ax.plot(ordered, [(i + 1) / n for i in range(n)], label=label)


def write_png(result: SimResult, path: str | pathlib.Path, title: str) -> bool:
    """Write the three panels to ``path``; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    cfg = result.config
    rows = [request_metrics(s, TokenPacer(cfg.tpot_slo_s)) for s in result.sequences]
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(14, 4))
    _cdf(a, [r["ttft_s"] for r in rows], result.policy)
    a.set_xlabel("TTFT to the first answer token, s")
    a.set_ylabel("fraction of requests")
    bins = tail_ttft_by_bin(rows)
    b.plot(list(bins), list(bins.values()), "o-", label=result.policy)
    b.set_xlabel("reasoning tokens (256-token bins)")
    b.set_ylabel("tail TTFT, s (PASCAL's rule)")
    _cdf(c, [r["qoe"] for r in rows], result.policy)
    c.axvline(cfg.qoe_slo, color="gray", linestyle="--", label=f"SLO {cfg.qoe_slo}")
    c.set_xlabel("QoE of the answering phase")
    for ax in (a, b, c):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
