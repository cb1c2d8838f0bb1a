"""The host contract: what every host of a scheduling policy does with a step's decisions
(the embedded engine's scheduler and the simulator's instances; written once, here).

1. :func:`check_decisions`: every decision names a live request in the queue it acts on,
   no two decisions move one request, modes, orders and budgets are well formed, and the
   plan fits (:func:`check_capacity`). Any violation is a :class:`PolicyError` naming the
   policy and the decision, raised before anything is applied: all or none.
2. The host applies the plan: finishes (``Stop``/``Abort``), then preemptions, then
   admissions in the order given.
3. :func:`hand_out`: this step's tokens go to the requests named by ``Order`` first, then
   to the other running requests, decodes before prefills (each in running order), each
   at most its pending tokens, its ``TokenBudget`` and what is left of
   ``max_num_batched_tokens``; a request whose KV blocks cannot grow for them is skipped.
4. Liveness (:func:`hand_out_live`): when nothing was handed out, the plan preempted
   nothing and a running request wanted tokens, the host preempts the last such request in
   hand-out order and hands out again, so a policy that never preempts cannot stall a host.

A host supplies its own block arithmetic (:class:`Host`); the rules are the same.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from reasonserve.core.decisions import PREEMPT_MODES, Abort, Admit, Migrate, Order, Preempt, Stop, TokenBudget
from reasonserve.core.errors import PolicyError

__all__ = ["Host", "HostSequence", "Plan", "as_count", "check_capacity", "check_decisions", "hand_out",
           "hand_out_live"]  # fmt: skip


class HostSequence(Protocol):
    """What the contract reads of a host's request: its id and its queue."""

    @property
    def request_id(self) -> str: ...

    @property
    def status(self) -> str: ...  # "waiting" | "running" | anything else: not live


S = TypeVar("S", bound=HostSequence)


class Host(Protocol[S]):
    """A host's state, as the contract reads it (nothing here changes it)."""

    @property
    def max_num_seqs(self) -> int: ...

    @property
    def free_blocks(self) -> int: ...

    @property
    def running(self) -> Sequence[S]: ...

    def lookup(self, request_id: str) -> S | None:
        """The live request with this id, or None."""

    def released(self, leaving: list[S]) -> int:
        """Blocks freed if ``leaving`` (running requests) left now."""

    def growth(self, seq: S) -> int:
        """More blocks running ``seq`` needs for all its pending tokens."""

    def admission_blocks(self, seq: S) -> int:
        """Blocks admitting waiting ``seq`` takes at most."""


@dataclass(slots=True)
class Plan(Generic[S]):
    """A step's checked decisions."""

    admit: list[S] = field(default_factory=list)  # in the order given
    preempt: dict[str, str | None] = field(default_factory=dict)  # id -> mode (None: the host's)
    finish: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (finish_reason, reason)
    order: tuple[str, ...] = ()
    budgets: dict[str, int] = field(default_factory=dict)  # id -> at most this many tokens this step

    @property
    def empty(self) -> bool:
        return not (self.admit or self.preempt or self.finish or self.order or self.budgets)

    def moves(self, request_id: str) -> bool:
        return (
            request_id in self.preempt
            or request_id in self.finish
            or any(s.request_id == request_id for s in self.admit)
        )


def check_decisions(decisions: Iterable[object], host: Host[S], policy_name: str) -> Plan[S]:
    """``decisions`` as a :class:`Plan`, or :class:`PolicyError` with nothing applied."""
    plan: Plan[S] = Plan()
    if isinstance(decisions, (list, tuple)) and not decisions:
        return plan  # nothing to check: an empty plan always fits

    def bad(decision: object, why: str) -> PolicyError:
        return PolicyError(f"policy {policy_name!r}: decision {decision!r} {why}; no decision was applied")

    def live(d: Admit | Preempt | Stop | Abort | TokenBudget, queues: tuple[str, ...]) -> S:
        rid = d.request_id
        seq = host.lookup(rid) if isinstance(rid, str) else None
        if seq is None:
            raise bad(d, "names an unknown request id (or one that is not a str)")
        if seq.status not in queues:
            raise bad(d, f"needs a {' or '.join(queues)} request, but it is {seq.status}")
        if not isinstance(d, TokenBudget) and plan.moves(rid):
            raise bad(d, "names a request another decision already moves")
        return seq

    for d in decisions:
        if isinstance(d, Admit):
            plan.admit.append(live(d, ("waiting",)))
        elif isinstance(d, Preempt):
            live(d, ("running",))
            if not (d.mode is None or isinstance(d.mode, str)) or d.mode not in PREEMPT_MODES:
                raise bad(d, f"has mode {d.mode!r}; allowed: {PREEMPT_MODES}")
            plan.preempt[d.request_id] = d.mode
        elif isinstance(d, (Stop, Abort)):
            live(d, ("waiting", "running"))
            plan.finish[d.request_id] = ("stop" if isinstance(d, Stop) else "abort", str(d.reason))
        elif isinstance(d, Order):
            plan.order = _order(d, host, plan, bad)
        elif isinstance(d, TokenBudget):
            live(d, ("running",))
            tokens = as_count(d.tokens)
            if d.request_id in plan.budgets or tokens is None or tokens < 0:
                raise bad(d, "repeats a request id, or has a budget that is not an int >= 0")
            plan.budgets[d.request_id] = tokens
        elif isinstance(d, Migrate):
            raise bad(d, "needs a multi-instance host that migrates; this one does not")
        else:
            raise bad(d, "is not a decision (Admit, Preempt, Order, TokenBudget, Stop, Abort, Migrate)")
    check_capacity(plan, host, bad)
    return plan


