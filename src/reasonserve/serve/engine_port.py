"""The engine methods the server uses, in one place (the issue-12 engine contract).

Each function calls the contract method when the engine has it; until issue 12 lands,
three have a bridge over today's engine, marked ``# bridge``: ``verified_tokens``,
``metrics`` (a snapshot) and ``release`` (the engine keeping no finished request).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EngineSnapshot", "abort", "release", "snapshot", "verified_tokens"]


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    num_running: int = 0
    num_waiting: int = 0
    kv_blocks_used: int = 0
    kv_blocks_total: int = 0
    num_preemptions: int = 0
    num_aborted: int = 0
    num_finished: int = 0
    verify_passes: int = 0
    rollbacks: int = 0
    tokens_rolled_back: int = 0


def verified_tokens(engine, request_id: str) -> list[int]:
    """Output tokens of a live request that a stream may send ([] once it is gone)."""
    if hasattr(engine, "verified_tokens"):
        try:
            return list(engine.verified_tokens(request_id))
        except (KeyError, ValueError):
            return []
    for seq in engine.running:  # bridge
        if seq.request_id == request_id:
            return seq.verified_output
    return []


def abort(engine, request_id: str) -> bool:
    """Abort a live request; False if the engine no longer knows it."""
    try:
        engine.abort(request_id)
    except (KeyError, ValueError):  # UnknownRequestError (contract) / InvalidArgumentError (today)
        return False
    return True


def release(engine, request_id: str) -> None:
    """Forget a finished request that has been delivered (the contract needs nothing)."""
    finished = getattr(engine, "finished", None)
    if isinstance(finished, dict):  # bridge: today's engine keeps every finished request
        finished.pop(request_id, None)


def snapshot(engine) -> EngineSnapshot:
    if hasattr(engine, "metrics"):
        m = engine.metrics()
        return EngineSnapshot(**{k: getattr(m, k, 0) for k in EngineSnapshot.__slots__})
    stats, total = engine.stats, engine.config.num_blocks  # bridge
    return EngineSnapshot(
        num_running=len(engine.running),
        num_waiting=len(engine.waiting),
        kv_blocks_used=total - engine.blocks.num_free,
        kv_blocks_total=total,
        verify_passes=stats.get("verify_passes", 0),
        rollbacks=stats.get("rollbacks", 0),
        tokens_rolled_back=stats.get("tokens_rolled_back", 0),
    )
