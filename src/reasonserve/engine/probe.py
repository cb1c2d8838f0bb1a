"""Probing forks (Dynasor's probe-in-the-middle, host side): decode a fork of a live
request's prefix plus a suffix without changing the request.

The fork shares the request's full KV blocks that hold trusted K/V (reference counted,
never written) and computes the rest into fresh blocks, which are freed afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine.kernels import INVARIANT
from reasonserve.engine.model_runner import Chunk
from reasonserve.engine.requests import check_tokens
from reasonserve.engine.sampling_params import SamplingParams

__all__ = ["probe"]


def probe(
    engine, seq, suffix_tokens: Sequence[int], max_tokens: int, params: SamplingParams | None
) -> list[int]:
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise InvalidArgumentError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
    if params is not None and not isinstance(params, SamplingParams):
        raise InvalidArgumentError("params must be a SamplingParams or None")
    params = params or SamplingParams(max_tokens=max_tokens, temperature=0.0)
    suffix = check_tokens(suffix_tokens, engine.model.cfg.vocab_size, "suffix_tokens")
    bs = engine.config.block_size
    trusted = seq.num_computed if seq.status == "running" else 0
    if seq.params.deterministic and engine.config.mode == "dvr":
        trusted = min(trusted, len(seq.prompt))  # decoded KV may come from the stock kernels
    cached = trusted // bs * bs
    table = engine.blocks.fork(seq.block_table[: cached // bs])
    try:
        return _decode(engine, table, cached, seq.tokens[cached:] + suffix, max_tokens, params, seq.seed)
    finally:
        engine.blocks.free(table)


def _decode(
    engine, table: list[int], cached: int, feed: list[int], max_tokens: int, params: SamplingParams, seed: int
) -> list[int]:
    out: list[int] = []
    seed = params.seed if params.seed is not None else seed
    while len(out) < max_tokens and cached + len(feed) < engine.max_model_len:
        engine.blocks.ensure_capacity(table, cached + len(feed))  # fresh blocks only: no copies
        logits = engine.runner.run([Chunk(feed, cached, table)], INVARIANT)
        cached += len(feed)
        token = engine.runner.sample(logits, [params], [seed], [cached])[0]
        if isinstance(token, Exception):
            raise token
        out.append(token)
        if token in engine.config.all_eos_token_ids:
            break
        feed = [token]
    return out
