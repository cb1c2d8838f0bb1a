"""Probe-in-the-middle consistency (Dynasor certainindex for chain-of-thought).

Every ``interval`` reasoning tokens the host probes the model for its current answer.
A probe whose text holds a hesitation marker (whole words: "wait", "hmm", "hold",
"but", "okay", "no" by default) is unconfident, and an empty answer never counts:
both are left out of the window. Over the last ``window`` counted probes,

    C_k = (1 / window) * #{ j in window : y_j == y_k }

with equality meaning answer equivalence (class ids from :class:`AnswerClasses`).
Fewer than ``window`` counted probes give a certainty below 1. The program may stop
when ``C_k >= threshold``.

Unlike the reference code, :meth:`ProbeConsistency.should_stop` never returns True
before the consistency check (its ``should_early_exit`` did; regression-tested).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from reasonserve.certainindex._validate import check_threshold
from reasonserve.certainindex.answers.equivalence import MAX_STEPS, AnswerClasses
from reasonserve.core.checks import check_int
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["HESITATION_WORDS", "PRESETS", "ProbeConsistency", "ProbeConsistencyState", "ProbeTracker"]

HESITATION_WORDS = ("wait", "hmm", "hold", "but", "okay", "no")
#: Reference presets: name -> (consistent answers needed, probe interval in tokens).
PRESETS = {"mild": (8, 64), "low": (5, 64), "mid": (3, 64), "high": (2, 64), "crazy": (2, 32)}


@dataclass
class ProbeConsistencyState:
    """The last ``window`` counted class ids of one program (incremental form)."""

    recent: deque = field(default_factory=deque)

    @property
    def certainty(self) -> float:
        return self._certainty

    _certainty: float = 0.0


@dataclass(frozen=True, slots=True)
class ProbeConsistency:
    """Window-consistency certainty over probe answers (see module docstring)."""

    window: int = 3
    threshold: float = 1.0
    hesitation_words: tuple[str, ...] = HESITATION_WORDS

    def __post_init__(self) -> None:
        check_int("window", self.window, 1)
        check_threshold("threshold", self.threshold)
        if any(not isinstance(w, str) or not w.strip() for w in self.hesitation_words):
            raise InvalidArgumentError("hesitation_words must be non-empty strings")

    @classmethod
    def preset(cls, name: str) -> ProbeConsistency:
        """A reference preset: mild, low, mid, high or crazy (threshold 1)."""
        if name not in PRESETS:
            raise InvalidArgumentError(f"preset must be one of {sorted(PRESETS)}, got {name!r}")
        return cls(window=PRESETS[name][0], threshold=1.0)

    def is_confident(self, probe_text: str | None) -> bool:
        """False when the probe text contains a hesitation marker as a whole word."""
        if not probe_text:
            return True
        words = "|".join(re.escape(w) for w in self.hesitation_words)
        return re.search(rf"\b(?:{words})\b", probe_text[:10_000], re.IGNORECASE) is None

    # incremental form -------------------------------------------------------------
    def start(self) -> ProbeConsistencyState:
        return ProbeConsistencyState(recent=deque(maxlen=self.window))

    def update(self, state: ProbeConsistencyState, class_id: int) -> float:
        """Add one probe's class id (-1 = not counted); returns the certainty. O(window)."""
        if class_id >= 0:
            state.recent.append(class_id)
            latest = state.recent[-1]
            state._certainty = sum(1 for c in state.recent if c == latest) / self.window
        return state._certainty

    def should_stop(self, certainty: float) -> bool:
        return certainty >= self.threshold

    # batch form -------------------------------------------------------------------
    def score(self, class_ids: Sequence[int]) -> float:
        """Certainty after a whole history of class ids (-1 = not counted)."""
        state = self.start()
        for c in class_ids:
            self.update(state, int(c))
        return state.certainty

    def scores(self, class_ids: torch.Tensor) -> torch.Tensor:
        """Certainty after every step, for many programs at once.

        ``class_ids [P, T]`` int (-1 = not counted) -> float ``[P, T]``; equals running
        :meth:`update` over each row.
        """
        if class_ids.dim() != 2:
            raise InvalidArgumentError(f"class_ids must be [P, T], got {tuple(class_ids.shape)}")
        p = class_ids.shape[0]
        ids = class_ids.long()
        valid = ids >= 0
        rank = valid.long().cumsum(1)  # counted probes so far, per step
        # Counted ids packed to the left (stable), padded with a value no id equals.
        order = torch.sort((~valid).long(), dim=1, stable=True).indices
        packed = torch.where(valid.gather(1, order), ids.gather(1, order), -2)
        padded = torch.cat([torch.full((p, self.window - 1), -3, dtype=torch.long), packed], 1)
        windows = padded.unfold(1, self.window, 1)  # [P, T, window]: ends at packed[r]
        matches = (windows == packed[:, :, None]).sum(-1).double() / self.window
        at_rank = matches.gather(1, (rank - 1).clamp(min=0))
        return torch.where(rank > 0, at_rank, torch.zeros_like(at_rank))


class ProbeTracker:
    """One program's probe stream from raw text: classes, confidence, certainty."""

    def __init__(self, estimator: ProbeConsistency, *, max_steps: int = MAX_STEPS) -> None:
        self.estimator = estimator
        self.classes = AnswerClasses(max_steps=max_steps)
        self.state = estimator.start()
        self.last_class = -1

    def observe(self, answer: str | None, probe_text: str | None = None) -> float:
        """Record one probe; returns the certainty after it."""
        confident = self.estimator.is_confident(probe_text)
        cid = self.classes.add(answer) if confident else -1
        if cid >= 0:
            self.last_class = cid
        return self.estimator.update(self.state, cid)

    @property
    def answer(self) -> str | None:
        """The answer of the latest counted probe (its class representative)."""
        return self.classes.representative(self.last_class) if self.last_class >= 0 else None
