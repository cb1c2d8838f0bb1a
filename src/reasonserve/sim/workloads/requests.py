"""Workloads: requests with a prompt, a reasoning part and an answer part, arriving as a
seeded Poisson process. Lengths come from a :class:`LengthTable` (real traces, see
:mod:`reasonserve.sim.workloads.traces`, or any list of triples for tests)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.core.hosting import as_count

__all__ = ["LengthTable", "SimRequest", "poisson_workload"]


def _count(request_id: str, name: str, value: object) -> int:
    count = as_count(value)
    if count is None:
        raise InvalidArgumentError(f"{request_id}: {name} must be an integer, got {value!r}")
    return count


def _time(request_id: str, value: object) -> float:
    """``value`` as a finite float (an int too; not a bool, a string or one beyond float)."""
    if not isinstance(value, bool) and isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
        if math.isfinite(seconds):
            return seconds
    raise InvalidArgumentError(f"{request_id}: arrival_s must be a finite number: {value!r}"[:200])


@dataclass(frozen=True, slots=True)
class SimRequest:
    request_id: str
    arrival_s: float
    prompt_tokens: int
    reasoning_tokens: int  # output tokens up to and including the end-of-thinking token
    answer_tokens: int
    program_id: str | None = None
    prefix_hashes: tuple[int, ...] = ()  # one per full prompt block, chained (for LPM)
    cached_tokens: int = 0  # prompt tokens a prefix cache holds when it arrives: their prefill is skipped

    def __post_init__(self) -> None:
        """Checks the fields' types too, and stores them as the built-in types (a numpy
        integer count becomes an int, an int arrival time a float): the simulator's
        arithmetic then runs on plain ints and floats."""
        if not isinstance(self.request_id, str):
            raise InvalidArgumentError(f"request_id must be a str, got {type(self.request_id).__name__}")
        for name in ("prompt_tokens", "reasoning_tokens", "answer_tokens", "cached_tokens"):
            object.__setattr__(self, name, _count(self.request_id, name, getattr(self, name)))
        object.__setattr__(self, "arrival_s", _time(self.request_id, self.arrival_s))
        if self.program_id is not None and not isinstance(self.program_id, str):
            raise InvalidArgumentError(f"{self.request_id}: program_id must be a str or None")
        if not isinstance(self.prefix_hashes, tuple):
            object.__setattr__(self, "prefix_hashes", tuple(self.prefix_hashes))
        if self.prompt_tokens < 1 or self.reasoning_tokens < 0 or self.answer_tokens < 0:
            raise InvalidArgumentError(f"{self.request_id}: token counts must be >= 0 (prompt >= 1)")
        if not 0 <= self.cached_tokens < self.prompt_tokens:
            raise InvalidArgumentError(f"{self.request_id}: cached_tokens must be in [0, prompt_tokens)")
        if self.reasoning_tokens + self.answer_tokens < 1:
            raise InvalidArgumentError(f"{self.request_id}: a request must generate at least one token")

    @property
    def output_tokens(self) -> int:
        return self.reasoning_tokens + self.answer_tokens


@dataclass(frozen=True, slots=True)
class LengthTable:
    """(prompt, reasoning, answer) token triples to draw from, with where they came from."""

    rows: tuple[tuple[int, int, int], ...]
    source: str

    def __post_init__(self) -> None:
        if not self.rows:
            raise InvalidArgumentError(f"LengthTable {self.source!r} has no rows")

    def draw(self, rng: random.Random) -> tuple[int, int, int]:
        return self.rows[rng.randrange(len(self.rows))]


def poisson_workload(
    table: LengthTable,
    rate_per_s: float,
    num_requests: int,
    seed: int,
    *,
    programs_of: int = 1,
) -> list[SimRequest]:
    """``num_requests`` requests, exponential gaps of mean ``1/rate_per_s``; with
    ``programs_of = k > 1`` arrivals are programs of k requests (self-consistency samples)
    arriving together, each request with its own draw."""
    if not 0 < rate_per_s < float("inf"):  # NaN fails too; inf would put every arrival at 0
        raise InvalidArgumentError(f"rate_per_s must be a finite number > 0, got {rate_per_s!r}")
    if num_requests < 1 or programs_of < 1:
        raise InvalidArgumentError("num_requests and programs_of must be >= 1")
    rng = random.Random(seed)
    out: list[SimRequest] = []
    t = 0.0
    while len(out) < num_requests:
        t += rng.expovariate(rate_per_s)
        pid = f"p{len(out) // programs_of:06d}" if programs_of > 1 else None
        for _ in range(min(programs_of, num_requests - len(out))):
            prompt, reasoning, answer = table.draw(rng)
            out.append(SimRequest(f"r{len(out):06d}", t, prompt, reasoning, answer, pid))
    return out
