"""Arrival times from ServeGen's DeepSeek-R1 production rate traces
(``serving_traces/servegen_deepseek_r1/chunk-<c>-trace.csv``, read at run time).

Each row is one 600-second window of one client: ``start_s, rate, cv, distribution,
p1, p2`` with the fitted inter-arrival law (``Gamma``: shape, scale; ``Weibull``:
shape, scale; empty: no traffic). Gaps are drawn from each active window's law until the
window ends, so the burstiness (cv) and the rate's changes over the day are the
trace's; idle windows are skipped. The times are then scaled so that the mean rate is
``rate_per_s`` (the trace's shape at the rate a benchmark asks for); once the trace is
used up it repeats, shifted.
"""

from __future__ import annotations

import math
import pathlib
import random
from dataclasses import dataclass, replace

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.sim.workloads.replayed import _csv_rows
from reasonserve.sim.workloads.requests import SimRequest

__all__ = ["RateWindow", "load_rate_windows", "retimed", "servegen_arrival_times"]

_WINDOW_S = 600.0
_MAX_DRAWS_PER_WINDOW = 200_000  # a degenerate law (scale ~ 0) cannot spin forever
_MAX_SHAPE = 1e6  # random.gammavariate loops forever once 2 * shape overflows; real traces stay under 20


@dataclass(frozen=True, slots=True)
class RateWindow:
    start_s: float
    law: str  # "gamma" or "weibull"
    shape: float
    scale: float

    def gap(self, rng: random.Random) -> float:
        try:
            if self.law == "gamma":
                return rng.gammavariate(self.shape, self.scale)
            return rng.weibullvariate(self.scale, self.shape)
        except OverflowError:  # a gap past any float (Weibull with a tiny shape): past the window
            return math.inf


def _positive(value: str, where: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{where}: not a number: {str(value)[:40]!r}") from None
    if not (math.isfinite(number) and number > 0):
        raise InvalidArgumentError(f"{where}: expected a finite number > 0, got {str(value)[:40]!r}")
    return number


def load_rate_windows(data_dir: str | pathlib.Path, chunk: int = 0) -> list[RateWindow]:
    """The active windows of one chunk's rate trace, in time order."""
    path = pathlib.Path(data_dir) / "serving_traces" / "servegen_deepseek_r1" / f"chunk-{chunk}-trace.csv"
    if not path.is_file():
        raise InvalidArgumentError(f"data_dir has no {path.relative_to(pathlib.Path(data_dir))}: {data_dir}")
    out = []
    with path.open("rb") as f:
        for where, row in _csv_rows(path, f, header=False):  # UTF-8, BOM dropped, bounded, typed errors
            if len(row) != 6:
                raise InvalidArgumentError(f"{where}: expected 6 fields, got {len(row)}")
            if not row[3]:
                continue  # no traffic in this window
            law = row[3].lower()
            if law not in ("gamma", "weibull"):
                raise InvalidArgumentError(f"{where}: unknown inter-arrival law {row[3][:20]!r}")
            start = _positive(row[0], where) if row[0].strip() not in ("0", "0.0") else 0.0
            shape = _positive(row[4], where)
            if shape > _MAX_SHAPE:
                raise InvalidArgumentError(f"{where}: shape above {_MAX_SHAPE:g}: {row[4][:40]!r}")
            out.append(RateWindow(start, law, shape, _positive(row[5], where)))
    if not out:
        raise InvalidArgumentError(f"{path}: no window with traffic")
    return sorted(out, key=lambda w: w.start_s)


def _raw_times(windows: list[RateWindow], n: int, rng: random.Random, name: str) -> list[float]:
    """At least ``n`` arrival times on the active windows laid end to end."""
    out: list[float] = []
    offset = 0.0
    while len(out) < n:
        before = len(out)
        for w in windows:
            t, draws = 0.0, 0
            while draws < _MAX_DRAWS_PER_WINDOW:
                t += w.gap(rng)
                draws += 1
                if t >= _WINDOW_S:
                    break
                out.append(offset + t)
            offset += _WINDOW_S
            if len(out) >= n:
                break
        if len(out) == before:
            raise InvalidArgumentError(f"{name}: the laws put no arrival inside any 600-second window")
    return out[:n]


def servegen_arrival_times(
    data_dir: str | pathlib.Path, n: int, rate_per_s: float, seed: int, *, chunk: int = 0
) -> list[float]:
    """``n`` increasing arrival times with the chunk's burstiness at mean rate ``rate_per_s``."""
    if not (isinstance(rate_per_s, (int, float)) and math.isfinite(rate_per_s) and rate_per_s > 0):
        raise InvalidArgumentError(f"rate_per_s must be a finite number > 0, got {rate_per_s!r}")
    if n < 1:
        raise InvalidArgumentError(f"n must be >= 1, got {n}")
    times = _raw_times(load_rate_windows(data_dir, chunk), n, random.Random(seed), f"chunk-{chunk}-trace.csv")
    span = times[-1] - times[0]
    if n == 1 or span <= 0:
        return [0.0] * n
    scale = (n - 1) / rate_per_s / span
    return [(t - times[0]) * scale for t in times]


def retimed(
    requests: list[SimRequest], data_dir: str | pathlib.Path, rate_per_s: float, seed: int, *, chunk: int = 0
) -> list[SimRequest]:
    """``requests`` (in arrival order) with ServeGen arrival times; requests that arrived
    together (the samples of one program) still arrive together. ``rate_per_s`` counts
    arrivals (programs)."""
    groups: list[list[SimRequest]] = []
    for r in requests:
        if groups and groups[-1][0].arrival_s == r.arrival_s:
            groups[-1].append(r)
        else:
            groups.append([r])
    if not groups:
        raise InvalidArgumentError("no requests to retime")
    times = servegen_arrival_times(data_dir, len(groups), rate_per_s, seed, chunk=chunk)
    return [replace(r, arrival_s=t) for g, t in zip(groups, times, strict=True) for r in g]
