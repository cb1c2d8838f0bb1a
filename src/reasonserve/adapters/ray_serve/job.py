"""What travels between the ingress, the router and a replica for one engine request.

A :class:`Job` is the request's committed state: its prompt, sampling parameters (with
the seed fixed by the ingress, so any replica samples the same stream) and the output
tokens already committed. Placing a new request sends it with no committed tokens;
placing its answering phase (and resuming it after its replica died) sends the tokens
committed so far and the replica that holds it now.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from reasonserve.core.errors import InvalidArgumentError, ReasonserveError
from reasonserve.core.phase import Phase
from reasonserve.core.views import RequestView
from reasonserve.engine import SamplingParams

__all__ = ["Job", "ReplicaFailedError"]


class ReplicaFailedError(ReasonserveError, RuntimeError):
    """A request could not be completed: its replica failed and resuming it elsewhere
    failed too (the message says how often and why)."""


@dataclass(frozen=True, slots=True)
class Job:
    request_id: str
    prompt_ids: tuple[int, ...]
    params: SamplingParams
    committed: tuple[int, ...] = ()
    current_replica: str | None = None  # the replica holding it (answering placement, resume)
    kind: str = "place"  # "place": new request; "answer": its answering phase; "resume": after a failure
    arrival_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.request_id, str) or not self.request_id:
            raise InvalidArgumentError(f"request_id must be a non-empty str, got {self.request_id!r}")
        if self.kind not in ("place", "answer", "resume"):
            raise InvalidArgumentError(f"kind must be 'place', 'answer' or 'resume', got {self.kind!r}")
        if not isinstance(self.params, SamplingParams) or self.params.seed is None:
            raise InvalidArgumentError(
                "params must be a SamplingParams with its seed set (the ingress fixes it)"
            )

    def moved(self, committed: list[int], current_replica: str | None, kind: str) -> Job:
        return replace(self, committed=tuple(committed), current_replica=current_replica, kind=kind)

    def blocks(self, block_size: int) -> int:
        """KV blocks the whole request needs at its longest (prompt + max_tokens)."""
        return math.ceil((len(self.prompt_ids) + self.params.max_tokens) / block_size)

    def answer_blocks(self, block_size: int) -> int:
        """More KV blocks its answering phase may need where it holds the committed prefix."""
        held = math.ceil((len(self.prompt_ids) + len(self.committed)) / block_size)
        return max(0, self.blocks(block_size) - held)

    def view(self, block_size: int) -> RequestView:
        phase = (
            Phase.ANSWERING if self.kind == "answer" else Phase.REASONING if self.committed else Phase.PREFILL
        )
        return RequestView(
            self.request_id,
            self.arrival_s,
            phase,
            len(self.prompt_ids),
            0,
            len(self.committed),
            blocks_needed=self.blocks(block_size),
            max_tokens=self.params.max_tokens,
            deterministic=self.params.deterministic,
        )
