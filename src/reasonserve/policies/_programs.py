"""Program grouping shared by the gang-scheduling policies (pure helpers)."""

from __future__ import annotations

from reasonserve.core.views import RequestView

__all__ = ["program_of"]


def program_of(r: RequestView) -> str:
    """The program a request belongs to; a request without one is its own program."""
    return r.program_id if r.program_id is not None else "\x00" + r.request_id
