"""What :func:`reasonserve.sim.simulate` returns."""

from __future__ import annotations

from dataclasses import dataclass

from reasonserve.sim.cluster.config import SimConfig
from reasonserve.sim.cluster.migration import MigrationRecord
from reasonserve.sim.cluster.sequence import SimSequence

__all__ = ["SimResult"]


@dataclass(frozen=True)
class SimResult:
    config: SimConfig
    policy: str
    router: str
    sequences: tuple[SimSequence, ...]  # every request, finished, in id order
    end_s: float
    steps: int
    placements: dict[str, str]  # request id -> instance id (where it was first placed)
    migrations: tuple[MigrationRecord, ...] = ()  # in landing order
