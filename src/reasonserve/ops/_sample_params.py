"""Per-row parameters of :func:`reasonserve.ops.sample`: scalars, host sequences or
tensors broadcast to ``[B]``, 64-bit seeds split into 32-bit words, and validation
(host values on the host; tensors read back only when asked)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError
from reasonserve.ops._hash import MASK32, row_state

__all__ = ["Param", "batch_of", "check_params", "row_param", "states"]

Param = float | int | Sequence[float] | torch.Tensor | None


def row_param(name: str, value: Param, batch: int, device, dtype) -> torch.Tensor:
    """Broadcast a scalar-or-per-row parameter to a ``[B]`` tensor."""
    if isinstance(value, torch.Tensor):
        t = value.to(device=device, dtype=dtype)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        t = torch.full((batch,), value, dtype=dtype, device=device)
    elif isinstance(value, Sequence) and not isinstance(value, str):
        t = torch.tensor(list(value), dtype=dtype, device=device)
    else:
        raise InvalidTypeError(f"{name} must be a number, a sequence or a tensor, got {type(value).__name__}")
    if t.dim() == 0:
        t = t.expand(batch)
    if t.shape != (batch,):
        raise InvalidArgumentError(f"{name} must be a scalar or have shape [{batch}], got {tuple(t.shape)}")
    return t


def _split_u64(name: str, value, batch: int, device, low: int, high: int, check: bool = True):
    """Return ``(lo, hi)`` 32-bit words ``[B]`` of an unsigned 64-bit per-row value.
    ``check=False`` skips the range check of tensors (it would read them back)."""
    if isinstance(value, torch.Tensor):
        if value.dtype not in (torch.int32, torch.int64):
            raise InvalidTypeError(f"{name} must be an integer tensor, got {value.dtype}")
        t = value.to(device=device, dtype=torch.int64)
        t = t.expand(batch) if t.dim() == 0 else t
        if t.shape != (batch,):
            raise InvalidArgumentError(f"{name} must have shape [{batch}], got {tuple(t.shape)}")
        if check and low >= 0 and high <= 2**63 and bool(((t < low) | (t >= high)).any()):
            raise InvalidArgumentError(f"{name} must lie in [{low}, {high}), got {t.tolist()[:8]}")
        return t & MASK32, (t >> 32) & MASK32
    if isinstance(value, int):
        items = [value] * batch
    elif isinstance(value, Sequence) and not isinstance(value, str):
        items = list(value)
    else:
        raise InvalidTypeError(f"{name} must be an int, a sequence of ints or a tensor")
    if len(items) != batch:
        raise InvalidArgumentError(f"{name} must be one int or {batch} ints, got {len(items)}")
    for v in items:
        if not isinstance(v, int) or isinstance(v, bool):
            raise InvalidTypeError(f"{name} entries must be ints, got {type(v).__name__}")
        if not low <= v < high:
            raise InvalidArgumentError(f"{name} entries must lie in [{low}, {high}), got {v}")
    words = torch.tensor([[v & MASK32, (v >> 32) & MASK32] for v in items], dtype=torch.int64)
    words = words.to(device, non_blocking=True)
    return words[:, 0], words[:, 1]


def states(seeds, positions, batch: int, device, check: bool = True) -> torch.Tensor:
    s_lo, s_hi = _split_u64("seeds", seeds, batch, device, 0, 2**64, check)
    p_lo, _ = _split_u64("positions", positions, batch, device, 0, 2**32, check)
    return row_state(s_lo, s_hi, p_lo)


def batch_of(seeds, positions) -> int:
    for v in (seeds, positions):
        if isinstance(v, torch.Tensor) and v.dim() == 1:
            return v.shape[0]
        if isinstance(v, Sequence) and not isinstance(v, str):
            return len(v)
    return 1


def _host_values(value) -> list | None:
    """The per-row values when they are on the host (validated there, no sync)."""
    if value is None or isinstance(value, torch.Tensor):
        return None
    return list(value) if isinstance(value, Sequence) and not isinstance(value, str) else [value]


def check_params(temperature, top_k, top_p, min_p, check_tensors: bool) -> list[bool]:
    """Validate the parameters; returns whether [top-k, top-p, min-p] can filter. Host
    values are checked on the host; tensors are read back once when ``check_tensors``
    (else trusted, and their filter counted as used)."""
    rules = [("temperature", temperature, lambda v: 0 <= v < float("inf"), "finite and >= 0", None),
             ("top_k", top_k, lambda v: v >= 0, ">= 0 (0 disables it)", 0),
             ("top_p", top_p, lambda v: 0 < v <= 1, "in (0, 1]", 1.0),
             ("min_p", min_p, lambda v: 0 <= v <= 1, "in [0, 1]", 0.0)]  # fmt: skip
    used = []
    for name, value, ok, rule, off in rules:
        values = _host_values(value)
        if values is None and isinstance(value, torch.Tensor):
            if not check_tensors:
                used.append(True)
                continue
            values = value.reshape(-1).tolist()
        values = values or []
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and ok(v) for v in values):
            raise InvalidArgumentError(f"{name} must be {rule}, got {values[:8]}")
        used.append(any(v != off for v in values))
    return used[1:]