def _order(
    d: Order, host: Host[S], plan: Plan[S], bad: Callable[[object, str], PolicyError]
) -> tuple[str, ...]:
    ids = d.request_ids
    if not isinstance(ids, (tuple, list)) or not all(isinstance(r, str) for r in ids):
        raise bad(d, "needs a tuple of request ids (str)")
    if plan.order or len(set(ids)) != len(ids):
        raise bad(d, "repeats an id, or is the second Order of the step")
    for rid in ids:
        if getattr(host.lookup(rid), "status", None) != "running":
            raise bad(d, f"orders {rid!r}, which is not running")
    return tuple(ids)


def as_count(value: object) -> int | None:
    """``value`` as an int (any integer type, numpy's too), or None (a bool, a float, ...)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]  # a TypeError is the answer
    except TypeError:
        return None


def check_capacity(plan: Plan[S], host: Host[S], bad: Callable[[object, str], PolicyError]) -> None:
    """The requests that stay plus those admitted fit the seats, and the blocks they need this
    step (the growth of those staying, then each admission in order) fit the free blocks plus
    those released by the requests leaving. Raises ``bad(decision, why)`` at the first
    admission that does not fit."""
    leaving_ids: Collection[str] = plan.preempt.keys() | plan.finish.keys()
    if leaving_ids:
        leaving = [s for s in host.running if s.request_id in leaving_ids]
        staying = [s for s in host.running if s.request_id not in leaving_ids]
    else:  # nothing leaves (a plan of admissions): no membership test per request
        leaving, staying = [], list(host.running)
    seats = len(staying) + len(plan.admit)
    if plan.admit and seats > host.max_num_seqs:
        raise bad(plan.admit[-1], f"makes {seats} running requests; max_num_seqs is {host.max_num_seqs}")
    need = sum(map(host.growth, staying))
    available = host.free_blocks + host.released(leaving)
    for seq in plan.admit:
        need += host.admission_blocks(seq)
        if need > available:
            raise bad(
                Admit(seq.request_id),
                f"needs {need} KV blocks in all with the running requests' growth; {available} are free",
            )


Pending = Callable[[Sequence[S]], list[int]]  # the tokens each request has left to compute


def _queue(plan: Plan[S], running: Sequence[S], lookup: Callable[[str], S | None],
           pending: Pending) -> list[tuple[S, int]]:  # fmt: skip
    """(request, pending tokens) in hand-out order: ``plan.order``'s running requests, then the
    others, decodes (one pending token) before prefills, each part in running order."""
    first: list[tuple[S, int]] = []
    if plan.order:
        ordered = [s for s in map(lookup, plan.order) if s is not None and s.status == "running"]
        first = list(zip(ordered, pending(ordered), strict=True))
        named = set(plan.order)
        running = [s for s in running if s.request_id not in named]
    rest = list(zip(running, pending(running), strict=True))
    decodes = [x for x in rest if x[1] <= 1]
    if len(decodes) == len(rest):
        return first + rest
    return first + decodes + [x for x in rest if x[1] > 1]


def hand_out(plan: Plan[S], running: Sequence[S], *, lookup: Callable[[str], S | None],
             pending: Pending, grow: Callable[[S, int], bool],
             max_num_batched_tokens: int) -> list[tuple[S, int]]:  # fmt: skip
    """This step's (request, tokens), in hand-out order. ``pending(seqs)``: the tokens each of
    ``seqs`` has left to compute (one call a step, not one a request); ``grow(s, n)``: give
    ``s`` the KV blocks for ``n`` more tokens, False (and nothing taken) when not free."""
    budget, budgets, out = max_num_batched_tokens, plan.budgets, []
    for s, left in _queue(plan, running, lookup, pending):
        n = left if left < budget else budget
        if budgets:
            own = budgets.get(s.request_id, n)
            n = n if n < own else own
        if n < 1 or not grow(s, n):
            continue
        out.append((s, n))
        budget -= n
    return out


def hand_out_live(plan: Plan[S], running: Sequence[S], *, lookup: Callable[[str], S | None],
                  pending: Pending, grow: Callable[[S, int], bool], max_num_batched_tokens: int,
                  preempt: Callable[[S], None]) -> list[tuple[S, int]]:  # fmt: skip
    """:func:`hand_out` with the liveness rule: while nothing is handed out, the plan
    preempted nothing and some running request wants tokens (its budget is not 0), the last
    such request in hand-out order is preempted (``preempt``) and the tokens handed out again."""
    while True:
        work = hand_out(plan, running, lookup=lookup, pending=pending, grow=grow,
                        max_num_batched_tokens=max_num_batched_tokens)  # fmt: skip
        if work or plan.preempt:
            return work
        wanting = [s for s, left in _queue(plan, running, lookup, pending)
                   if left > 0 and plan.budgets.get(s.request_id, 1) > 0]  # fmt: skip
        if not wanting:
            return work
        preempt(wanting[-1])
