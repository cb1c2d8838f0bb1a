"""Allocation for one program (Dynasor intra-program scheduling, SPEC 2.2).

Each step a program asks for more compute (one more sample, iteration, probe
interval) and reports its certainty; a policy grants or denies. Denied programs
aggregate and return. ``knob`` counts the program's units of compute so far (samples,
iterations, or probe intervals of tokens).

* :class:`ThresholdPolicy` — deny once the certainty read at ``detect_at`` knob (and
  every ``recheck_every`` knob after it) reaches ``threshold``; always deny at
  ``max_knob``.
* :class:`ParetoCapPolicy` — a fitted :class:`ParetoCurve` maps the certainty read at a
  check to the most compute still worth spending after ``detect_at``; deny once that is
  spent. High certainty, small cap; low certainty, larger cap — up to ``max_knob``.
* :class:`EvenPolicy` (baseline-even) — the same cap for everyone.
* :class:`LengthPolicy` (baseline-length) — deny at a check when the program's
  reasoning is already at least ``max_tokens`` long.

Policies are pure: ``grant(status) -> bool`` over an immutable :class:`ProgramStatus`.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from reasonserve.certainindex._validate import check_threshold
from reasonserve.core.checks import check_int
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["EvenPolicy", "LengthPolicy", "ParetoCapPolicy", "ParetoCurve", "ProgramStatus", "ThresholdPolicy"]


@dataclass(frozen=True, slots=True)
class ProgramStatus:
    knob: int  # compute units used so far
    certainty: float
    tokens: int = 0  # reasoning tokens so far (for the length baseline)

    def __post_init__(self) -> None:
        if not isinstance(self.knob, int) or self.knob < 0:
            raise InvalidArgumentError(f"knob must be an int >= 0, got {self.knob!r}")
        if not isinstance(self.tokens, int) or self.tokens < 0:
            raise InvalidArgumentError(f"tokens must be an int >= 0, got {self.tokens!r}")


def _is_check(knob: int, detect_at: int, every: int) -> bool:
    return knob >= detect_at and (knob - detect_at) % every == 0


def _check_schedule(detect_at: int, recheck_every: int, max_knob: int) -> None:
    check_int("detect_at", detect_at, 1)
    check_int("recheck_every", recheck_every, 1)
    check_int("max_knob", max_knob, 1)


def _certainty(status: ProgramStatus) -> float:
    """NaN certainty reads as 0: an unknown answer is not a settled one."""
    return 0.0 if math.isnan(status.certainty) else status.certainty


@dataclass(frozen=True, slots=True)
class ThresholdPolicy:
    threshold: float
    detect_at: int = 1
    recheck_every: int = 1
    max_knob: int = 2**31 - 1

    def __post_init__(self) -> None:
        check_threshold("threshold", self.threshold)
        _check_schedule(self.detect_at, self.recheck_every, self.max_knob)

    def grant(self, status: ProgramStatus) -> bool:
        if status.knob >= self.max_knob:
            return False
        checking = _is_check(status.knob, self.detect_at, self.recheck_every)
        return not (checking and _certainty(status) >= self.threshold)


@dataclass(frozen=True, slots=True)
class ParetoCurve:
    """Non-increasing step function: certainty -> compute still allowed after detection."""

    edges: tuple[float, ...]  # ascending bin lower edges in [0, 1]
    budgets: tuple[int, ...]  # one per bin, non-increasing

    def __post_init__(self) -> None:
        if not self.edges or len(self.edges) != len(self.budgets):
            raise InvalidArgumentError("edges and budgets must be non-empty and of one length")
        if list(self.edges) != sorted(self.edges) or any(b < 0 for b in self.budgets):
            raise InvalidArgumentError("edges must ascend and budgets be >= 0")
        if any(a < b for a, b in zip(self.budgets, self.budgets[1:], strict=False)):
            raise InvalidArgumentError("budgets must not increase with certainty")

    def __call__(self, certainty: float) -> int:
        i = max(0, bisect.bisect_right(self.edges, max(0.0, min(1.0, certainty))) - 1)
        return self.budgets[i]

    @classmethod
    def fit(cls, certainties: Sequence[float], needed: Sequence[float], *, quantile: float = 0.9,
            bins: int = 10, max_budget: int = 2**31 - 1) -> ParetoCurve:  # fmt: skip
        """Fit on calibration programs: their certainty at detection and the compute they
        still needed (``inf`` when more compute never helped). Each certainty bin gets the
        ``quantile`` of the finite needs in it; then budgets are made non-increasing
        (a more certain program never gets more). Empty bins inherit from the right."""
        if len(certainties) != len(needed) or not certainties:
            raise InvalidArgumentError("certainties and needed must be non-empty and of one length")
        check_threshold("quantile", quantile)
        check_int("bins", bins, 1)
        edges = tuple(i / bins for i in range(bins))
        per_bin: list[list[float]] = [[] for _ in range(bins)]
        for c, n in zip(certainties, needed, strict=True):
            if math.isfinite(n) and n >= 0 and not math.isnan(c):
                per_bin[min(bins - 1, int(max(0.0, min(1.0, c)) * bins))].append(n)
        raw: list[int | None] = []
        for values in per_bin:
            values.sort()
            q = values[int(quantile * (len(values) - 1))] if values else None
            raw.append(None if q is None else min(max_budget, math.ceil(q)))
        budgets, running = [], 0
        for value in reversed(raw):
            running = max(running, value if value is not None else running)
            budgets.append(running)
        return cls(edges, tuple(reversed(budgets)))


@dataclass(frozen=True, slots=True)
class ParetoCapPolicy:
    curve: ParetoCurve
    detect_at: int = 1
    recheck_every: int = 1
    max_knob: int = 2**31 - 1

    def __post_init__(self) -> None:
        _check_schedule(self.detect_at, self.recheck_every, self.max_knob)

    def grant(self, status: ProgramStatus) -> bool:
        if status.knob >= self.max_knob:
            return False
        if not _is_check(status.knob, self.detect_at, self.recheck_every):
            return True
        return status.knob - self.detect_at < self.curve(_certainty(status))


@dataclass(frozen=True, slots=True)
class EvenPolicy:
    cap: int

    def __post_init__(self) -> None:
        check_int("cap", self.cap, 1)

    def grant(self, status: ProgramStatus) -> bool:
        return status.knob < self.cap


@dataclass(frozen=True, slots=True)
class LengthPolicy:
    max_tokens: int
    detect_at: int = 1
    recheck_every: int = 1

    def __post_init__(self) -> None:
        check_int("max_tokens", self.max_tokens, 1)
        check_int("detect_at", self.detect_at, 1)
        check_int("recheck_every", self.recheck_every, 1)

    def grant(self, status: ProgramStatus) -> bool:
        checking = _is_check(status.knob, self.detect_at, self.recheck_every)
        return not (checking and status.tokens >= self.max_tokens)
