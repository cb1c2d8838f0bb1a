"""SelectSpec: which finished beams get speculative slots, and how much of their speculative
work their duplicates keep (FlashTTS §4.1.1, Algorithm 1).

While stragglers of a search step still decode, beams that finished their step may keep
generating their next step speculatively. The previous-step verifier scores rank them: the
scores are split into ``B`` bins ``C_1..C_B`` (``B`` = the search's branching factor, ``C_1``
the best), and a beam in bin ``C_j`` has speculative potential ``M_i = B - j + 1``: at most
that many speculative branches, and that priority. Freed slots go to the highest ``M_i``
first; ties by beam id.

The paper does not say how the bins are cut. PRM scores cluster near 1, so equal-width bins
would put almost every beam in ``C_1``; we cut equal-count bins by rank (best first), and
equal scores always share a bin (the bin of the best-ranked among them).

After selection (Algorithm 1, lines 18-19) the original of a speculated beam keeps all its
speculative tokens; each duplicate keeps a prefix whose fraction is drawn from
``Normal(R, sigma)`` clipped to [0, 1] (``R = 0.85`` was best in the paper's Fig. 16;
``sigma`` is not given there: 0.1 here).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter

import numpy as np

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError

__all__ = ["SelectSpec", "SpecSlot"]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite_number(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond float range
        return False


@dataclass(frozen=True, slots=True)
class SpecSlot:
    """One speculative branch: ``branch`` 0 continues the beam itself, ``k >= 1`` its k-th
    duplicate; ``potential`` is the beam's ``M_i``."""

    beam_id: str
    branch: int
    potential: int


def _marks(beams: list[str], potentials: Mapping[str, int]) -> np.ndarray:
    """The potential of each beam (1 without one), in one C-level look-up pass (a plain dict
    only: ``get`` never calls a subclass's ``__missing__``, ``[]`` would)."""
    if len(beams) > 1 and type(potentials) is dict:
        try:
            return np.array(itemgetter(*beams)(potentials), dtype=np.int64)
        except KeyError:  # a beam without a potential: the default, beam by beam
            pass
    return np.fromiter(map(potentials.get, beams, repeat(1)), dtype=np.int64, count=len(beams))


def _smallest_unique(k: int, ids: list[str]) -> list[str]:
    """The ``k`` smallest distinct ids, ascending (a beam listed twice ranks once; all copies
    of an id share its bucket). If the ``k`` smallest of the list are distinct, they are."""
    head = heapq.nsmallest(k, ids)
    return head if len(set(head)) == len(head) else heapq.nsmallest(k, set(ids))


