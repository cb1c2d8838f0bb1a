"""Instance-level placement policies for multi-instance hosts (the simulator and the Ray
Serve adapter). A router is pure: ``route(request, instances) -> instance_id`` places a
new request, and ``route_transition(request, current_id, instances, blocks_needed) ->
instance_id`` places a request's answering phase at its reasoning->answering transition
(returning ``current_id`` means stay; anything else means migrate its whole KV there).

:class:`InstanceLoad` carries what PASCAL's Algorithms 1 and 2 need and
:class:`~reasonserve.core.views.InstanceView` does not: the KV footprint on GPU and host
(``m_i``), whether every answering request meets its pace (``t_i``), the reasoning
requests in the high queue (``r_i``), the answering requests still within their first
quantum (``a_i``) and the GPU KV blocks free now (for adaptive migration).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError
from reasonserve.core.views import RequestView

__all__ = ["InstanceLoad", "LeastKVRouter", "PascalRouter", "Router"]

_INT_ONLY = frozenset({int})
_COUNTS = ("kv_blocks_footprint", "num_reasoning", "num_fresh_answering", "free_kv_blocks")


@dataclass(frozen=True, slots=True)
class InstanceLoad:
    instance_id: str
    kv_blocks_footprint: int  # blocks held on the GPU plus swapped to host memory (m_i)
    answering_slo_ok: bool = True  # t_i: no answering request's pacer has run dry
    num_reasoning: int = 0  # r_i (Algorithm 2)
    num_fresh_answering: int = 0  # a_i: answering requests within their first quantum
    free_kv_blocks: int = 0  # GPU KV blocks free now (adaptive migration)

    def __post_init__(self) -> None:
        if not isinstance(self.instance_id, str):
            kind = type(self.instance_id).__name__
            raise InvalidTypeError(f"InstanceLoad.instance_id must be a str, got {kind}")
        counts = (self.kv_blocks_footprint, self.num_reasoning, self.num_fresh_answering, self.free_kv_blocks)
        if _INT_ONLY.issuperset(map(type, counts)) and min(counts) >= 0:  # built per instance per event
            return
        for name, value in zip(_COUNTS, counts, strict=True):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidArgumentError(f"InstanceLoad.{name} must be an int >= 0, got {value!r}")


class Router(Protocol):
    @property
    def name(self) -> str: ...

    def route(self, request: RequestView, instances: Sequence[InstanceLoad]) -> str: ...

    def route_transition(
        self,
        request: RequestView,
        current_id: str,
        instances: Sequence[InstanceLoad],
        blocks_needed: int,
        *,
        stay_blocks_needed: int | None = None,
    ) -> str: ...


def _check(instances: Sequence[InstanceLoad]) -> None:
    if not instances:
        raise InvalidArgumentError("instances must be a non-empty sequence of InstanceLoad")


def _least_footprint(instances: Sequence[InstanceLoad]) -> str:
    """The instance with the smallest ``m_i``, ties to the smallest id."""
    return min(instances, key=lambda i: (i.kv_blocks_footprint, i.instance_id)).instance_id


def _check_transition(
    current_id: str, instances: Sequence[InstanceLoad], blocks_needed: int, stay_blocks_needed: int | None
) -> InstanceLoad:
    """Validate a transition query; return the current instance's load."""
    _check(instances)
    if not isinstance(blocks_needed, int) or isinstance(blocks_needed, bool) or blocks_needed < 0:
        raise InvalidArgumentError(f"blocks_needed must be an int >= 0, got {blocks_needed!r}")
    stay = stay_blocks_needed
    if stay is not None and (not isinstance(stay, int) or isinstance(stay, bool) or stay < 0):
        raise InvalidArgumentError(f"stay_blocks_needed must be None or an int >= 0, got {stay!r}")
    current = [i for i in instances if i.instance_id == current_id]
    if not current:
        raise InvalidArgumentError(f"current_id {current_id!r} is not one of the instances")
    return current[0]


@dataclass(frozen=True, slots=True)
class LeastKVRouter:
    """The paper's baseline placement: the instance with the smallest KV footprint. Its
    answering phase stays where it reasoned (vLLM does not migrate)."""

    name: str = "least_kv"

    def route(self, request: RequestView, instances: Sequence[InstanceLoad]) -> str:
        _check(instances)
        return _least_footprint(instances)

    def route_transition(
        self,
        request: RequestView,
        current_id: str,
        instances: Sequence[InstanceLoad],
        blocks_needed: int,
        *,
        stay_blocks_needed: int | None = None,
    ) -> str:
        _check_transition(current_id, instances, blocks_needed, stay_blocks_needed)
        return current_id


@dataclass(frozen=True, slots=True)
class PascalRouter:
    """PASCAL Algorithm 1 (instance selection for new reasoning requests): among instances
    whose answering requests all meet their SLO, the smallest KV footprint ``m_i``; when
    none does, the smallest ``m_i`` over all instances.

    Algorithm 2 (placement of the answering phase at the phase transition): among
    SLO-meeting instances the fewest reasoning requests ``r_i``; when none meets its SLO,
    the smallest ``r_i + a_i`` over all. Ties go to the smallest instance id. With
    ``adaptive`` (the paper's adaptive migration) the request stays when its current
    instance has ``stay_blocks_needed`` free GPU blocks (the room to go on there; default
    ``blocks_needed``) and the chosen one has fewer than ``blocks_needed`` (the room to
    receive its KV).
    Ablations: ``migrate=False`` (NoMigration: always stay), ``adaptive=False``
    (NonAdaptive: always move to Algorithm 2's choice).
    """

    name: str = "pascal_alg1"
    migrate: bool = True
    adaptive: bool = True

    def route(self, request: RequestView, instances: Sequence[InstanceLoad]) -> str:
        _check(instances)
        return _least_footprint([i for i in instances if i.answering_slo_ok] or instances)

    def route_transition(
        self,
        request: RequestView,
        current_id: str,
        instances: Sequence[InstanceLoad],
        blocks_needed: int,
        *,
        stay_blocks_needed: int | None = None,
    ) -> str:
        current = _check_transition(current_id, instances, blocks_needed, stay_blocks_needed)
        stay_need = blocks_needed if stay_blocks_needed is None else stay_blocks_needed
        if not self.migrate:
            return current_id
        ok = [i for i in instances if i.answering_slo_ok]
        if ok:
            chosen = min(ok, key=lambda i: (i.num_reasoning, i.instance_id))
        else:
            chosen = min(instances, key=lambda i: (i.num_reasoning + i.num_fresh_answering, i.instance_id))
        if (
            self.adaptive
            and chosen.instance_id != current_id
            and current.free_kv_blocks >= stay_need
            and chosen.free_kv_blocks < blocks_needed
        ):
            return current_id
        return chosen.instance_id
