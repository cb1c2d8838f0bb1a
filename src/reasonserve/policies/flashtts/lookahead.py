"""LookAhead verification grouping (FlashTTS §4.1.3).

When speculation produced a beam's whole next step before the current step is verified,
the verifier scores both in one request (current step + speculative next step as one
continuous sequence), so the KV of the shared context is read once and, if the beam is
kept, its next verification is already done. Selection still uses only the current step's
score (algorithmic equivalence); the look-ahead score is kept for the next iteration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reasonserve.core.checks import check_int
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["LookaheadVerification", "VerifyCandidate", "VerifyRequest"]


@dataclass(frozen=True, slots=True)
class VerifyCandidate:
    """A beam waiting for verification: the tokens of its current step, and the tokens of
    its speculative next step (``next_step_complete``: that step reached its end)."""

    beam_id: str
    step_tokens: int
    spec_tokens: int = 0
    next_step_complete: bool = False

    def __post_init__(self) -> None:
        for fname in ("step_tokens", "spec_tokens"):
            check_int(f"VerifyCandidate.{fname}", getattr(self, fname), 0)
        if self.next_step_complete and self.spec_tokens == 0:
            raise InvalidArgumentError(f"beam {self.beam_id!r}: a complete next step needs spec_tokens > 0")


@dataclass(frozen=True, slots=True)
class VerifyRequest:
    """One verifier request: ``num_steps`` 1 (current step) or 2 (current + look-ahead)."""

    beam_id: str
    new_tokens: int
    num_steps: int


@dataclass(frozen=True, slots=True)
class LookaheadVerification:
    enabled: bool = True
    name: str = "flashtts_lookahead"

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise InvalidArgumentError(f"enabled must be a bool, got {self.enabled!r}")

    def group(self, candidates: Sequence[VerifyCandidate]) -> list[VerifyRequest]:
        """One request per beam, in beam-id order; a beam whose speculative next step is
        complete is verified together with it when ``enabled``."""
        seen: set[str] = set()
        out = []
        for c in sorted(candidates, key=lambda c: c.beam_id):
            if c.beam_id in seen:
                raise InvalidArgumentError(f"beam {c.beam_id!r} appears twice")
            seen.add(c.beam_id)
            if self.enabled and c.next_step_complete:
                out.append(VerifyRequest(c.beam_id, c.step_tokens + c.spec_tokens, 2))
            else:
                out.append(VerifyRequest(c.beam_id, c.step_tokens, 1))
        return out
