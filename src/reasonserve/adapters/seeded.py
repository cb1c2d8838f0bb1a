"""Seeded sampling inside another engine: force the token ``ops.sample`` draws.

vLLM and SGLang sample with their own random streams. Their logits-processor hooks
can only edit logits, so the adapters compute the token that
:func:`reasonserve.ops.sample` draws for a request — the same counter-based Gumbel
noise for its (seed, position), the same temperature, top-k, top-p and min-p — and
set every other vocabulary entry to ``-inf``. Whatever the engine's sampler then does
(greedy or random, any temperature, top-k, top-p) it can only pick that token. So a
seeded request gets the same tokens on the embedded engine, vLLM and SGLang whenever
the logits are the same (LLM-42 §4.3: the noise depends on (seed, position) only).

A request opts in with the extra argument ``reasonserve_seed`` (vLLM:
``vllm_xargs``; SGLang: ``custom_params``), an int in ``[0, 2**64)``. The position of
the token being drawn is the number of tokens before it (prompt + generated), as in
the embedded engine. Requests without the argument are left to the engine.

This module is engine-agnostic and imports no engine.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError
from reasonserve.ops.sampling import sample

__all__ = ["SEED_KEY", "SeededParams", "force_seeded", "seeded_params"]

SEED_KEY = "reasonserve_seed"
GREEDY_BELOW = 1e-5  # vLLM and SGLang treat a temperature below this as greedy
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SeededParams:
    """One seeded request's sampling parameters, in ``ops.sample``'s terms."""

    seed: int
    temperature: float = 1.0  # 0: greedy
    top_k: int = 0  # 0: off
    top_p: float = 1.0
    min_p: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**64:
            raise InvalidArgumentError(f"{SEED_KEY} must be an int in [0, 2**64), got {self.seed!r}")
        if not self.temperature >= 0 or self.temperature == float("inf"):
            raise InvalidArgumentError(f"temperature must be finite and >= 0, got {self.temperature!r}")
        if self.top_k < 0:
            raise InvalidArgumentError(f"top_k must be >= 0 (0 disables it), got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            raise InvalidArgumentError(f"top_p must lie in (0, 1], got {self.top_p!r}")
        if not 0 <= self.min_p <= 1:
            raise InvalidArgumentError(f"min_p must lie in [0, 1], got {self.min_p!r}")


def seeded_params(
    extra: Mapping | None, *, temperature: float, top_k: int | None, top_p: float, min_p: float
) -> SeededParams | None:
    """The request's :class:`SeededParams`, or None when ``extra`` has no ``reasonserve_seed``.

    ``temperature`` below 1e-5 means greedy; ``top_k`` of 0, -1 or None means off (the
    engines' conventions). Raises a typed error for a malformed seed or parameter.
    """
    if extra is None:
        return None
    if not isinstance(extra, Mapping):
        raise InvalidTypeError(f"extra arguments must be a mapping, got {type(extra).__name__}")
    seed = extra.get(SEED_KEY)
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidTypeError(f"{SEED_KEY} must be an int, got {type(seed).__name__}")
    temp = float(temperature)
    return SeededParams(
        seed=seed,
        temperature=0.0 if temp < GREEDY_BELOW else temp,
        top_k=0 if top_k is None or top_k < 0 else int(top_k),
        top_p=float(top_p),
        min_p=float(min_p),
    )


def force_seeded(
    logits: torch.Tensor, rows: Sequence[int], params: Sequence[SeededParams], positions: Sequence[int]
) -> torch.Tensor:
    """Turn each listed row of ``logits [N, V]`` into a one-hot: 0 at the token
    ``ops.sample`` draws for that row's params and position, ``-inf`` elsewhere.

    Edits ``logits`` in place and returns it. A row that ``ops.sample`` rejects (all
    ``-inf``, say) is left as it was and logged, so one bad row never fails a batch
    inside an engine worker.
    """
    if not rows:
        return logits
    tokens = _draw(logits, list(rows), list(params), list(positions))
    for row, token in zip(rows, tokens, strict=True):
        if token is None:
            continue
        logits[row].fill_(float("-inf"))
        logits[row, token] = 0.0
    return logits


def _draw(logits, rows, params, positions) -> list[int | None]:
    try:
        return list(_sample_rows(logits, rows, params, positions))
    except (InvalidArgumentError, InvalidTypeError):
        out: list[int | None] = []
        for i, row in enumerate(rows):
            try:
                out += _sample_rows(logits, [row], params[i : i + 1], positions[i : i + 1])
            except (InvalidArgumentError, InvalidTypeError) as err:
                _log.warning("reasonserve seeded sampling: row %d left to the engine: %s", row, err)
                out.append(None)
        return out


def _sample_rows(logits, rows, params, positions) -> list[int | None]:
    picked = logits[torch.tensor(rows, device=logits.device)]
    tokens = sample(
        picked,
        seeds=[p.seed for p in params],
        positions=list(positions),
        temperature=[p.temperature for p in params],
        top_k=[p.top_k for p in params],
        top_p=[p.top_p for p in params],
        min_p=[p.min_p for p in params],
    )
    return tokens.tolist()
