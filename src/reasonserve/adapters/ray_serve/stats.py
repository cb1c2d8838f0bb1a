"""A replica's routing stats: what PASCAL's instance policy needs (SPEC §3), measured on
one embedded engine and sent to the router through Ray Serve's ``record_routing_stats``.

``m_i`` = KV blocks held on the "GPU" plus blocks of preempted requests kept in host
memory; ``r_i`` = requests in the reasoning (high-priority) phase, waiting ones and
prefills included; ``a_i`` = answering requests that have produced fewer than
``quantum_tokens`` answer tokens (their first quantum); ``t_i`` = no answering request's
token-pacer buffer has run dry (:meth:`TokenPacer.starving`, the rule the simulator's
instances report: a request that stalled once keeps pace again once it runs ahead of
its reader).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields

from reasonserve.core.phase import Phase
from reasonserve.policies.pacer import TokenPacer
from reasonserve.policies.router import InstanceLoad

__all__ = ["ReplicaStats", "measure"]


@dataclass(frozen=True, slots=True)
class ReplicaStats:
    kv_blocks_footprint: int  # m_i
    answering_slo_ok: bool  # t_i
    num_reasoning: int  # r_i
    num_fresh_answering: int  # a_i
    free_kv_blocks: int
    total_kv_blocks: int
    num_live: int  # requests running or waiting on the engine
    reported_at_s: float  # wall clock (time.time()) when measured

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: object) -> ReplicaStats | None:
        """The stats in ``raw`` (a replica's ``routing_stats``), or None when they are
        missing or malformed (the router then falls back and says why)."""
        if not isinstance(raw, dict):
            return None
        try:
            values = {f.name: raw[f.name] for f in fields(cls)}
        except KeyError:
            return None
        ints = [v for k, v in values.items() if k not in ("answering_slo_ok", "reported_at_s")]
        if any(not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in ints):
            return None
        if not isinstance(values["answering_slo_ok"], bool):
            return None
        at = values["reported_at_s"]
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
            return None
        return cls(**values)

    def load(self, instance_id: str, extra_blocks: int = 0, extra_reasoning: int = 0) -> InstanceLoad:
        """The pure policy's view of this replica; ``extra_*``: placements the router made
        after these stats were measured (they are not in them yet)."""
        return InstanceLoad(
            instance_id,
            self.kv_blocks_footprint + extra_blocks,
            self.answering_slo_ok,
            self.num_reasoning + extra_reasoning,
            self.num_fresh_answering,
            max(0, self.free_kv_blocks - extra_blocks),
        )


def measure(engine, pacer: TokenPacer, quantum_tokens: int, now_s: float | None = None) -> ReplicaStats:
    """Stats of ``engine`` now. Reads the scheduler's queues from another thread than the
    engine's: each list is copied first (one atomic C-level copy each), so a count may be
    one step old, never inconsistent within a request."""
    seqs = list(engine.running) + list(engine.waiting)
    blocks = engine.blocks
    block_size = engine.config.block_size
    swapped = sum(math.ceil(s.num_computed / block_size) for s in seqs if s.swapped is not None)
    reasoning = fresh = 0
    slo_ok = True
    mono = time.monotonic() if now_s is None else now_s
    for seq in seqs:
        phase, eot, times = seq.phase, seq.eot_index, list(seq.token_times)
        if phase in (Phase.PREFILL, Phase.REASONING):
            reasoning += 1
        elif phase is Phase.ANSWERING:
            start = (eot + 1) if eot is not None else 0
            answered = len(times) - start
            fresh += answered < quantum_tokens
            released = pacer.released_until(times[start:])  # None: no answer tokens yet
            if released is not None and pacer.starving(released, mono):
                slo_ok = False
    used = blocks.num_blocks - blocks.num_free
    return ReplicaStats(
        used + swapped, slo_ok, reasoning, fresh, blocks.num_free, blocks.num_blocks, len(seqs), time.time()
    )
