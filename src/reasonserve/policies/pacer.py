"""Token pacer and QoE (Andes, Liu et al. 2024; used by PASCAL §II-C and §V-A).

The pacer releases a request's answer tokens to the user at most one per ``tpot_s``:
tokens generated in a burst wait in a buffer, so a request that is paused (preempted)
still looks smooth while its buffer lasts. QoE compares the user's digested-token curve
with the expected one (a token every ``tpot_s`` from the first answer token, PASCAL's
TPOT-only variant): the ratio of the areas under the two curves, in (0, 1].
:meth:`TokenPacer.released_until` is the pacer's state a scheduler reads (when the user
will have read what was generated); :meth:`TokenPacer.starving` is PASCAL's per-request
SLO check for Algorithm 1's ``t_i``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["TokenPacer"]


@dataclass(frozen=True, slots=True)
class TokenPacer:
    tpot_s: float = 0.1  # PASCAL's TPOT target (100 ms)

    def __post_init__(self) -> None:
        if isinstance(self.tpot_s, bool) or not isinstance(self.tpot_s, (int, float)) or not self.tpot_s > 0:
            raise InvalidArgumentError(f"tpot_s must be a number > 0, got {self.tpot_s!r}")

    def digested(self, generated_s: Sequence[float]) -> list[float]:
        """When the user reads each token: d_k = max(g_k, d_(k-1) + tpot)."""
        out: list[float] = []
        last = float("-inf")
        for g in generated_s:
            last = max(g, last + self.tpot_s)
            out.append(last)
        return out

    def released_until(self, generated_s: Sequence[float], since: float | None = None) -> float | None:
        """When the user has read the last of ``generated_s`` (the last digest time), or
        None for no tokens. ``since``: the digest time of the tokens before these, so a
        host can carry it forward as tokens arrive instead of re-reading them all."""
        tokens = iter(generated_s)
        last = next(tokens, None) if since is None else since
        if last is None:  # no tokens
            return None
        tpot = self.tpot_s
        for g in tokens:  # max(g, last + tpot) as max() picks it, without a call per token
            paced = last + tpot
            last = paced if paced > g else g
        return last

    def starving(self, released_until_s: float, now_s: float) -> bool:
        """The pacer's buffer ran dry: the user has read every token generated so far and
        the next one is overdue by the pace (PASCAL Algorithm 1's "insufficient remaining
        tokens"; the user's timeline stays shifted by earlier stalls, so a request that
        stalled once is fine again once it runs ahead of the reader)."""
        return now_s >= released_until_s + self.tpot_s

    def buffered(self, generated_s: Sequence[float], now_s: float) -> int:
        """Tokens generated but not yet read at ``now_s`` (0: the user is starving or caught up)."""
        return sum(1 for g, d in zip(generated_s, self.digested(generated_s), strict=True) if g <= now_s < d)

    def behind(self, first_s: float, num_generated: int, now_s: float) -> bool:
        """True when generation lags the expected curve: fewer tokens than one per ``tpot_s``
        since the first answer token (stays True after any stall; :meth:`starving` reads
        the pacer's buffer instead)."""
        expected = 1 + int((now_s - first_s) / self.tpot_s)
        return num_generated < expected

    def qoe(self, generated_s: Sequence[float]) -> float:
        """Area under the digested curve over area under the expected one (1.0 for <= 1 token)."""
        if len(generated_s) <= 1:
            return 1.0
        digested = self.digested(generated_s)
        expected = [generated_s[0] + k * self.tpot_s for k in range(len(generated_s))]
        horizon = max(digested[-1], expected[-1])
        want = sum(horizon - e for e in expected)
        return sum(horizon - d for d in digested) / want if want > 0 else 1.0
