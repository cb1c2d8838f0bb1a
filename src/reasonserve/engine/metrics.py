"""A frozen snapshot of the engine's counters (``Engine.metrics()``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EngineMetrics"]


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    """Queue sizes and KV occupancy now; the other fields are cumulative since start."""

    num_running: int
    num_waiting: int
    kv_blocks_used: int
    kv_blocks_total: int
    num_preemptions: int
    num_aborted: int
    num_finished: int  # every finish reason, aborts and errors included
    verify_passes: int
    rollbacks: int
    tokens_rolled_back: int  # fast-path tokens discarded by rollbacks (decoded again after)
    verify_tokens: int = 0  # query slots of verify passes, padding included
    verify_s: float = 0.0  # wall time of verify passes (they end by reading tokens back)
    graph_replays: int = 0  # decode steps and verify passes replayed from a CUDA graph