@dataclass(frozen=True, slots=True)
class SelectSpec:
    branching: int = 4  # B, the search's branching factor (search-and-learn's default beam width)
    truncation_mean: float = 0.85  # R
    truncation_std: float = 0.1
    name: str = "flashtts_selectspec"

    def __post_init__(self) -> None:
        if not _is_int(self.branching) or self.branching < 1:
            raise InvalidArgumentError(f"branching must be an int >= 1, got {self.branching!r}")
        for fname in ("truncation_mean", "truncation_std"):
            value = getattr(self, fname)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InvalidArgumentError(f"{fname} must be a finite number, got {value!r}")
        if not 0 <= self.truncation_mean <= 1:
            raise InvalidArgumentError(f"truncation_mean must be in [0, 1], got {self.truncation_mean!r}")
        if self.truncation_std < 0:
            raise InvalidArgumentError(f"truncation_std must be >= 0, got {self.truncation_std!r}")

    def bins(self, scores: Mapping[str, float]) -> dict[str, int]:
        """Bin index ``j`` in 1..B of every beam (1 = best): equal-count bins by rank, equal
        scores share the bin of the best-ranked among them."""
        return dict(zip(scores, self._bin_array(scores).tolist(), strict=True))

    def potentials(self, scores: Mapping[str, float]) -> dict[str, int]:
        """``M_i = B - j + 1`` for every beam."""
        return dict(zip(scores, (self.branching + 1 - self._bin_array(scores)).tolist(), strict=True))

    def _bin_array(self, scores: Mapping[str, float]) -> np.ndarray:
        """Bins in the order of ``scores``. A beam's bin is that of the best-ranked beam with
        its score, whose rank is the number of strictly better scores: no id tie-break is
        needed, one numpy sort is."""
        try:  # C-level passes; the loop below only names the culprit
            values = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
            ok = set(map(type, scores.values())) <= {float, int} and bool(np.isfinite(values).all())
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            for beam_id, v in scores.items():
                if not _finite_number(v):
                    shown = "an int beyond float range" if _is_int(v) and abs(v) > 2**1024 else repr(v)[:40]
                    raise InvalidArgumentError(f"score of beam {beam_id!r} must be a finite number: {shown}")
        better = len(values) - np.searchsorted(np.sort(values), values, side="right")
        return better * self.branching // max(len(values), 1) + 1

    def rank(
        self, finished: Sequence[str], potentials: Mapping[str, int], free_slots: int,
        used: Mapping[str, int] | None = None,
    ) -> list[SpecSlot]:  # fmt: skip
        """Up to ``free_slots`` speculative branches for ``finished`` beams, highest ``M_i``
        first (ties by beam id), at most ``M_i`` branches per beam counting the ``used`` ones.
        A beam without a potential (no previous score: the first step) gets ``M_i = 1``."""
        if not _is_int(free_slots) or free_slots < 0:
            raise InvalidArgumentError(f"free_slots must be an int >= 0, got {free_slots!r}")
        if isinstance(finished, str):  # a bare id would rank each of its characters
            raise InvalidTypeError(f"finished must be a sequence of beam ids, got the str {finished[:80]!r}")
        self._check_potentials(potentials)
        used = used or {}
        beams = finished if isinstance(finished, list) else list(finished)
        marks = _marks(beams, potentials)
        counts = np.bincount(marks, minlength=self.branching + 1).tolist()
        slots: list[SpecSlot] = []
        for m in range(self.branching, 0, -1):  # highest M_i first, ties by beam id
            if not counts[m] or len(slots) == free_slots:
                continue
            bucket = list(map(beams.__getitem__, np.flatnonzero(marks == m).tolist()))
            # without ``used`` every beam yields m branches: the first ceil(left / m) suffice
            need = -(-(free_slots - len(slots)) // m)
            bucket = sorted(set(bucket)) if used else _smallest_unique(need, bucket)
            for b in bucket:
                for branch in range(used.get(b, 0), m):
                    if len(slots) == free_slots:
                        return slots
                    slots.append(SpecSlot(b, branch, m))
        return slots

    def _check_potentials(self, potentials: Mapping[str, int]) -> None:
        values = potentials.values()
        if not values:
            return
        if set(map(type, values)) == {int}:  # exact ints: equal values are the same value
            distinct = set(values)
            if min(distinct) >= 1 and max(distinct) <= self.branching:
                return  # C-level passes; the loop below only names the culprit
        bad = [(b, m) for b, m in potentials.items() if not _is_int(m) or not 1 <= m <= self.branching]
        raise InvalidArgumentError(f"potentials must be ints in [1, {self.branching}], got {bad[0]}")

    def kept_tokens(self, num_spec_tokens: int, branch: int, rng: random.Random) -> int:
        """Speculative tokens kept by copy ``branch`` of a selected beam (0: the original,
        keeps all); ``rng`` is the caller's seeded generator."""
        if not _is_int(num_spec_tokens) or num_spec_tokens < 0:
            raise InvalidArgumentError(f"num_spec_tokens must be an int >= 0, got {num_spec_tokens!r}")
        if branch == 0:
            return num_spec_tokens
        fraction = min(1.0, max(0.0, rng.gauss(self.truncation_mean, self.truncation_std)))
        return int(num_spec_tokens * fraction)
