"""PASCAL's queue rule, written once (Kim et al., "PASCAL: A Phase-Aware Scheduling Algorithm
for Serving Reasoning-based LLMs", §IV-C and §V-A). Every path of
:class:`~reasonserve.policies.pascal.PascalPolicy` (its ranking, its fill, its quiet-steps
bound, its column walk of a long waiting queue) asks these two functions.

* "High-priority queue stores requests in the reasoning phase" (the prefill included:
  footnote 2 counts it as reasoning); "Low-priority queue: stores requests in the answering
  phase".
* Demotion: "the intra-instance scheduler demotes the reasoning request whose KV-cache size
  exceeds a user-defined threshold to the low-priority queue" (§V-A: "reasoning requests
  exceeding 5000 tokens are demoted"): its sequence, prompt plus generated tokens.
* Each queue is round-robin with its own token quantum (§V-A: "Token quantum is set to 500
  ... for each queue"). A request's quantum counts the tokens it computed since it was
  admitted *and* since it entered its queue: one that reaches its end of thinking, or is
  demoted while it runs, starts the low queue with a fresh quantum.
"""

from __future__ import annotations

from typing import Any, overload

import numpy as np

from reasonserve.core.phase import Phase
from reasonserve.core.views import RequestView

__all__ = ["HIGH", "LOW", "in_low_queue", "place"]

HIGH, LOW = 0, 1
_ANSWERING = Phase.ANSWERING


@overload
def in_low_queue(answering: bool, num_tokens: int, demote_threshold_tokens: int) -> bool: ...
@overload
def in_low_queue(answering: np.ndarray, num_tokens: np.ndarray, demote_threshold_tokens: int) -> np.ndarray: ...  # noqa: E501
def in_low_queue(answering: Any, num_tokens: Any, demote_threshold_tokens: int) -> Any:
    """Whether a request is in the low queue: it is answering, or its sequence of
    ``num_tokens`` passed the demotion threshold. For one request (a bool and an int) or
    for numpy arrays of them, element by element."""
    return answering | (num_tokens > demote_threshold_tokens)


def place(r: RequestView, demote_threshold_tokens: int) -> tuple[int, int]:
    """(queue, tokens of its quantum used) of ``r``; the host counts ``r.quantum_used``
    since admission, and a request that entered the low queue since then counts from there:
    its answer tokens, or its tokens past the threshold (a prompt already past it was in the
    low queue from its admission)."""
    answering = r.phase is _ANSWERING
    tokens = r.num_prompt_tokens + r.num_output_tokens
    used = r.quantum_used
    if not in_low_queue(answering, tokens, demote_threshold_tokens):
        return HIGH, used
    if answering:
        since = r.num_answer_tokens  # None: the host does not count them
    elif r.num_prompt_tokens <= demote_threshold_tokens:
        since = tokens - demote_threshold_tokens
    else:
        since = None
    return LOW, used if since is None or used <= since else since
