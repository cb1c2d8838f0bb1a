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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError
from reasonserve.ops.sampling import sample_into

__all__ = ["SEED_KEY", "SeededParams", "SlotTable", "force_seeded", "seeded_params"]

SEED_KEY = "reasonserve_seed"
GREEDY_BELOW = 1e-5  # vLLM and SGLang treat a temperature below this as greedy


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

    Edits ``logits`` in place (one fused pass per row, no ``[rows, V]`` buffer, no host
    sync) and returns it. A row where nothing can be sampled (all ``-inf``) is left as it
    was, so one bad row never fails a batch inside an engine worker.
    """
    if not rows:
        return logits
    sample_into(
        logits,
        rows=list(rows),
        seeds=[p.seed for p in params],
        positions=list(positions),
        temperature=[p.temperature for p in params],
        top_k=_filter([p.top_k for p in params], 0),
        top_p=_filter([p.top_p for p in params], 1.0),
        min_p=_filter([p.min_p for p in params], 0.0),
        one_hot=True,
    )
    return logits


def _filter(values: list, off) -> list | None:
    """None when no row uses the filter (its pass is skipped)."""
    return values if any(v != off for v in values) else None


class SlotTable:
    """Seeded params per persistent request slot, as device tensors, for engines whose
    logits rows map to slots through a device tensor (vLLM's Model Runner V2): the rows
    of a step are sampled without reading the mapping back on the host."""

    def __init__(self, num_slots: int, device) -> None:
        def zeros(dtype):
            return torch.zeros(num_slots, dtype=dtype, device=device)

        self.active, self.seed, self.top_k = zeros(torch.bool), zeros(torch.int64), zeros(torch.int64)
        self.temperature, self.top_p, self.min_p = (zeros(torch.float64) for _ in range(3))

    def set(self, slot: int, params: SeededParams | None) -> None:
        """Slot ``slot`` now holds ``params`` (None: a request that did not opt in)."""
        self.active[slot] = params is not None
        if params is not None:
            self.seed[slot] = params.seed - (1 << 64) if params.seed >= 1 << 63 else params.seed
            self.temperature[slot] = params.temperature
            self.top_k[slot] = params.top_k
            self.top_p[slot] = params.top_p
            self.min_p[slot] = params.min_p

    def sample(self, logits: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor, live) -> None:
        """One-hot the rows whose slot (``slots [R]``, a device tensor, row ``i`` of
        ``logits``) is active, at the token drawn for ``positions [R]``. ``live``: the
        params of the active slots, read on the host only to skip unused filters."""
        slots = slots.to(torch.int64)
        live = list(live)
        sample_into(
            logits,
            rows=torch.arange(slots.numel(), device=logits.device),
            active=self.active[slots],
            seeds=self.seed[slots],
            positions=positions.to(torch.int64),
            temperature=self.temperature[slots],
            top_k=self.top_k[slots] if any(p.top_k for p in live) else None,
            top_p=self.top_p[slots] if any(p.top_p < 1 for p in live) else None,
            min_p=self.min_p[slots] if any(p.min_p > 0 for p in live) else None,
            one_hot=True,
        )
