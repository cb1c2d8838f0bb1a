"""The scheduling-policy protocol: a pure function of a frozen view to decisions.

Each engine step the host builds a :class:`SchedulerView` (immutable) and asks the
policy for decisions. ``Admit(id)`` lets a waiting request in (the engine admits in the
order given while capacity lasts); ``Preempt(id)`` takes a running request out (its KV
is freed and it is recomputed later). The policy never touches the engine; the engine
never decides order or admission itself, so policies plug in without engine changes.
Ties are broken by request id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from reasonserve.core.phase import Phase

__all__ = ["Admit", "Decision", "Preempt", "RequestView", "SchedulerView", "SchedulingPolicy"]


@dataclass(frozen=True, slots=True)
class RequestView:
    request_id: str
    arrival_s: float
    phase: Phase
    num_prompt_tokens: int
    num_computed_tokens: int
    num_output_tokens: int
    priority: int = 0  # larger is more urgent (OpenAI-style extension)


@dataclass(frozen=True, slots=True)
class SchedulerView:
    now_s: float
    waiting: tuple[RequestView, ...]
    running: tuple[RequestView, ...]
    free_blocks: int
    block_size: int
    max_num_seqs: int


@dataclass(frozen=True, slots=True)
class Admit:
    request_id: str


@dataclass(frozen=True, slots=True)
class Preempt:
    request_id: str


Decision = Admit | Preempt


class SchedulingPolicy(Protocol):
    name: str

    def decide(self, view: SchedulerView) -> Sequence[Decision]: ...
