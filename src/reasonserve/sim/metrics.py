"""The engine's metrics, computed from a simulation: TTFT (to the first *answer* token,
PASCAL's definition for reasoning models), TTFAT, TPOT, QoE, SLO attainment, throughput,
and PASCAL's tail TTFT by 256-token reasoning-length bins."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from reasonserve.policies.pacer import TokenPacer
from reasonserve.sim.cluster.result import SimResult
from reasonserve.sim.cluster.sequence import SimSequence

__all__ = ["percentile", "request_metrics", "summarize", "tail_ttft_by_bin"]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty sequence."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def request_metrics(s: SimSequence, pacer: TokenPacer) -> dict:
    finished = s.finished_s if s.finished_s is not None else math.nan  # set for every finished request
    first_answer = s.answer_times[0] if s.answer_times else finished
    start = s.end_of_thinking_s if s.end_of_thinking_s is not None else s.req.arrival_s
    n = len(s.answer_times)
    return {
        "request_id": s.req.request_id,
        "reasoning_tokens": s.req.reasoning_tokens,
        "answer_tokens": s.req.answer_tokens,
        "ttft_s": first_answer - s.req.arrival_s,
        "ttfat_s": first_answer - start,
        "tpot_s": (s.answer_times[-1] - s.answer_times[0]) / (n - 1) if n > 1 else 0.0,
        "qoe": pacer.qoe(s.answer_times),
        "e2e_s": finished - s.req.arrival_s,
        "preemptions": s.num_preemptions,
    }


def tail_ttft_by_bin(rows: Sequence[dict], bin_tokens: int = 256) -> dict[int, float]:
    """PASCAL §V-B's tail rule per reasoning-length bin: max below 10 samples, P90 below
    20, P95 below 100, else P99; bins with fewer than 5 samples are left out."""
    bins: dict[int, list[float]] = {}
    for r in rows:
        bins.setdefault(r["reasoning_tokens"] // bin_tokens * bin_tokens, []).append(r["ttft_s"])
    out = {}
    for start, ttfts in sorted(bins.items()):
        n = len(ttfts)
        if n >= 5:
            out[start] = max(ttfts) if n < 10 else percentile(ttfts, 90 if n < 20 else 95 if n < 100 else 99)
    return out


def summarize(result: SimResult) -> dict:
    cfg = result.config
    pacer = TokenPacer(cfg.tpot_slo_s)
    rows = [request_metrics(s, pacer) for s in result.sequences]
    ttft = [r["ttft_s"] for r in rows]
    first = min(s.req.arrival_s for s in result.sequences)
    tokens = sum(s.req.output_tokens for s in result.sequences)
    return {
        "policy": result.policy,
        "router": result.router,
        "num_requests": len(rows),
        "ttft_s": {
            "mean": statistics.fmean(ttft),
            "p50": percentile(ttft, 50),
            "p90": percentile(ttft, 90),
            "p99": percentile(ttft, 99),
            "max": max(ttft),
        },
        "tail_ttft_by_bin_s": tail_ttft_by_bin(rows),
        "ttfat_attainment": sum(r["ttfat_s"] <= cfg.ttfat_slo_s for r in rows) / len(rows),
        "slo_violation_rate": sum(r["qoe"] < cfg.qoe_slo for r in rows) / len(rows),
        "mean_qoe": statistics.fmean(r["qoe"] for r in rows),
        "mean_tpot_s": statistics.fmean(r["tpot_s"] for r in rows),
        "throughput_tokens_s": tokens / (result.end_s - first) if result.end_s > first else 0.0,
        "makespan_s": result.end_s - first,
        "preemptions": sum(r["preemptions"] for r in rows),
        "migrations": len(result.migrations),
        "steps": result.steps,
    }
