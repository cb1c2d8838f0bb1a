"""Dynasor's inter-program scheduler (Fu et al., "Efficiently Serving LLM Reasoning
Programs with Certaindex", §4; SPEC §2.3).

* Gang scheduling: the requests of one program are ranked together, so a program's
  samples run (and finish) together instead of interleaving with other programs'.
* Approximate shortest-job-first: a program's remaining work is estimated from history,
  ``sum over its live requests of max(1, mean_tokens - generated)``, where
  ``mean_tokens`` is the mean output length of that program's finished requests (its
  per-program history), else of all finished requests, else ``prior_tokens``.
* Starvation prevention: a program that arrived more than ``starvation_bound_s`` ago is
  escalated ahead of every non-escalated program (escalated programs among themselves
  in arrival order).

Explicit state: :meth:`DynasorPolicy.step` is pure, ``(view, state) -> (decisions,
state)``; :meth:`decide` threads the state it keeps. The history is updated from the
views alone (a request that was live and is gone has finished with the output length
last seen), so deciding twice on the same view gives the same decisions.

Where the host reports programs (``SchedulerView.programs``, e.g. the simulator's program
runtime), a program's arrival is its :class:`~reasonserve.core.views.ProgramView`'s
(not its newest round's) and the estimate adds its remaining knob, the units not yet
issued (``max_knob - knob - live requests``, none once ``done``), times the mean: the
paper's "remaining knob x historical mean tokens per iteration". Without them the live
request count stands in for the remaining knob.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from reasonserve.core.decisions import Decision
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.core.views import SchedulerView
from reasonserve.policies._order import BY_ID, getter
from reasonserve.policies._programs import Programs
from reasonserve.policies._ranked import decide_programs

__all__ = ["DynasorPolicy", "DynasorState"]

_GENERATED = getter("num_output_tokens")


@dataclass(frozen=True, slots=True)
class DynasorState:
    """History: per program (finished requests, their output tokens); live requests last seen."""

    history: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    last_seen: Mapping[str, tuple[str, int]] = field(default_factory=dict)  # id -> (program, tokens)

    def mean_tokens(self, program: str, prior: float) -> float:
        if program in self.history:
            n, total = self.history[program]
            return total / n
        n = sum(c for c, _ in self.history.values())
        return sum(t for _, t in self.history.values()) / n if n else prior


def _observe(state: DynasorState, view: SchedulerView, programs: Programs) -> DynasorState:
    """Requests last seen running that are no longer live have finished: add them to their
    program's history. (Only running requests finish by generating; tracking those keeps
    this step cheap with a long waiting queue.)"""
    gone = set(state.last_seen).difference(map(BY_ID, view.running))
    if gone:  # preempted (now waiting) or finished; read the long waiting queue only then
        gone.difference_update(map(BY_ID, view.waiting))
    history = dict(state.history)
    for rid in sorted(gone):
        pid, tokens = state.last_seen[rid]
        n, total = history.get(pid, (0, 0))
        history[pid] = (n + 1, total + tokens)
    running = view.running  # the first requests of ``programs``
    pids = map(programs.keys.__getitem__, programs.codes[: len(running)].tolist())
    seen = zip(pids, map(_GENERATED, running), strict=True)
    return DynasorState(history, dict(zip(map(BY_ID, running), seen, strict=True)))


@dataclass(slots=True)
class DynasorPolicy:
    starvation_bound_s: float = 60.0
    prior_tokens: float = 1024.0
    mode: str | None = None
    name: str = "dynasor"
    state: DynasorState = field(default_factory=DynasorState)

    def __post_init__(self) -> None:
        for fname in ("starvation_bound_s", "prior_tokens"):
            value = getattr(self, fname)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InvalidArgumentError(f"{fname} must be a number > 0, got {value!r}")
        if self.mode not in (None, "recompute", "swap"):
            raise InvalidArgumentError(f"mode must be None, 'recompute' or 'swap', got {self.mode!r}")

    def program_keys(self, view: SchedulerView, state: DynasorState) -> dict[str, tuple]:
        """Per live program: (0, arrival, id) once escalated, else (1, estimated remaining
        tokens, arrival, id)."""
        programs = Programs.of_view(view)
        escalated, value, arrival = self._program_arrays(view, state, programs)
        return {
            pid: (0, float(arrival[g]), pid) if escalated[g] else (1, float(value[g]), float(arrival[g]), pid)
            for g, pid in enumerate(programs.keys)
        }

    def _program_arrays(
        self, view: SchedulerView, state: DynasorState, programs: Programs
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per program (numpy, one entry per ``programs.keys``): escalated?, its SJF value
        (remaining tokens; its arrival once escalated), its arrival. When every program is
        escalated the estimate is not computed (no request's tokens are read)."""
        arrival = programs.min_arrival.copy()
        reported = [(g, p) for p in view.programs if (g := programs.index.get(p.program_id)) is not None]
        for g, p in reported:
            arrival[g] = p.arrival_s
        escalated = view.now_s - arrival > self.starvation_bound_s
        if escalated.all():
            return escalated, arrival, arrival
        return escalated, np.where(escalated, arrival, self._remaining(state, programs, reported)), arrival

    def _remaining(self, state: DynasorState, programs: Programs, reported: list) -> np.ndarray:
        """Per program: the estimated remaining tokens (module docstring)."""
        fallback = state.mean_tokens("\x00", self.prior_tokens)  # all finished requests, or the prior
        means = np.full(len(programs.keys), fallback)
        if state.history:
            for pid in state.history.keys() & programs.index.keys():
                means[programs.index[pid]] = state.mean_tokens(pid, self.prior_tokens)
        extra = np.zeros(len(programs.keys))
        for g, p in reported:
            if not p.done:
                extra[g] = max(0, p.max_knob - p.knob - len(p.request_ids)) * means[g]
        codes = programs.codes
        generated = programs.column("num_output_tokens").astype(np.float64)
        left = np.maximum(1.0, means[codes] - generated)
        return np.bincount(codes, weights=left, minlength=len(programs.keys)) + extra

    def step(self, view: SchedulerView, state: DynasorState) -> tuple[list[Decision], DynasorState]:
        programs = Programs.of_view(view)
        state = _observe(state, view, programs)
        escalated, value, arrival = self._program_arrays(view, state, programs)
        order = programs.order(~escalated, value, arrival)
        return decide_programs(view, programs, order, self.mode), state

    def decide(self, view: SchedulerView) -> Sequence[Decision]:
        decisions, self.state = self.step(view, self.state)
        return decisions
