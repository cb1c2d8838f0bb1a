"""Program grouping shared by the gang-scheduling policies (pure helpers)."""

from __future__ import annotations

from reasonserve.core.views import RequestView, SchedulerView

__all__ = ["program_arrivals", "program_of"]


def program_of(r: RequestView) -> str:
    """The program a request belongs to; a request without one is its own program."""
    return r.program_id if r.program_id is not None else "\x00" + r.request_id


def program_arrivals(view: SchedulerView) -> dict[str, float]:
    """Earliest arrival of each live program's requests (the program's arrival)."""
    out: dict[str, float] = {}
    for r in view.running + view.waiting:
        pid = program_of(r)
        if pid not in out or r.arrival_s < out[pid]:
            out[pid] = r.arrival_s
    return out
