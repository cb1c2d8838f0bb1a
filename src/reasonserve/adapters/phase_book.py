"""Phase bookkeeping for hosts that do not track reasoning phases themselves.

vLLM and SGLang know a request's prompt, its generated ids and its computed tokens,
but not whether it is still reasoning. :class:`PhaseBook` derives what the PASCAL
policy ranks on (Kim et al., PASCAL §IV-C): the phase (answering once an
end-of-thinking token has been generated), the tokens computed since the request was
last admitted (its quantum used) and when it last entered the waiting queue (its
arrival, or its last preemption). It scans each request's output only once (from
where it stopped) and forgets requests the host no longer holds. Engine-agnostic:
the adapters feed it plain numbers and id lists.

:meth:`PhaseBook.rank` is the sort key a host orders its queues by: the policy's own
``PascalPolicy.rank_key``, with two adapter rules.

* **Round robin by rotation.** vLLM never preempts a running request to let another
  run; so when a running request has used its quantum it is re-entered at the back of
  its queue (its enqueue time becomes now, its quantum restarts): the next request
  of the queue comes first, PASCAL's round robin without a preemption.
* **Demotion counts generated tokens.** PASCAL demotes long *reasoning*; the policy's
  own length test also counts the prompt, which in a host's FCFS queue demotes a long
  prompt on arrival behind every later request, for ever. The ranking view reports
  the prompt as 0 tokens, so a request is demoted once it has *generated* more than
  the threshold, and a prompt of any length is ranked by its arrival.

The key is recomputed only when an input it depends on crosses one of the rule's
break points (phase, demotion, quantum), so a step costs a few comparisons per request.
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
    def from_mapping(cls, mapping: object, *, quantum: bool = True) -> PhaseAwareConfig:
        """From ``{"think_end_token_id": 151668, "quantum": 500, ...}`` (JSON a user passes
        to the engine: vLLM ``--additional-config '{"reasonserve": {...}}'``).
        ``quantum=False``: a host where the quantum has no effect refuses the key."""
        if not isinstance(mapping, Mapping):
            raise InvalidTypeError(f"the {CONFIG_KEY!r} settings must be a JSON object, got {mapping!r}")
        known = {"think_end_token_id", "think_end_token_ids", "demote_threshold_tokens"} | (
            {"quantum"} if quantum else set()
        )
        if not quantum and "quantum" in mapping:
            raise InvalidArgumentError(
                "'quantum' has no effect here: this host's hook orders only admission (PASCAL's queues), "
                "never the running requests a quantum rotates; remove it"
            )
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
    base: int | None = None  # computed tokens when the quantum started (None: waiting)
    waiting_computed: int = 0  # computed tokens when last seen waiting
    signature: tuple | None = None  # what the cached key depends on
    key: tuple = ()


@dataclass(slots=True)
class PhaseBook:
    """Per-request state behind :meth:`view`; see the module docstring."""

    config: PhaseAwareConfig
    _entries: dict[str, _Entry] = field(default_factory=dict)
    policy: PascalPolicy = field(init=False)
    _ends: frozenset[int] = field(init=False)

    def __post_init__(self) -> None:
        self.policy = self.config.policy()
        self._ends = frozenset(self.config.think_end_token_ids)

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
        e = self._update(request_id, arrival_s, num_computed_tokens, output_ids, running, now_s)
        return self._view(request_id, e, arrival_s, num_prompt_tokens, num_computed_tokens, len(output_ids))

    def rank(
        self,
        request_id: str,
        arrival_s: float,
        num_prompt_tokens: int,
        num_computed_tokens: int,
        output_ids: Sequence[int],
        running: bool,
        now_s: float,
    ) -> tuple:
        """The request's place in its queue (sort ascending); see the module docstring.
        The arguments are :meth:`view`'s (positional here: a host calls this per request
        per step)."""
        e = self._update(request_id, arrival_s, num_computed_tokens, output_ids, running, now_s)
        policy = self.policy
        num_output = len(output_ids)
        used = num_computed_tokens - e.base if e.base is not None else 0
        if running and used >= policy.quantum and self._quantum_used(e, num_output, used) >= policy.quantum:
            e.enqueued_s, e.base, used = now_s, num_computed_tokens, 0  # rotate to the back of its queue
        over, quantum = num_output - policy.demote_threshold_tokens, policy.quantum
        signature = (running, e.enqueued_s, e.answering, over > 0, used >= quantum, over >= quantum)
        if signature != e.signature:
            view = self._view(request_id, e, arrival_s, num_prompt_tokens, num_computed_tokens, num_output)
            e.key = policy.rank_key(view._replace(num_prompt_tokens=0), running)
            e.signature = signature
        return e.key

    def waiting_key(self, request_id: str, num_computed_tokens: int) -> tuple | None:
        """The key :meth:`rank` gave a request last seen waiting with this many computed
        tokens (a waiting request's key cannot change), or None: call :meth:`rank`."""
        e = self._entries.get(request_id)
        if e is None or e.base is not None or e.signature is None or e.signature[0]:
            return None
        return e.key if e.waiting_computed == num_computed_tokens else None

    def _quantum_used(self, e: _Entry, num_output: int, used: int) -> int:
        view = RequestView("", 0.0, Phase.ANSWERING if e.answering else Phase.REASONING, 0, 0, num_output,
                           quantum_used=used)  # fmt: skip
        return self.policy.quantum_used(view)

    def _update(self, request_id, arrival_s, num_computed_tokens, output_ids, running, now_s) -> _Entry:
        e = self._entries.get(request_id)
        if e is None:
            e = self._entries[request_id] = _Entry(enqueued_s=arrival_s)
        if not e.answering and e.scanned < len(output_ids):
            e.answering = not self._ends.isdisjoint(output_ids[e.scanned :])
            e.scanned = len(output_ids)
        if running and e.base is None:
            e.base = e.waiting_computed
        elif not running:
            if e.base is not None:  # it ran before: preempted, back in the queue now
                e.enqueued_s = now_s
                e.base = None
            e.waiting_computed = num_computed_tokens
        return e

    def _view(self, request_id, e: _Entry, arrival_s, num_prompt_tokens, num_computed_tokens, num_output):
        return RequestView(
            request_id=request_id,
            arrival_s=arrival_s,
            phase=self._phase(e, num_prompt_tokens, num_computed_tokens),
            num_prompt_tokens=num_prompt_tokens,
            num_computed_tokens=num_computed_tokens,
            num_output_tokens=num_output,
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
