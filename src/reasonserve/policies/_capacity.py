"""Block and seat arithmetic shared by the baseline policies (pure helpers)."""

from __future__ import annotations

from collections.abc import Iterable

from reasonserve.core.decisions import Admit, Decision
from reasonserve.core.views import RequestView, SchedulerView

__all__ = ["admit_in_order", "growth"]


def admit_in_order(
    view: SchedulerView,
    candidates: Iterable[RequestView],
    free_blocks: int,
    seats: int,
) -> list[Decision]:
    """Admit ``candidates`` in order while blocks and seats last; stop at the first that
    does not fit (head-of-line, as vLLM does, so a large request is not starved)."""
    decisions: list[Decision] = []
    for r in candidates:
        if seats < 1 or r.blocks_needed > free_blocks:
            break
        decisions.append(Admit(r.request_id))
        free_blocks -= r.blocks_needed
        seats -= 1
    return decisions


def growth(running: Iterable[RequestView]) -> int:
    return sum(r.blocks_needed for r in running)
