"""Request admission checks and prompt prefix hashes."""

from __future__ import annotations

from collections.abc import Sequence

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine.block_manager import BlockManager
from reasonserve.engine.sampling_params import SamplingParams

__all__ = ["check_committed", "check_prompt", "check_tokens", "prefix_hashes"]


def check_tokens(tokens: object, vocab: int, name: str = "prompt") -> list[int]:
    if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__iter__"):
        raise InvalidArgumentError(f"{name} must be a non-empty list of token ids")
    out = list(tokens)  # type: ignore[call-overload]
    if not out:
        raise InvalidArgumentError(f"{name} must be a non-empty list of token ids")
    if any(not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab for t in out):
        raise InvalidArgumentError(f"{name} token ids must be ints in [0, {vocab})")
    return out


def check_prompt(
    prompt: Sequence[int], params: SamplingParams, vocab: int, max_model_len: int, kv_tokens: int
) -> list[int]:
    """The prompt as a list, or InvalidArgumentError if the request is malformed or can
    never fit: prompt + max_tokens over ``max_model_len`` or over the KV cache."""
    if not isinstance(params, SamplingParams):
        raise InvalidArgumentError("params must be a SamplingParams")
    tokens = check_tokens(prompt, vocab)
    total = len(tokens) + params.max_tokens
    if total > max_model_len:
        raise InvalidArgumentError(
            f"prompt ({len(tokens)} tokens) + max_tokens ({params.max_tokens}) = {total} "
            f"exceeds max_model_len={max_model_len}"
        )
    if total > kv_tokens:
        raise InvalidArgumentError(
            f"prompt ({len(tokens)} tokens) + max_tokens ({params.max_tokens}) = {total} "
            f"exceeds the whole KV cache ({kv_tokens} tokens)"
        )
    return tokens


def check_committed(committed: Sequence[int], params: SamplingParams, vocab: int) -> list[int]:
    """Output tokens committed elsewhere (a migrated request), as a list; there must be
    room for at least one more token under ``max_tokens``."""
    tokens = check_tokens(committed, vocab, "committed_output")
    if len(tokens) >= params.max_tokens:
        raise InvalidArgumentError(
            f"committed_output has {len(tokens)} tokens: nothing left to generate under "
            f"max_tokens={params.max_tokens}"
        )
    return tokens


def prefix_hashes(tokens: Sequence[int], block_size: int) -> tuple[int, ...]:
    """Chained hashes of the prompt's full blocks (the prefix cache's keys)."""
    out, parent = [], None
    for b in range(len(tokens) // block_size):
        parent = BlockManager.chain_hash(parent, tokens[b * block_size : (b + 1) * block_size])
        out.append(parent)
    return tuple(out)
