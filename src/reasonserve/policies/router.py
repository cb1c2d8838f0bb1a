"""Instance-level placement policies for multi-instance hosts (the simulator; later the
Ray Serve adapter). A router is a pure ``route(request, instances) -> instance_id``.

:class:`InstanceLoad` carries what PASCAL's Algorithm 1 needs and
:class:`~reasonserve.core.views.InstanceView` does not: the KV footprint on GPU and host
(``m_i``) and whether every answering request meets its pace (``t_i``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.core.views import RequestView

__all__ = ["InstanceLoad", "LeastKVRouter", "PascalRouter", "Router"]


@dataclass(frozen=True, slots=True)
class InstanceLoad:
    instance_id: str
    kv_blocks_footprint: int  # blocks held on the GPU plus swapped to host memory (m_i)
    answering_slo_ok: bool = True  # t_i: no answering request's pacer has run dry
    num_reasoning: int = 0  # r_i (Algorithm 2)
    num_fresh_answering: int = 0  # a_i: answering requests within their first quantum


class Router(Protocol):
    @property
    def name(self) -> str: ...

    def route(self, request: RequestView, instances: Sequence[InstanceLoad]) -> str: ...


def _check(instances: Sequence[InstanceLoad]) -> None:
    if not instances:
        raise InvalidArgumentError("instances must be a non-empty sequence of InstanceLoad")


@dataclass(frozen=True, slots=True)
class LeastKVRouter:
    """The paper's baseline placement: the instance with the smallest KV footprint."""

    name: str = "least_kv"

    def route(self, request: RequestView, instances: Sequence[InstanceLoad]) -> str:
        _check(instances)
        return min(instances, key=lambda i: (i.kv_blocks_footprint, i.instance_id)).instance_id


@dataclass(frozen=True, slots=True)
class PascalRouter:
    """PASCAL Algorithm 1 (instance selection for new reasoning requests): among instances
    whose answering requests all meet their SLO, the smallest KV footprint ``m_i``; when
    none does, the smallest ``m_i`` over all instances."""

    name: str = "pascal_alg1"

    def route(self, request: RequestView, instances: Sequence[InstanceLoad]) -> str:
        _check(instances)
        ok = [i for i in instances if i.answering_slo_ok] or list(instances)
        return min(ok, key=lambda i: (i.kv_blocks_footprint, i.instance_id)).instance_id
