"""Per-token log-probabilities, as vLLM returns them: of the model's own distribution.

For each sampled token: ``log_softmax`` of its logits row (before temperature and the
other sampling filters, vLLM's default "raw" logprobs), the sampled token's value and
the ``k`` most likely tokens. ``ops.log_softmax`` keeps the value batch-invariant: a
token's logprobs from the invariant kernels do not depend on the batch it ran in.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from reasonserve import ops

__all__ = ["TokenLogprobs", "token_logprobs"]


class TokenLogprobs(NamedTuple):
    """One output token: its id, its logprob, and the top ``k`` (id, logprob), best first."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]


def token_logprobs(row: torch.Tensor, token: int, k: int) -> TokenLogprobs:
    """``row`` ``[V]``: the logits the token was sampled from; ``k`` in 0..20."""
    logp = ops.log_softmax(row.float()[None])[0]
    top = torch.topk(logp, k) if k else None
    pairs = tuple(zip(top.indices.tolist(), top.values.tolist(), strict=True)) if top is not None else ()
    return TokenLogprobs(token, float(logp[token]), pairs)
