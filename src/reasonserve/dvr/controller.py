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

__all__ = ["Acceptance", "DVRCounters", "DVRState", "accept", "plan_groups", "verify_inputs"]


@dataclass
class DVRState:
    """Per-request verification state and counters."""

    verified: int = 0  # output tokens verified so far
    rollbacks: int = 0
    tokens_rolled_back: int = 0
    verify_passes: int = 0
    verify_tokens: int = 0  # tokens this request occupied in verify passes, padding included

    def on_sampled(self, num_output: int, trusted: bool, deterministic: bool) -> None:
        """A token was appended (``num_output`` now). It is final when the request is not
        deterministic, or when it was sampled from invariant logits on a verified prefix."""
        if not deterministic or (trusted and self.verified == num_output - 1):
            self.verified = num_output

    def commit(self, decoded: Sequence[int], checked: Sequence[int], pass_tokens: int) -> Acceptance:
        """Apply one verify pass: ``decoded`` are the unverified tokens, ``checked`` the
        verifier's tokens at the same positions. Returns what to keep; the host truncates
        its output to ``verified`` and appends the replacement, if any."""
        result = accept(decoded, checked)
        self.verify_passes += 1
        self.verify_tokens += pass_tokens
        if result.replacement is not None:
            self.rollbacks += 1
            self.tokens_rolled_back += len(decoded) - result.keep
        self.verified += result.committed
        return result

    def unverified(self, num_output: int) -> int:
        return num_output - self.verified

    def needs_verify(self, num_output: int, window: int, stopped: bool) -> bool:
        pending = self.unverified(num_output)
        return pending >= window or (stopped and pending > 0)


@dataclass
class DVRCounters:
    """Host-wide totals (the sum of every request's :class:`DVRState` counters)."""

    verify_passes: int = 0  # fixed-shape passes (a pass verifies up to group_size requests)
    verify_tokens: int = 0
    rollbacks: int = 0
    tokens_rolled_back: int = 0
    verify_s: float = 0.0  # the host's wall time in verify passes


def verify_inputs(tokens: Sequence[int], num_prompt: int, state: DVRState) -> tuple[list[int], int]:
    """Tokens to replay and the position of the first: ``[last verified] + unverified[:-1]``.
    InvalidArgumentError when no token is unverified, or none precedes the first."""
    first = num_prompt + state.verified - 1  # position of the last verified token
    if first < max(num_prompt - 1, 0) or first >= len(tokens) - 1:
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
