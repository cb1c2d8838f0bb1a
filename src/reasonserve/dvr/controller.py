"""Decode-verify-rollback (LLM-42): the pure controller.

A deterministic request decodes on the fast path (dynamic batches, stock kernels).
Its decoded tokens are *unverified* until a verify pass replays them on the
fixed-shape, batch-invariant path. This module decides, without running anything:

* when a request needs verifying (:meth:`DVRState.needs_verify`): ``window`` unverified
  tokens, or the request has stopped with any unverified token;
* what the verify pass feeds (:func:`verify_inputs`): the last verified token followed
  by the unverified tokens but the last — the prefill-style extend whose logits
  predict every unverified position;
* what to keep (:func:`accept`): the longest prefix on which decode and verify agree,
  plus the verifier's token at the first mismatch, so each pass makes progress;
* how to pack passes (:func:`plan_groups`): groups of exactly ``group_size`` slots of
  ``window`` tokens, padded with dummy slots, so every verify pass has one shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["Acceptance", "DVRConfig", "DVRState", "accept", "plan_groups", "verify_inputs"]


@dataclass(frozen=True, slots=True)
class DVRConfig:
    window: int = 8  # unverified tokens that trigger a verify pass
    group_size: int = 4  # requests verified together; passes are group_size x window tokens

    def __post_init__(self) -> None:
        for name in ("window", "group_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")


@dataclass
class DVRState:
    """Per-request verification state and counters."""

    verified: int = 0  # output tokens verified so far
    rollbacks: int = 0
    tokens_rolled_back: int = 0
    verify_passes: int = 0
    verify_tokens: int = 0  # tokens this request occupied in verify passes, padding included

    def unverified(self, num_output: int) -> int:
        return num_output - self.verified

    def needs_verify(self, num_output: int, window: int, stopped: bool) -> bool:
        pending = self.unverified(num_output)
        return pending >= window or (stopped and pending > 0)


def verify_inputs(tokens: Sequence[int], num_prompt: int, state: DVRState) -> tuple[list[int], int]:
    """Tokens to replay and the position of the first: ``[last verified] + unverified[:-1]``."""
    first = num_prompt + state.verified - 1  # position of the last verified token
    if first < num_prompt - 1 or first >= len(tokens):
        raise InvalidArgumentError("nothing to verify")
    return list(tokens[first : len(tokens) - 1]), first


@dataclass(frozen=True, slots=True)
class Acceptance:
    keep: int  # unverified decoded tokens kept as they were
    replacement: int | None  # verifier token at the first mismatch, if any

    @property
    def committed(self) -> int:
        return self.keep + (self.replacement is not None)


def accept(decoded: Sequence[int], verified: Sequence[int]) -> Acceptance:
    """Longest agreeing prefix, plus the verifier's token at the first disagreement."""
    if len(decoded) != len(verified) or not decoded:
        raise InvalidArgumentError("decoded and verified tokens must be non-empty and of one length")
    for i, (d, v) in enumerate(zip(decoded, verified, strict=True)):
        if d != v:
            return Acceptance(i, v)
    return Acceptance(len(decoded), None)


def plan_groups(request_ids: Sequence[str], group_size: int) -> list[list[str | None]]:
    """Pack requests into groups of exactly ``group_size`` slots (``None`` = dummy slot)."""
    if group_size < 1:
        raise InvalidArgumentError("group_size must be >= 1")
    groups: list[list[str | None]] = []
    for i in range(0, len(request_ids), group_size):
        group: list[str | None] = list(request_ids[i : i + group_size])
        groups.append(group + [None] * (group_size - len(group)))
    return groups
