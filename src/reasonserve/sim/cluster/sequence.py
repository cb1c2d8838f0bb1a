"""One simulated request's state and timeline inside an instance."""

from __future__ import annotations

from dataclasses import dataclass, field

from reasonserve.core.phase import Phase
from reasonserve.sim.workloads.requests import SimRequest

__all__ = ["SimSequence"]


@dataclass(eq=False, slots=True)
class SimSequence:
    req: SimRequest
    enqueued_s: float
    status: str = "waiting"  # waiting | running | finished
    num_computed: int = 0
    num_output: int = 0
    num_blocks: int = 0
    quantum_used: int = 0
    swapped: bool = False
    first_token_s: float | None = None
    end_of_thinking_s: float | None = None
    answer_times: list[float] = field(default_factory=list)
    finished_s: float | None = None
    finish_reason: str | None = None
    num_preemptions: int = 0
    num_swaps: int = 0
    num_migrations: int = 0
    # the request's id, arrival, program, prefix and token counts, copied: the simulator reads
    # them at every step (one attribute lookup instead of two)
    request_id: str = field(init=False, repr=False, compare=False)
    arrival_s: float = field(init=False, repr=False, compare=False)
    program_id: str | None = field(init=False, repr=False, compare=False)
    prefix_hashes: tuple[int, ...] = field(init=False, repr=False, compare=False)
    prompt_tokens: int = field(init=False, repr=False, compare=False)
    reasoning_tokens: int = field(init=False, repr=False, compare=False)
    answer_tokens: int = field(init=False, repr=False, compare=False)
    # the token pacer's fold carried forward while the request is live (SimInstance.paced_until):
    # over its first ``paced_tokens`` answer times, the reader has read them all at ``paced_s``;
    # reset when it finishes
    paced_tokens: int = field(init=False, repr=False, compare=False)
    paced_s: float | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        r = self.req
        self.request_id, self.prompt_tokens = r.request_id, r.prompt_tokens
        self.arrival_s, self.program_id, self.prefix_hashes = r.arrival_s, r.program_id, r.prefix_hashes
        self.reasoning_tokens, self.answer_tokens = r.reasoning_tokens, r.answer_tokens
        self.paced_tokens, self.paced_s = 0, None

    @property
    def num_tokens(self) -> int:
        return self.prompt_tokens + self.num_output

    @property
    def phase(self) -> Phase:
        if self.status == "finished":
            return Phase.FINISHED
        if self.num_output == 0:
            return Phase.PREFILL
        return Phase.REASONING if self.num_output < self.reasoning_tokens else Phase.ANSWERING

    def emit(self, now_s: float) -> bool:
        """A token was sampled at ``now_s``; True when the request has all its tokens."""
        self.num_output += 1
        if self.first_token_s is None:
            self.first_token_s = now_s
        if self.num_output == self.reasoning_tokens:
            self.end_of_thinking_s = now_s
        elif self.num_output > self.reasoning_tokens:
            self.answer_times.append(now_s)
        return self.num_output >= (self.reasoning_tokens + self.answer_tokens)

    def emit_many(self, times: list[float]) -> bool:
        """One token sampled at each of ``times`` (as many :meth:`emit` calls)."""
        before, r = self.num_output, self.reasoning_tokens
        self.num_output += len(times)
        if self.first_token_s is None:
            self.first_token_s = times[0]
        if before < r <= self.num_output:
            self.end_of_thinking_s = times[r - before - 1]
        first_answer = max(0, r - before)
        if first_answer < len(times):
            self.answer_times.extend(times[first_answer:])
        return self.num_output >= (self.reasoning_tokens + self.answer_tokens)

    def tokens_to_event(self) -> int:
        """Tokens it can emit before it finishes or reaches its end of thinking (inclusive)."""
        left = (self.reasoning_tokens + self.answer_tokens) - self.num_output
        think = self.reasoning_tokens - self.num_output
        return min(left, think) if think > 0 else left
