"""Program-level metrics (Dynasor's online protocol, SPEC 2.4): a program's deadline is
``SLO scale x difficulty factor x base deadline``; deadline attainment is the share of
programs finished by their deadline; the P90 SLO scale is the tightest scale at which
90% of programs meet theirs. Finish-time fairness (Dynasor §5.3.1) is
``phi = T_shared / #output tokens``: a program's latency in the shared system per token it
generated (lower is fairer; compare its spread across programs and policies). Rows are
:func:`reasonserve.programs.recorded.run_recorded_sc`'s per-program dicts."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["attainment", "finish_time_fairness", "p90_scale", "program_summary", "required_scales"]


def required_scales(rows: Sequence[dict], base_deadline_s: float) -> list[float]:
    """Per program, the smallest SLO scale whose deadline it meets (inf if unfinished)."""
    if not base_deadline_s > 0:
        raise InvalidArgumentError(f"base_deadline_s must be > 0, got {base_deadline_s!r}")
    return [math.inf if r["latency_s"] is None else r["latency_s"] / (r["difficulty"] * base_deadline_s)
            for r in rows]  # fmt: skip


def attainment(rows: Sequence[dict], scale: float, base_deadline_s: float) -> float:
    """Share of programs that finished within ``scale x difficulty x base_deadline_s``."""
    need = required_scales(rows, base_deadline_s)
    return sum(s <= scale for s in need) / len(need) if need else 0.0


def p90_scale(rows: Sequence[dict], base_deadline_s: float) -> float:
    """The tightest SLO scale at which 90% of programs meet their deadline (nearest rank)."""
    need = sorted(required_scales(rows, base_deadline_s))
    if not need:
        raise InvalidArgumentError("no programs")
    return need[max(0, math.ceil(0.9 * len(need)) - 1)]


def finish_time_fairness(rows: Sequence[dict]) -> list[float]:
    """Per program, ``phi = latency_s / tokens`` (seconds per output token); ``inf`` for a
    program that did not finish, or finished without generating a token."""
    return [math.inf if r["latency_s"] is None or r["tokens"] <= 0 else r["latency_s"] / r["tokens"]
            for r in rows]  # fmt: skip


def program_summary(rows: Sequence[dict], base_deadline_s: float, scales: Sequence[float]) -> dict:
    """Attainment per scale, P90 scale, latency, finish-time fairness (phi: P50, P90 and
    max over programs), compute used, early stops and accuracy."""
    if not rows:
        raise InvalidArgumentError("no programs")
    lat = sorted(math.inf if r["latency_s"] is None else r["latency_s"] for r in rows)
    phi = sorted(finish_time_fairness(rows))
    return {"programs": len(rows),
            "attainment": {str(s): attainment(rows, s, base_deadline_s) for s in scales},
            "p90_scale": p90_scale(rows, base_deadline_s),
            "latency_p50_s": lat[len(lat) // 2], "latency_mean_s": statistics.fmean(lat),
            "phi_s_per_token": {"p50": phi[len(phi) // 2], "p90": phi[max(0, math.ceil(0.9 * len(phi)) - 1)],
                                "max": phi[-1]},
            "tokens_per_program": statistics.fmean(r["tokens"] for r in rows),
            "samples_per_program": statistics.fmean(r["samples"] for r in rows),
            "stopped_early": statistics.fmean(r["stopped_early"] for r in rows),
            "accuracy": statistics.fmean(r["correct"] for r in rows)}  # fmt: skip
