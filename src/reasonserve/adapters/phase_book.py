"""Phase bookkeeping for hosts that do not track reasoning phases themselves.

vLLM and SGLang know a request's prompt, its generated ids and its computed tokens,
but not whether it is still reasoning. :class:`PhaseBook` derives what the PASCAL
policy ranks on (Kim et al., PASCAL §IV-C): the phase (answering once an
end-of-thinking token has been generated), the tokens computed since the request was
last admitted (its quantum used) and when it last entered the waiting queue (its
arrival, or its last preemption). It scans each request's output only once (from
where it stopped) and forgets requests the host no longer holds. Engine-agnostic:
the adapters feed it plain numbers and id lists.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError
from reasonserve.core.phase import Phase
from reasonserve.core.views import RequestView
from reasonserve.policies.pascal import PascalPolicy

__all__ = ["PhaseAwareConfig", "PhaseBook"]

CONFIG_KEY = "reasonserve"


@dataclass(frozen=True, slots=True)
class PhaseAwareConfig:
    """``think_end_token_ids``: the ids that close the thinking block (Qwen3/DeepSeek-R1:
    the id of ``</think>``). ``quantum`` and ``demote_threshold_tokens``: PASCAL's."""

    think_end_token_ids: tuple[int, ...]
    quantum: int = 500
    demote_threshold_tokens: int = 5000

    def __post_init__(self) -> None:
        ids = self.think_end_token_ids
        if not isinstance(ids, tuple) or not ids:
            raise InvalidArgumentError("think_end_token_ids must be a non-empty tuple of token ids")
        if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in ids):
            raise InvalidArgumentError(f"think_end_token_ids must be ints >= 0, got {ids!r}")
        self.policy()  # PascalPolicy validates quantum and the threshold

    def policy(self) -> PascalPolicy:
        return PascalPolicy(quantum=self.quantum, demote_threshold_tokens=self.demote_threshold_tokens)

    @classmethod
    def from_mapping(cls, mapping: object) -> PhaseAwareConfig:
        """From ``{"think_end_token_id": 151668, "quantum": 500, ...}`` (JSON a user passes
        to the engine: vLLM ``--additional-config '{"reasonserve": {...}}'``)."""
        if not isinstance(mapping, Mapping):
            raise InvalidTypeError(f"the {CONFIG_KEY!r} settings must be a JSON object, got {mapping!r}")
        known = {"think_end_token_id", "think_end_token_ids", "quantum", "demote_threshold_tokens"}
        unknown = sorted(set(mapping) - known)
        if unknown:
            raise InvalidArgumentError(f"unknown {CONFIG_KEY!r} settings {unknown}; known: {sorted(known)}")
        ids = mapping.get("think_end_token_ids")
        if ids is None and "think_end_token_id" in mapping:
            ids = [mapping["think_end_token_id"]]
        if not isinstance(ids, list | tuple):
            raise InvalidArgumentError(
                f"{CONFIG_KEY!r} settings need think_end_token_id (the id of </think> in the model's "
                "tokenizer) or think_end_token_ids"
            )
        extra = {k: mapping[k] for k in ("quantum", "demote_threshold_tokens") if k in mapping}
        return cls(think_end_token_ids=tuple(ids), **extra)


@dataclass(slots=True)
class _Entry:
    enqueued_s: float
    scanned: int = 0  # output ids already searched for an end-of-thinking token
    answering: bool = False
    base: int | None = None  # computed tokens when last admitted (None: waiting)
    waiting_computed: int = 0  # computed tokens when last seen waiting


@dataclass(slots=True)
class PhaseBook:
    """Per-request state behind :meth:`view`; see the module docstring."""

    config: PhaseAwareConfig
    _entries: dict[str, _Entry] = field(default_factory=dict)

    def view(
        self,
        request_id: str,
        *,
        arrival_s: float,
        num_prompt_tokens: int,
        num_computed_tokens: int,
        output_ids: Sequence[int],
        running: bool,
        now_s: float,
    ) -> RequestView:
        e = self._entries.get(request_id)
        if e is None:
            e = self._entries[request_id] = _Entry(enqueued_s=arrival_s)
        if not e.answering and e.scanned < len(output_ids):
            ends = self.config.think_end_token_ids
            e.answering = any(t in ends for t in output_ids[e.scanned :])
            e.scanned = len(output_ids)
        if running and e.base is None:
            e.base = e.waiting_computed
        elif not running:
            if e.base is not None:  # it ran before: preempted, back in the queue now
                e.enqueued_s = now_s
                e.base = None
            e.waiting_computed = num_computed_tokens
        return RequestView(
            request_id=request_id,
            arrival_s=arrival_s,
            phase=self._phase(e, num_prompt_tokens, num_computed_tokens),
            num_prompt_tokens=num_prompt_tokens,
            num_computed_tokens=num_computed_tokens,
            num_output_tokens=len(output_ids),
            enqueued_s=e.enqueued_s,
            quantum_used=max(0, num_computed_tokens - e.base) if e.base is not None else 0,
        )

    @staticmethod
    def _phase(e: _Entry, num_prompt_tokens: int, num_computed_tokens: int) -> Phase:
        if e.answering:
            return Phase.ANSWERING
        return Phase.PREFILL if num_computed_tokens < num_prompt_tokens else Phase.REASONING

    def retain(self, live_ids: Collection[str]) -> None:
        """Forget every request not in ``live_ids`` (finished or aborted)."""
        for rid in [r for r in self._entries if r not in live_ids]:
            del self._entries[rid]

    def __len__(self) -> int:
        return len(self._entries)
