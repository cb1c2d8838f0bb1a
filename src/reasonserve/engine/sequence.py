"""One request's state inside the engine."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from reasonserve.core.phase import Phase
from reasonserve.dvr.controller import DVRState
from reasonserve.engine.sampling_params import SamplingParams

__all__ = ["RequestMetrics", "Sequence"]


@dataclass
class RequestMetrics:
    arrival_s: float
    first_token_s: float | None = None
    first_answer_token_s: float | None = None  # first token after end-of-thinking
    finished_s: float | None = None
    num_preemptions: int = 0
    num_cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache
    num_swaps: int = 0  # preemptions that kept the KV in host memory

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def ttfat_s(self) -> float | None:
        return None if self.first_answer_token_s is None else self.first_answer_token_s - self.arrival_s


@dataclass
class Sequence:
    request_id: str
    prompt: list[int]
    params: SamplingParams
    seed: int
    metrics: RequestMetrics
    phase: Phase = Phase.PREFILL
    output: list[int] = field(default_factory=list)
    block_table: list[int] = field(default_factory=list)
    num_computed: int = 0  # tokens whose KV is in the cache
    finish_reason: str | None = None
    dvr: DVRState = field(default_factory=DVRState)
    swapped: tuple[torch.Tensor, torch.Tensor] | None = None  # host copy of the KV while preempted

    @property
    def verified_output(self) -> list[int]:
        """Output tokens safe to stream (all of them for non-deterministic requests)."""
        return self.output[: self.dvr.verified] if self.params.deterministic else list(self.output)

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    @property
    def pending(self) -> list[int]:
        """Tokens whose KV is not yet computed."""
        return self.tokens[self.num_computed :]
