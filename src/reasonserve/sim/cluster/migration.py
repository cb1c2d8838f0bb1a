"""KV migration between simulated instances at the reasoning->answering transition
(PASCAL §IV-B, Algorithm 2 and adaptive migration, asked of the router).

A request that migrates leaves its source instance with its whole KV (the blocks its
computed tokens fill), travels for the cost model's ``migrate_s(tokens)`` and lands on
the target with the same tokens of KV (see :meth:`SimInstance.receive`). While in flight
it is held here, so every request is always in exactly one place.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from reasonserve.sim.cluster.sequence import SimSequence

__all__ = ["MigrationRecord", "Migrations"]


@dataclass(frozen=True, slots=True)
class MigrationRecord:
    request_id: str
    source: str
    target: str
    start_s: float
    end_s: float
    tokens: int  # tokens of KV moved
    blocks_out: int  # blocks they filled on the source
    blocks_in: int = -1  # blocks they fill on the target (set on landing)
    on_gpu: bool = False  # landed in GPU blocks (else staged in the target's host memory)


class Migrations:
    """Requests in flight between instances, earliest landing first (ties by request id)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, str, int, SimSequence, MigrationRecord]] = []
        self.done: list[MigrationRecord] = []

    def __len__(self) -> int:
        return len(self._heap)

    def next_s(self) -> float:
        return self._heap[0][0] if self._heap else float("inf")

    def start(self, seq: SimSequence, record: MigrationRecord, target_index: int) -> None:
        heapq.heappush(self._heap, (record.end_s, seq.request_id, target_index, seq, record))

    def pop(self) -> tuple[SimSequence, MigrationRecord, int]:
        _, _, k, seq, record = heapq.heappop(self._heap)
        return seq, record, k

    def in_flight(self) -> list[SimSequence]:
        return [item[3] for item in self._heap]
