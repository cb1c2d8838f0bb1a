"""What the engine returns for a request."""

from __future__ import annotations

from dataclasses import dataclass

from reasonserve.core.phase import Phase
from reasonserve.engine.sequence import RequestMetrics

__all__ = ["RequestOutput"]


@dataclass(frozen=True)
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    finish_reason: str | None  # "length", "stop", "abort" or None while running
    phase: Phase
    metrics: RequestMetrics
    text: str | None = None
