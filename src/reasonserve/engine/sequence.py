"""One request's state inside the engine, and its latency metrics.

Token times are kept per output token, so every latency is derived from the output as
it finally stands: a rollback that removes tokens removes their times too, and phase,
TTFT and TTFAT are recomputed from what remains.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from reasonserve.core.phase import Phase
from reasonserve.dvr.controller import DVRState
from reasonserve.engine.logprobs import TokenLogprobs
from reasonserve.engine.sampling_params import SamplingParams

__all__ = ["RequestMetrics", "Sequence"]


@dataclass(frozen=True)
class RequestMetrics:
    """Latencies of one request (seconds on the engine's clock).

    ``ttfat_s`` is SPEC §3's time to first answer token: from the end-of-thinking token
    to the first token after it (from arrival when no end-of-thinking token is set).
    ``num_verify_passes``, ``num_rollbacks`` and ``num_tokens_rolled_back`` are LLM-42's
    per-request DVR counters (verification windows, rollbacks, decoded tokens discarded);
    0 for a request that is not verified."""

    arrival_s: float
    first_token_s: float | None = None
    end_of_thinking_s: float | None = None
    first_answer_token_s: float | None = None  # first token after end-of-thinking
    finished_s: float | None = None
    num_output_tokens: int = 0
    num_preemptions: int = 0
    num_cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache (first admission)
    num_swaps: int = 0  # preemptions that kept the KV in host memory
    num_verify_passes: int = 0
    num_rollbacks: int = 0
    num_tokens_rolled_back: int = 0

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def ttfat_s(self) -> float | None:
        if self.first_answer_token_s is None:
            return None
        start = self.end_of_thinking_s if self.end_of_thinking_s is not None else self.arrival_s
        return self.first_answer_token_s - start

    @property
    def e2e_s(self) -> float | None:
        return None if self.finished_s is None else self.finished_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first."""
        if self.finished_s is None or self.first_token_s is None or self.num_output_tokens < 2:
            return None
        return (self.finished_s - self.first_token_s) / (self.num_output_tokens - 1)


@dataclass(eq=False)
class Sequence:
    request_id: str
    prompt: list[int]
    params: SamplingParams
    seed: int
    arrival_s: float
    end_of_thinking: tuple[int, ...] = ()  # the ids that end thinking, in order (empty: no phases)
    program_id: str | None = None
    prefix_hashes: tuple[int, ...] = ()
    kv_salt: str | None = None  # prefix-cache namespace of the kernels that compute its prompt
    output: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    block_table: list[int] = field(default_factory=list)
    num_computed: int = 0  # tokens whose KV is in the cache
    status: str = "waiting"  # "waiting" | "running" | "finished"
    finish_reason: str | None = None
    dvr: DVRState = field(default_factory=DVRState)
    swapped: tuple[torch.Tensor, torch.Tensor] | None = None  # host copy of the KV while preempted
    enqueued_s: float = 0.0
    quantum_used: int = 0
    num_preemptions: int = 0
    num_swaps: int = 0
    num_cached_tokens: int = 0
    eot_index: int | None = None  # index in output of the (last) end-of-thinking token
    # per output token, when asked for (None: a restored token, its logprobs reported where it was sampled)
    logprobs: list[TokenLogprobs | None] = field(default_factory=list)
    finished_s: float | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.output)

    @property
    def num_pending(self) -> int:
        """Tokens whose KV is not computed yet."""
        return len(self.prompt) + len(self.output) - self.num_computed

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    def pending(self, n: int) -> list[int]:
        """The first ``n`` tokens whose KV is not computed yet."""
        start = self.num_computed
        if start >= len(self.prompt):
            return self.output[start - len(self.prompt) : start - len(self.prompt) + n]
        return (self.prompt[start : start + n] + self.output)[:n]

    @property
    def phase(self) -> Phase:
        if self.status == "finished":
            return Phase.FINISHED
        if not self.output:
            return Phase.PREFILL
        thinking = bool(self.end_of_thinking) and self.eot_index is None
        return Phase.REASONING if thinking else Phase.ANSWERING

    @property
    def verified_output(self) -> list[int]:
        """Output tokens that are final (all of them for non-deterministic requests)."""
        return self.output[: self.dvr.verified]

    def forced_token(self, index: int) -> int | None:
        """The token the thinking budget writes at output ``index``, else None: with no end
        of thinking before ``index``, the end-of-thinking ids go at indices ``budget``,
        ``budget + 1``, ... (one per id). Decode and verify passes both ask, so a forced
        token is never rolled back."""
        budget, eot = self.params.thinking_token_budget, self.end_of_thinking
        if budget is None or not eot or index < budget:
            return None
        if self.eot_index is not None and self.eot_index < index:
            return None
        return eot[index - budget] if index - budget < len(eot) else None

    def append(self, token: int, now: float, logprobs: TokenLogprobs | None = None) -> None:
        self.output.append(token)
        eot = self.end_of_thinking
        if self.eot_index is None and eot and token == eot[-1] and tuple(self.output[-len(eot) :]) == eot:
            self.eot_index = len(self.output) - 1
        self.token_times.append(now)
        if logprobs is not None:
            self.logprobs.append(logprobs)

    def restore(self, committed: list[int], now: float) -> None:
        """Start from output tokens committed elsewhere (migration): all are final; their
        KV is computed by the next prefill (``num_computed`` stays 0)."""
        for token in committed:
            self.append(token, now)
        if self.params.logprobs is not None:
            self.logprobs.extend([None] * len(committed))
        self.dvr.verified = len(committed)

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` output tokens (rollback)."""
        del self.output[n:], self.token_times[n:], self.logprobs[n:]
        if self.eot_index is not None and self.eot_index >= n:
            self.eot_index = None

    def metrics(self) -> RequestMetrics:
        times, eot = self.token_times, self.eot_index
        thinking = bool(self.end_of_thinking)
        if thinking:
            end_s = times[eot] if eot is not None else None
            answer_s = times[eot + 1] if eot is not None and eot + 1 < len(times) else None
        else:
            end_s, answer_s = None, times[0] if times else None
        return RequestMetrics(self.arrival_s, times[0] if times else None, end_s, answer_s, self.finished_s,
                              len(self.output), self.num_preemptions, self.num_cached_tokens,
                              self.num_swaps, self.dvr.verify_passes, self.dvr.rollbacks,
                              self.dvr.tokens_rolled_back)  # fmt: skip
