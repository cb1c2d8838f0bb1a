"""Rotary position embeddings: the parameters of a checkpoint's RoPE, and its tables.

:func:`parse_rope` reads both ``config.json`` layouts — top-level ``rope_theta`` with a
``rope_scaling`` dict (transformers 4) and ``rope_parameters`` (transformers 5) — and
refuses what it does not implement (other RoPE types, partial rotary dimensions,
per-layer RoPE, unknown keys) instead of ignoring it. :func:`rope_tables` builds
``cos``/``sin`` for every position once, at load, then casts: the engine indexes them,
so no transcendental runs on a batch-dependent tensor. They are computed in float32,
step for step as transformers computes them (and as the model was trained): float64
tables differ from transformers' by up to ~5e-3 at position 131071 (the float32 angle
rounding grows with the position), which would move long-context logits away from
transformers' own.

Types, each as ``transformers`` computes it (``modeling_rope_utils``):

* ``default``: ``inv_freq[i] = theta ** (-2i / D)``.
* ``linear`` (position interpolation): ``inv_freq / factor``.
* ``llama3`` (Llama 3.1): wavelengths longer than ``original / low_freq_factor`` are
  divided by ``factor``, shorter than ``original / high_freq_factor`` kept, a smooth
  interpolation between.
* ``yarn`` (Peng et al., 2023): interpolation and extrapolation blended per dimension by
  a linear ramp between the correction dimensions of ``beta_fast``/``beta_slow``, and
  cos/sin scaled by the attention factor ``0.1 ln(factor) + 1`` (or the ``mscale``
  ratio, or ``attention_factor``).
* ``dynamic`` (dynamic NTK): transformers keeps the default frequencies up to
  ``max_position_embeddings`` and re-bases *every* position from the current sequence
  length beyond it, so no per-position table matches it there. The tables are the
  default ones and the context is capped at ``max_position_embeddings`` (vLLM instead
  serves a static NTK table that differs from transformers at every position).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from reasonserve.core.checks import check_positive
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["ROPE_TYPES", "RopeConfig", "parse_rope", "rope_tables"]

ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")
_KEYS = {
    "default": set(),
    "linear": {"factor"},
    "dynamic": {"factor"},
    "llama3": {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"},
    "yarn": {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow",
             "mscale", "mscale_all_dim", "truncate"},
}  # fmt: skip
_REQUIRED = {
    "linear": {"factor"},
    "dynamic": {"factor"},
    "llama3": {"factor", "low_freq_factor", "high_freq_factor"},
}


@dataclass(frozen=True, slots=True)
class RopeConfig:
    """One RoPE: its type, base and the scaling fields its type reads (see module doc)."""

    rope_type: str = "default"
    theta: float = 10000.0
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool = True

    def __post_init__(self) -> None:
        if self.rope_type not in ROPE_TYPES:
            raise InvalidArgumentError(
                f"RoPE type {self.rope_type!r} is not implemented; known: {ROPE_TYPES}"
            )
        for name in ("theta", "factor", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow"):
            check_positive(f"RoPE {name}", getattr(self, name))
        if self.rope_type in ("linear", "dynamic", "llama3", "yarn") and self.factor < 1:
            raise InvalidArgumentError(f"RoPE factor must be >= 1, got {self.factor!r}")
        if self.rope_type == "llama3" and self.high_freq_factor <= self.low_freq_factor:
            raise InvalidArgumentError("llama3 RoPE needs high_freq_factor > low_freq_factor")
        for name in ("mscale", "mscale_all_dim", "attention_factor"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise InvalidArgumentError(f"RoPE {name} must be a number or null, got {value!r}")
        if not isinstance(self.truncate, bool):
            raise InvalidArgumentError(f"RoPE truncate must be a bool, got {self.truncate!r}")
        original = self.original_max_position_embeddings
        if original is not None and (
            isinstance(original, bool) or not isinstance(original, int) or original < 1
        ):
            raise InvalidArgumentError(
                f"original_max_position_embeddings must be an int >= 1, got {original!r}"
            )

    def max_context_len(self, max_position_embeddings: int) -> int:
        """Positions the model serves: vLLM's rule (``linear`` and ``yarn`` extend the
        context by ``factor``), except ``dynamic`` (see module doc)."""
        if self.rope_type == "linear":
            return int(max_position_embeddings * self.factor)
        if self.rope_type == "yarn":
            return int((self.original_max_position_embeddings or max_position_embeddings) * self.factor)
        return max_position_embeddings


def parse_rope(raw: Mapping, max_position_embeddings: int) -> RopeConfig:
    """The RoPE of a parsed ``config.json`` (either layout); refuses what is not implemented."""
    scaling, params = raw.get("rope_scaling"), raw.get("rope_parameters")
    if scaling and params and dict(scaling) != {k: v for k, v in params.items() if k != "rope_theta"}:
        raise InvalidArgumentError("config.json has both rope_scaling and rope_parameters and they differ")
    fields = dict(scaling or params or {})
    if not isinstance(scaling or params or {}, Mapping):
        raise InvalidArgumentError("rope_scaling / rope_parameters must be a JSON object")
    if fields and all(isinstance(v, Mapping) for v in fields.values()):
        raise InvalidArgumentError("a RoPE per layer type (nested rope_parameters) is not implemented")
    partial = fields.pop("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))
    if partial not in (None, 1, 1.0):
        raise InvalidArgumentError(
            f"partial_rotary_factor {partial!r} (RoPE on part of a head) is not implemented"
        )
    theta = fields.pop("rope_theta", raw.get("rope_theta", 10000.0))
    kind = fields.pop("rope_type", None) or fields.pop("type", None) or "default"
    fields.pop("type", None)
    if kind not in ROPE_TYPES:
        raise InvalidArgumentError(f"RoPE type {kind!r} is not implemented; known: {', '.join(ROPE_TYPES)}")
    unknown = sorted(set(fields) - _KEYS[kind])
    if unknown:
        raise InvalidArgumentError(f"{kind} RoPE: field(s) {unknown} are not implemented")
    missing = sorted(_REQUIRED.get(kind, set()) - set(fields))
    if missing:
        raise InvalidArgumentError(f"{kind} RoPE needs {missing}")
    if kind in ("llama3", "yarn"):
        fields.setdefault("original_max_position_embeddings", max_position_embeddings)
    if kind == "yarn":
        if fields.get("factor") is None:
            fields["factor"] = max_position_embeddings / fields["original_max_position_embeddings"]
        for beta, default in (("beta_fast", 32.0), ("beta_slow", 1.0)):
            fields[beta] = fields.get(beta) or default  # transformers reads a 0 / null as the default
    return RopeConfig(rope_type=kind, theta=theta, **fields)


def _inv_freq(rope: RopeConfig, dim: int, seq_len: int | None = None) -> torch.Tensor:
    """``[dim // 2]`` float32 inverse frequencies, by transformers' own sequence of float32
    operations (so the same bits). ``seq_len``: the length ``dynamic`` re-bases from (its
    ``max_position_embeddings``, where transformers' base is ``theta`` up to rounding)."""
    theta = rope.theta
    if rope.rope_type == "dynamic" and seq_len is not None:
        theta = theta * ((rope.factor * seq_len / seq_len) - (rope.factor - 1)) ** (dim / (dim - 2))
    base = theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim)
    if rope.rope_type == "yarn":
        return _yarn(rope, base, dim)
    inv = 1.0 / base
    if rope.rope_type == "linear":
        return inv / rope.factor
    if rope.rope_type == "llama3":
        return _llama3(rope, inv)
    return inv


def _llama3(rope: RopeConfig, inv: torch.Tensor) -> torch.Tensor:
    original = rope.original_max_position_embeddings
    assert original is not None  # set by parse_rope
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > original / rope.low_freq_factor, inv / rope.factor, inv)
    smooth = (original / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
    smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
    medium = ~(wavelen < original / rope.high_freq_factor) * ~(wavelen > original / rope.low_freq_factor)
    return torch.where(medium, smoothed, scaled)


def _yarn(rope: RopeConfig, base: torch.Tensor, dim: int) -> torch.Tensor:
    original = rope.original_max_position_embeddings
    assert original is not None  # set by parse_rope

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(rope.theta))

    low, high = correction_dim(rope.beta_fast), correction_dim(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    high = high + 0.001 if low == high else high  # transformers' guard against a zero-width ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolation = 1 - ramp  # weight of the unscaled frequency
    return (1.0 / (rope.factor * base)) * (1 - extrapolation) + (1.0 / base) * extrapolation


def _attention_factor(rope: RopeConfig) -> float:
    if rope.rope_type != "yarn":
        return 1.0
    if rope.attention_factor is not None:
        return float(rope.attention_factor)

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if rope.mscale and rope.mscale_all_dim:
        return mscale(rope.factor, rope.mscale) / mscale(rope.factor, rope.mscale_all_dim)
    return mscale(rope.factor)


def rope_tables(
    rope: RopeConfig, head_dim: int, num_positions: int, *, dtype: torch.dtype, device
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, sin)``, each ``[num_positions, head_dim]`` (halves repeated, the HF
    ``rotate_half`` layout), scaled by the attention factor: float32 angles (position x
    inverse frequency) and their cos/sin on ``device``, as transformers computes them
    there, then cast to ``dtype``."""
    inv_freq = _inv_freq(rope, head_dim, num_positions).to(device)
    angles = torch.arange(num_positions, dtype=torch.int64, device=device).float()[:, None] * inv_freq
    scale = _attention_factor(rope)
    cos, sin = ((f(angles) * scale).to(dtype) for f in (torch.cos, torch.sin))
    return torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
