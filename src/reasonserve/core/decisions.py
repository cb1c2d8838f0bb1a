"""Decisions a scheduling policy returns; the host validates, then applies them all or none.

* :class:`Admit` — move a waiting request into the running batch. Admits are applied in
  the order given; together with the running requests' growth they must fit the free
  KV blocks (``RequestView.blocks_needed``) and ``max_num_seqs``.
* :class:`Preempt` — take a running request out; ``mode`` ``"recompute"`` drops its KV,
  ``"swap"`` keeps a host copy; ``None`` uses the host's configured mode.
* :class:`Order` — the order in which running requests get this step's token budget
  (requests not named follow, in running order).
* :class:`TokenBudget` — at most ``tokens`` tokens for a running request this step (0
  pauses it for the step; decoding needs 1).
* :class:`Stop` / :class:`Abort` — finish a waiting or running request now
  (finish_reason ``"stop"`` / ``"abort"``); ``reason`` is returned as the output's
  ``stop_reason``.
* :class:`Migrate` — move a request to another instance (multi-instance hosts only).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Abort", "Admit", "Decision", "Migrate", "Order", "Preempt", "Stop", "TokenBudget"]

PREEMPT_MODES = (None, "recompute", "swap")


@dataclass(frozen=True, slots=True)
class Admit:
    request_id: str


@dataclass(frozen=True, slots=True)
class Preempt:
    request_id: str
    mode: str | None = None  # None: the host's configured preemption mode


@dataclass(frozen=True, slots=True)
class Order:
    request_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TokenBudget:
    request_id: str
    tokens: int


@dataclass(frozen=True, slots=True)
class Stop:
    request_id: str
    reason: str = "policy"


@dataclass(frozen=True, slots=True)
class Abort:
    request_id: str
    reason: str = "policy"


@dataclass(frozen=True, slots=True)
class Migrate:
    request_id: str
    instance_id: str


Decision = Admit | Preempt | Order | TokenBudget | Stop | Abort | Migrate
