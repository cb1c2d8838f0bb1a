"""A quiet stretch: decode steps the policy declared decision-free (its ``quiet_steps``),
run as one event with results identical to stepping one decision at a time.

Stepping exactly, each of the stretch's steps would be an event at the previous step's
end: apply its tokens, ask the policy (no decisions), hand every running request one
token (allocating a KV block where it crosses a block boundary) and start the next
iteration. Here those events are virtual: the iterations are applied lazily, when the
instance is observed (a router reading its load, a migration landing, a request arriving
or being stopped) or at the stretch's last step, which is a real event. An observation
at time ``t`` sees exactly the virtual steps that stepping would have run before it:
those that end before ``t``, and those that end at ``t`` when a real step of a
higher-indexed instance at ``t`` already ran (the event loop breaks ties by instance
index). An arrival or a stop shortens the stretch to the iteration in progress, so the
policy decides again where stepping would first see the change.

Times replicate stepping's float arithmetic: an iteration that starts at ``s`` and lasts
``d`` stamps its tokens ``s + d``, and the next step event is at ``s + ((s + d) - s)``.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from reasonserve.sim.sequence import SimSequence

__all__ = ["QuietRun"]


class QuietRun:
    """``work``: (sequence, 1) for every running request, in hand-out order; ``ends``:
    each iteration's token timestamp; ``times``: the step event that ends it."""

    __slots__ = ("applied", "ends", "times", "work")

    def __init__(self, work: list[tuple[SimSequence, int]], start_s: float, durations: list[float]) -> None:
        self.work, self.applied = work, 0
        self.ends: list[float] = []
        self.times: list[float] = []
        now = start_s
        for d in durations:
            end = now + d
            self.ends.append(end)
            now = now + (end - now)
            self.times.append(now)

    @property
    def end_s(self) -> float:
        return self.times[-1]

    def processed(self, now_s: float, inclusive: bool) -> int:
        """Virtual steps run by an observation at ``now_s`` (``inclusive``: the one at
        ``now_s`` too); never the last step, which is a real event."""
        done = bisect_right(self.times, now_s) if inclusive else bisect_left(self.times, now_s)
        return min(done, len(self.times) - 1)

    def shorten(self, iterations: int) -> int:
        """Keep the first ``iterations``; returns how many were dropped."""
        dropped = len(self.times) - iterations
        del self.ends[iterations:], self.times[iterations:]
        return dropped
