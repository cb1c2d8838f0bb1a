"""What the engine returns for a request."""

from __future__ import annotations

from dataclasses import dataclass

from reasonserve.core.phase import Phase
from reasonserve.engine.logprobs import TokenLogprobs
from reasonserve.engine.sequence import RequestMetrics

__all__ = ["FINISH_REASONS", "RequestOutput"]

FINISH_REASONS = ("stop", "length", "abort", "error")


@dataclass(frozen=True)
class RequestOutput:
    """``finish_reason`` is one of :data:`FINISH_REASONS` (None while running); ``error``
    says what went wrong when it is ``"error"``; ``stop_reason`` is the reason a policy
    gave when it stopped or aborted the request."""

    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    finish_reason: str | None
    phase: Phase
    metrics: RequestMetrics
    text: str | None = None
    error: str | None = None
    stop_reason: str | None = None
    # per output token, when SamplingParams.logprobs is set (None for committed_output tokens)
    logprobs: list[TokenLogprobs | None] | None = None
