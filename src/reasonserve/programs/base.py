"""Dynasor's reasoning-program abstraction (2024 paper §5.1, SPEC 2.1): write your own program.

A program keeps three runtime properties: ``certainindex`` (how settled its answer is, in
[0, 1]), ``knob`` (units of compute used so far: samples, iterations, tree depth, probe
intervals) and ``state`` (its intermediate results). A developer implements two hooks,
``execute()`` (expand one step and advance ``knob`` by the units it used) and
``update_certainindex()`` (return the certainindex of the state now), plus
``aggregate()`` (the answer from the state). :meth:`ReasoningProgram.run` is the
intra-program scheduler's loop of §5.2.1: before each step the allocation ``policy``
(:mod:`reasonserve.certainindex.allocation`: threshold, Pareto cap, even, length) sees
``ProgramStatus(knob, certainindex, tokens)`` and grants or denies; denied, or at the
hard cap ``max_knob``, the program aggregates and returns.

The built-in programs (:class:`~reasonserve.programs.SelfConsistency`,
:class:`~reasonserve.programs.CoTWithProbe`, ...) run the same loop with the concurrency
their algorithms need (a self-consistency policy is asked after *each* finished sample,
while others still decode); this class is for algorithms of your own.

``execute`` may be a plain or an ``async`` method. A step that does not advance ``knob``,
or a certainindex that is not a number in [0, 1] (NaN, "not known yet", is allowed and
read as 0 by the policies), ends the run with :class:`ProgramError`: a program cannot
loop forever or hand its policy a value it cannot read. Any failure of a hook raises
:class:`~reasonserve.programs.ProgramError` carrying the partial trace (exit ``"error"``).
"""

from __future__ import annotations

import abc
import inspect
import math
from collections.abc import Awaitable
from typing import Any

from reasonserve.certainindex.allocation import ProgramStatus
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.programs._inflight import run_guarded
from reasonserve.programs.trace import ProgramResult, Trace

__all__ = ["ReasoningProgram"]


class ReasoningProgram(abc.ABC):
    """Subclass it and implement :meth:`execute`, :meth:`update_certainindex` and
    :meth:`aggregate`; then ``await program.run(policy)``. ``tokens`` (reasoning tokens so
    far) is read by the length baseline (``LengthPolicy``); keep it current if you use it."""

    name = "program"

    def __init__(self, state: Any = None) -> None:
        self.certainindex: float = 0.0
        self.knob: int = 0
        self.tokens: int = 0
        self.state = state

    @abc.abstractmethod
    def execute(self) -> Awaitable[None] | None:
        """Expand one step (e.g. issue more samples, one more tree iteration) and advance
        ``self.knob`` by the units of compute it used."""

    @abc.abstractmethod
    def update_certainindex(self) -> float:
        """The certainindex of the current state, in [0, 1] (NaN: not known yet)."""

    @abc.abstractmethod
    def aggregate(self) -> tuple[str | None, str]:
        """``(answer, text)`` from the state: majority vote, best path, ..."""

    async def run(self, policy, *, max_knob: int = 256, trace: Trace | None = None) -> ProgramResult:
        """Ask ``policy.grant(ProgramStatus)`` before each step; step, then re-read the
        certainindex; stop when denied or at ``max_knob`` (a hard cap whatever the policy
        grants). ``trace`` (optional) is filled in as the run goes."""
        if isinstance(max_knob, bool) or not isinstance(max_knob, int) or max_knob < 1:
            raise InvalidArgumentError(f"max_knob must be an int >= 1, got {max_knob!r}")
        if not callable(getattr(policy, "grant", None)):
            raise InvalidArgumentError("policy must have grant(ProgramStatus) -> bool")
        trace = trace if trace is not None else Trace(self.name)

        async def body() -> ProgramResult:
            exit_reason = await self._steps(policy, max_knob, trace)
            answer, text = self.aggregate()
            trace.finish(exit_reason)
            return ProgramResult(answer, text, self.certainindex, trace)

        return await run_guarded(type(self).__name__, body, trace, None)

    async def _steps(self, policy, max_knob: int, trace: Trace) -> str:
        while True:
            if self.knob >= max_knob:
                return "budget"
            if not policy.grant(ProgramStatus(self.knob, self.certainindex, self.tokens)):
                return "denied"
            before = self.knob
            step = self.execute()
            if inspect.isawaitable(step):
                await step
            if isinstance(self.knob, bool) or not isinstance(self.knob, int) or self.knob <= before:
                raise InvalidArgumentError(f"execute() must advance knob (an int); it went from {before!r} "
                                           f"to {self.knob!r}")  # fmt: skip
            self.certainindex = _checked(self.update_certainindex())
            trace.event("step", knob=self.knob, certainty=self.certainindex)


def _checked(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentError(f"update_certainindex() must return a number, got {value!r}")
    if not math.isnan(value) and not 0.0 <= value <= 1.0:
        raise InvalidArgumentError(f"update_certainindex() must be in [0, 1] (or NaN), got {value!r}")
    return float(value)
