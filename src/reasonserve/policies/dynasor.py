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
from operator import attrgetter

from reasonserve.core.decisions import Decision
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies._programs import program_of
from reasonserve.policies._ranked import decide_ranked

__all__ = ["DynasorPolicy", "DynasorState"]


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


def _observe(state: DynasorState, view: SchedulerView) -> DynasorState:
    """Requests last seen running that are no longer live have finished: add them to their
    program's history. (Only running requests finish by generating; tracking those keeps
    this step cheap with a long waiting queue.)"""
    live = {r.request_id for r in view.waiting}
    live.update(r.request_id for r in view.running)
    history = dict(state.history)
    for rid in sorted(set(state.last_seen) - live):
        pid, tokens = state.last_seen[rid]
        n, total = history.get(pid, (0, 0))
        history[pid] = (n + 1, total + tokens)
    return DynasorState(history, {r.request_id: (program_of(r), r.num_output_tokens) for r in view.running})


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
        return {pid: key for pid, (key, _) in self._programs(view, state).items()}

    def _programs(self, view: SchedulerView, state: DynasorState) -> dict[str, tuple[tuple, list]]:
        members: dict[str, list[RequestView]] = {}
        for r in view.running + view.waiting:
            members.setdefault(
                r.program_id if r.program_id is not None else "\x00" + r.request_id, []
            ).append(r)
        fallback = state.mean_tokens("\x00", self.prior_tokens)  # all finished requests, or the prior
        info = {p.program_id: p for p in view.programs}
        out = {}
        for pid, reqs in members.items():
            p = info.get(pid)
            arrival = p.arrival_s if p is not None else min(r.arrival_s for r in reqs)
            if view.now_s - arrival > self.starvation_bound_s:
                key: tuple = (0, arrival, pid)
            else:
                mean = state.mean_tokens(pid, self.prior_tokens) if pid in state.history else fallback
                remaining = sum(max(1.0, mean - r.num_output_tokens) for r in reqs)
                if p is not None and not p.done:
                    remaining += max(0, p.max_knob - p.knob - len(p.request_ids)) * mean
                key = (1, remaining, arrival, pid)
            out[pid] = (key, reqs)
        return out

    def step(self, view: SchedulerView, state: DynasorState) -> tuple[list[Decision], DynasorState]:
        state = _observe(state, view)
        programs = sorted(self._programs(view, state).values(), key=lambda item: item[0])
        by_id = attrgetter("request_id")
        ranked = (r for _, reqs in programs for r in sorted(reqs, key=by_id))
        return decide_ranked(view, ranked, self.mode), state

    def decide(self, view: SchedulerView) -> Sequence[Decision]:
        decisions, self.state = self.step(view, self.state)
        return decisions
