"""Two-phase preemptible speculation control (FlashTTS §4.1.2).

Phase 1 (continuous beam batching): the host batches every beam that still has work on its
current step, across requests, as usual. Phase 2 (speculation): only when no real request
waits (the waiting queue holds no non-speculative request) and the running batch's growth
fits the free KV blocks may the host fill spare slots with speculative branches (chosen by
:class:`~reasonserve.policies.flashtts.spec.SelectSpec`). A new request, a request sent back
to the queue by preemption, or memory pressure stops speculation at once: every running
speculative branch is preempted (``recompute``: speculative KV is dropped, never swapped).

Speculative branches are ordinary requests to the host; the policy knows them by id through
its explicit state (``decide(view, state) -> (decisions, state)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from reasonserve.core.decisions import Abort, Decision, Preempt
from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError
from reasonserve.core.views import SchedulerView

__all__ = ["SpeculationState", "TwoPhaseSpeculation"]


@dataclass(frozen=True, slots=True)
class SpeculationState:
    """``speculative_ids``: the host's requests that are speculative branches;
    ``speculating``: phase 2 (the host may add branches); ``stops``: how many times
    speculation was stopped (a counter for metrics)."""

    speculative_ids: frozenset[str] = field(default_factory=frozenset)
    speculating: bool = False
    stops: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.speculative_ids, frozenset):
            raise InvalidArgumentError(
                "speculative_ids must be a frozenset of request ids, "
                f"got {type(self.speculative_ids).__name__}"
            )
        bad = [r for r in self.speculative_ids if not isinstance(r, str) or not r]
        if bad:
            raise InvalidTypeError(f"speculative_ids must hold non-empty str request ids, got {bad[0]!r}")

    def with_branches(self, request_ids: Sequence[str]) -> SpeculationState:
        """The state after the host added speculative branches ``request_ids``."""
        if isinstance(request_ids, str):  # a bare id would become a set of its characters
            raise InvalidTypeError(f"request_ids must be a sequence of ids, got the str {request_ids[:80]!r}")
        return SpeculationState(self.speculative_ids | frozenset(request_ids), self.speculating, self.stops)


@dataclass(frozen=True, slots=True)
class TwoPhaseSpeculation:
    name: str = "flashtts_two_phase"

    def decide(
        self, view: SchedulerView, state: SpeculationState | None = None
    ) -> tuple[list[Decision], SpeculationState]:
        """Preempt every running speculative branch when a real request waits or the running
        batch does not fit (and abort speculative branches still queued); otherwise enter (or
        stay in) phase 2. Pure: ``view`` and
        ``state`` are not changed."""
        state = SpeculationState() if state is None else state
        if not isinstance(state, SpeculationState):
            raise InvalidArgumentError(f"state must be a SpeculationState, got {type(state).__name__}")
        spec = state.speculative_ids
        waiting_real = any(r.request_id not in spec for r in view.waiting)
        growth = sum(r.blocks_needed for r in view.running)
        if not waiting_real and growth <= view.free_blocks:
            return [], SpeculationState(spec, True, state.stops)
        victims = sorted(r.request_id for r in view.running if r.request_id in spec)
        stops = state.stops + (1 if state.speculating or victims else 0)
        decisions: list[Decision] = [Preempt(rid, "recompute") for rid in victims]
        queued = sorted(r.request_id for r in view.waiting if r.request_id in spec)
        decisions += [Abort(rid, "speculation stopped") for rid in queued]
        return decisions, SpeculationState(frozenset(), False, stops)
