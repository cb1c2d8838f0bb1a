"""What a program run cost and what it did: :class:`Trace`, and the result and error
types that carry it (a failed run raises :class:`ProgramError` with its partial trace)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from reasonserve.core.errors import ReasonserveError

__all__ = ["ProgramError", "ProgramResult", "Trace"]


@dataclass
class Trace:
    """Counters and per-step events of one program run (filled in as it goes, so a
    caller holding it sees the partial record even when the run is cancelled).

    ``tokens_generated``: tokens of the main paths (chunks, samples, steps);
    ``probe_tokens``: tokens decoded by probes; ``probe_prompt_tokens_computed``: prompt
    tokens the host computed for probes (prefix-cache misses; None when it does not
    say); ``exit``: why the run ended (``early``, ``finished``, ``budget``, ``denied``,
    ``error``, ``cancelled``)."""

    program: str
    tokens_generated: int = 0
    probe_tokens: int = 0
    probe_prompt_tokens_computed: int | None = None
    num_requests: int = 0
    num_chunks: int = 0
    num_probes: int = 0
    num_aborted: int = 0
    exit: str | None = None
    started_s: float = field(default_factory=time.perf_counter)
    elapsed_s: float = 0.0
    events: list[dict] = field(default_factory=list)

    def event(self, kind: str, **data) -> None:
        self.events.append({"kind": kind, "t_s": time.perf_counter() - self.started_s, **data})

    def add_probe_computed(self, n: int | None) -> None:
        if n is not None:
            self.probe_prompt_tokens_computed = (self.probe_prompt_tokens_computed or 0) + n

    def finish(self, exit_reason: str) -> None:
        self.exit = self.exit or exit_reason
        self.elapsed_s = time.perf_counter() - self.started_s


@dataclass(frozen=True)
class ProgramResult:
    """``answer``: the extracted final answer (None: none found); ``text``: the final
    path's text (for CoT: the reasoning, closed, plus the answer); ``certainty`` in
    [0, 1] as the program's certainindex read it last."""

    answer: str | None
    text: str
    certainty: float
    trace: Trace


class ProgramError(ReasonserveError, RuntimeError):
    """A program run failed; ``trace`` holds everything done before the failure."""

    def __init__(self, message: str, trace: Trace) -> None:
        super().__init__(message)
        self.trace = trace
