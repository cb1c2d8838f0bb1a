"""One decision's worth of execution on a simulated instance, applied lazily as simulated
time passes (a coarse event step).

The first iteration computes the tokens the policy's plan handed out (prefill chunks
and decodes). When that batch is decodes only and ``SimConfig.decode_steps_per_event``
is k > 1, up to k - 1 further decode iterations of the same batch follow without asking
the policy again; each iteration is still timed by the cost model and every token gets
its own timestamp. A run ends early, at the iteration where, for any of its requests,
the request finishes, reaches its end of thinking, or the KV blocks run out; and it is
cut at the iteration in progress when a migrated request lands on the instance.

What k > 1 approximates: the policy sees the batch only once per run, so a quantum
expiry or a demotion threshold takes effect up to k - 1 tokens late, and a request that
arrives during a run waits for the run's end (at most k iterations) to be admitted.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate

from reasonserve.sim.cluster.sequence import SimSequence

__all__ = ["StepRun"]


class StepRun:
    """``work``: (sequence, tokens in the first iteration); ``ends``: each iteration's
    end time; ``held``: each sequence's blocks before the later iterations' reservation."""

    __slots__ = ("applied", "ends", "held", "work")

    def __init__(self, work: list[tuple[SimSequence, int]], start_s: float, durations: list[float],
                 held: list[int]) -> None:  # fmt: skip
        self.work, self.held, self.applied = work, held, 0
        self.ends = list(accumulate(durations, initial=start_s))[1:]

    @property
    def end_s(self) -> float:
        return self.ends[-1]

    def due(self, now_s: float, *, last: bool) -> int:
        """Iterations to apply at ``now_s``: those ended by then (never the last one unless
        ``last``, so its events are handled by the instance's own step event)."""
        upto = len(self.ends) if last else len(self.ends) - 1
        done = self.applied
        while done < upto and self.ends[done] <= now_s:
            done += 1
        return done

    def in_progress(self, now_s: float) -> int:
        """Iterations up to and including the one in progress at ``now_s``."""
        return min(len(self.ends), bisect_left(self.ends, now_s) + 1)
