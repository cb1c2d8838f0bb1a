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

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError

__all__ = ["SelectSpec", "SpecSlot"]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class SpecSlot:
    """One speculative branch: ``branch`` 0 continues the beam itself, ``k >= 1`` its k-th
    duplicate; ``potential`` is the beam's ``M_i``."""

    beam_id: str
    branch: int
    potential: int


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
        try:  # one C-level pass; the slow loop below only names the culprit
            ok = math.isfinite(math.fsum(scores.values()))
        except (TypeError, OverflowError):
            ok = False
        if not ok:
            for beam_id, s in scores.items():
                if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
                    raise InvalidArgumentError(
                        f"score of beam {beam_id!r} must be a finite number, got {s!r}"
                    )
            raise InvalidArgumentError("scores are too large to rank (their sum overflows)")
        ranked = sorted(scores.items())  # by beam id, then (stable) by score, best first
        ranked.sort(key=itemgetter(1), reverse=True)
        n, out = len(ranked), {}
        last_score, last_bin = None, 1
        for rank, (beam_id, s) in enumerate(ranked):
            j = last_bin if s == last_score else rank * self.branching // n + 1
            out[beam_id], last_score, last_bin = j, s, j
        return out

    def potentials(self, scores: Mapping[str, float]) -> dict[str, int]:
        """``M_i = B - j + 1`` for every beam."""
        return {b: self.branching - j + 1 for b, j in self.bins(scores).items()}

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
        bad = [(b, m) for b, m in potentials.items() if not _is_int(m) or not 1 <= m <= self.branching]
        if bad:
            raise InvalidArgumentError(f"potentials must be ints in [1, {self.branching}], got {bad[0]}")
        used = used or {}
        buckets: dict[int, list[str]] = {}
        for b in set(finished):
            buckets.setdefault(potentials.get(b, 1), []).append(b)
        slots: list[SpecSlot] = []
        for m in sorted(buckets, reverse=True):  # highest M_i first, ties by beam id
            for b in sorted(buckets[m]):
                for branch in range(used.get(b, 0), m):
                    if len(slots) == free_slots:
                        return slots
                    slots.append(SpecSlot(b, branch, m))
        return slots

    def kept_tokens(self, num_spec_tokens: int, branch: int, rng: random.Random) -> int:
        """Speculative tokens kept by copy ``branch`` of a selected beam (0: the original,
        keeps all); ``rng`` is the caller's seeded generator."""
        if not _is_int(num_spec_tokens) or num_spec_tokens < 0:
            raise InvalidArgumentError(f"num_spec_tokens must be an int >= 0, got {num_spec_tokens!r}")
        if branch == 0:
            return num_spec_tokens
        fraction = min(1.0, max(0.0, rng.gauss(self.truncation_mean, self.truncation_std)))
        return int(num_spec_tokens * fraction)
