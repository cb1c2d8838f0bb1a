"""Profile-table cost mode: step times fitted once from measured engine steps.

A table row is one measured engine step: the prompt tokens it prefilled, the sequences
it decoded, the KV tokens its attention read (the contexts before the step) and its
wall time. :func:`fit_profile` fits ``seconds ~ c0 + c1*prefill_tokens +
c2*decode_batch + c3*kv_tokens`` by least squares; :class:`ProfileCostModel` then times
simulated steps with the fit (a prediction below ``MIN_STEP_S`` is raised to it) and
keeps a roofline model for what the table does not measure (swap and migration copies,
KV capacity). Tables are JSON (``FORMAT``); loading validates every field and raises
:class:`~reasonserve.core.errors.InvalidArgumentError` naming the bad one.
"""

from __future__ import annotations

import json
import math
import pathlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.cost.roofline import RooflineCostModel

__all__ = ["FORMAT", "MIN_STEP_S", "ProfileCostModel", "ProfileRow", "ProfileTable", "fit_profile",
           "load_profile", "save_profile"]  # fmt: skip

FORMAT = "reasonserve-sim-profile/1"
MIN_STEP_S = 1e-6
_INTS = ("prefill_tokens", "decode_batch", "kv_tokens")


@dataclass(frozen=True, slots=True)
class ProfileRow:
    prefill_tokens: int
    decode_batch: int
    kv_tokens: int
    seconds: float

    def __post_init__(self) -> None:
        for name in _INTS:
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise InvalidArgumentError(f"profile row {name} must be an int >= 0, got {v!r}")
        s = self.seconds
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
            raise InvalidArgumentError(f"profile row seconds must be a finite number > 0, got {s!r}")
        if self.prefill_tokens + self.decode_batch == 0:
            raise InvalidArgumentError("profile row computes no tokens (prefill_tokens + decode_batch == 0)")

    def features(self) -> tuple[float, float, float, float]:
        return (1.0, float(self.prefill_tokens), float(self.decode_batch), float(self.kv_tokens))


@dataclass(frozen=True, slots=True)
class ProfileTable:
    rows: tuple[ProfileRow, ...]
    coefficients: tuple[float, float, float, float]  # s: const, per prefill token, decode, KV token
    source: str = ""

    def __post_init__(self) -> None:
        coef = self.coefficients
        finite = all(isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c)
                     for c in coef)  # fmt: skip
        if len(coef) != 4 or not finite:
            raise InvalidArgumentError(f"profile coefficients must be 4 finite numbers, got {coef!r}")

    def predict(self, prefill_tokens: int, decode_batch: int, kv_tokens: int) -> float:
        c0, c1, c2, c3 = self.coefficients
        return max(MIN_STEP_S, c0 + c1 * prefill_tokens + c2 * decode_batch + c3 * kv_tokens)

    def relative_errors(self) -> list[float]:
        """|fit - measured| / measured over the table's own rows."""
        return [abs(self.predict(r.prefill_tokens, r.decode_batch, r.kv_tokens) - r.seconds) / r.seconds
                for r in self.rows]  # fmt: skip


def fit_profile(rows: Sequence[ProfileRow], source: str = "") -> ProfileTable:
    """Least-squares fit over ``rows`` (at least 4, spanning all four features)."""
    rows = tuple(rows)
    if len(rows) < 4:
        raise InvalidArgumentError(f"a profile fit needs at least 4 rows, got {len(rows)}")
    x = np.array([r.features() for r in rows])
    y = np.array([r.seconds for r in rows])
    coef, _, rank, _ = np.linalg.lstsq(x, y, rcond=None)
    if rank < 4:
        raise InvalidArgumentError(
            "profile rows do not vary enough to fit (need steps with different prefill tokens, decode "
            "batch sizes and KV tokens)"
        )
    c0, c1, c2, c3 = (float(c) for c in coef)
    return ProfileTable(rows, (c0, c1, c2, c3), source)


def save_profile(table: ProfileTable, path: str | pathlib.Path) -> None:
    rows = [{**{n: getattr(r, n) for n in _INTS}, "seconds": r.seconds} for r in table.rows]
    data = {"format": FORMAT, "source": table.source, "coefficients": list(table.coefficients), "rows": rows}
    pathlib.Path(path).write_text(json.dumps(data, indent=1))


def load_profile(path: str | pathlib.Path) -> ProfileTable:
    try:
        data = json.loads(pathlib.Path(path).read_text())
    except (OSError, ValueError) as err:
        raise InvalidArgumentError(f"cannot read profile table {path}: {err}") from err
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InvalidArgumentError(f"{path}: not a profile table (want a JSON object with format {FORMAT!r})")
    raw_rows, coef = data.get("rows"), data.get("coefficients")
    if not isinstance(raw_rows, list) or not isinstance(coef, list):
        raise InvalidArgumentError(f"{path}: 'rows' and 'coefficients' must be lists")
    rows = []
    for i, r in enumerate(raw_rows):
        if not isinstance(r, dict) or set(r) != {*_INTS, "seconds"}:
            raise InvalidArgumentError(f"{path}: row {i} must have exactly {sorted({*_INTS, 'seconds'})}")
        rows.append(ProfileRow(**r))
    return ProfileTable(tuple(rows), tuple(coef), str(data.get("source", "")))


@dataclass(frozen=True, slots=True)
class ProfileCostModel:
    """Step times from ``table``; copies and KV capacity from the roofline ``base``."""

    table: ProfileTable
    base: RooflineCostModel

    def step_s(self, chunks: Sequence[tuple[int, int]]) -> float:
        if not chunks:
            return 0.0
        prefill = sum(t for t, _ in chunks if t > 1)
        decode = sum(1 for t, _ in chunks if t == 1)
        return self.table.predict(prefill, decode, sum(c for _, c in chunks))

    def decode_iterations_s(self, batch: int, context_sum: int, iterations: int) -> list[float]:
        return [self.table.predict(0, batch, context_sum + i * batch) for i in range(iterations)]

    def decode_iterations_exact(self, batch: int, context_sum: int, iterations: int) -> bool:
        """Always: a decode step's prediction reads only integer sums."""
        return True

    def swap_s(self, num_tokens: int) -> float:
        return self.base.swap_s(num_tokens)

    def migrate_s(self, num_tokens: int) -> float:
        return self.base.migrate_s(num_tokens)

    def kv_capacity_tokens(self, gpu_memory_utilization: float = 0.9) -> int:
        return self.base.kv_capacity_tokens(gpu_memory_utilization)
