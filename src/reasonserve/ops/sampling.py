"""Seeded, batch-invariant token sampling (Gumbel-max with counter-based noise).

For row ``r`` with seed ``s`` and position ``p``, vocabulary entry ``i`` gets the
noise ``g = -log(-log(u))`` with ``u = (hash32(s_lo, s_hi, p, i) + 0.5) / 2**32`` in
float64 (murmur3-style, see ``_hash``), and the token is
``argmax(logits / temperature + g)`` over the entries that survive top-k, top-p and
min-p. Temperature 0 is greedy: argmax with first-index tie-break.

Guarantee: a row's token depends only on that row's logits, seed, position and
parameters — never on the rest of the batch or its order — on every device.
The same (seed, position) gives the same noise in decode and in verify passes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError
from reasonserve.ops._checks import check_tensor
from reasonserve.ops._hash import MASK32, finalize, mix_word, uniform_open01
from reasonserve.ops._impl import triton_installed
from reasonserve.ops.softmax import softmax

__all__ = ["greedy", "gumbel_noise", "sample"]

Param = float | int | Sequence[float] | torch.Tensor | None


def _check_logits_shape(logits: torch.Tensor) -> None:
    check_tensor("logits", logits, ndim=2)
    if logits.shape[1] == 0:
        raise InvalidArgumentError("logits must have a non-empty vocabulary dimension")


def _raise_dead_rows(logits: torch.Tensor) -> None:
    rows = torch.isneginf(logits).all(dim=-1).nonzero().flatten().tolist()[:8]
    raise InvalidArgumentError(f"logits rows {rows} are all -inf: nothing can be sampled")


def _check_logits(logits: torch.Tensor) -> None:
    _check_logits_shape(logits)
    if bool(torch.isneginf(logits).all(dim=-1).any()):
        _raise_dead_rows(logits)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """``[B, V]`` -> ``[B]`` int64: argmax per row, first index on ties."""
    _check_logits(logits)
    return logits.argmax(dim=-1)


def _row_param(name: str, value: Param, batch: int, device, dtype) -> torch.Tensor:
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


def _split_u64(name: str, value, batch: int, device, low: int, high: int):
    """Return ``(lo, hi)`` 32-bit words ``[B]`` of an unsigned 64-bit per-row value."""
    if isinstance(value, torch.Tensor):
        if value.dtype not in (torch.int32, torch.int64):
            raise InvalidTypeError(f"{name} must be an integer tensor, got {value.dtype}")
        t = value.to(device=device, dtype=torch.int64)
        t = t.expand(batch) if t.dim() == 0 else t
        if t.shape != (batch,):
            raise InvalidArgumentError(f"{name} must have shape [{batch}], got {tuple(t.shape)}")
        if low >= 0 and high <= 2**63 and bool(((t < low) | (t >= high)).any()):
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
    lo = torch.tensor([v & MASK32 for v in items], dtype=torch.int64, device=device)
    hi = torch.tensor([(v >> 32) & MASK32 for v in items], dtype=torch.int64, device=device)
    return lo, hi


def gumbel_noise(seeds, positions, vocab_size: int, *, device=None) -> torch.Tensor:
    """Float64 Gumbel noise ``[B, vocab_size]`` for per-row seeds and positions.

    ``seeds``: int in ``[0, 2**64)``, a list of them, or an int64 tensor ``[B]`` (its
    bits read as unsigned). ``positions``: ints in ``[0, 2**32)`` likewise.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    return _noise(seeds, positions, _batch_of(seeds, positions), vocab_size, device)


def _noise(seeds, positions, batch: int, vocab_size: int, device) -> torch.Tensor:
    s_lo, s_hi = _split_u64("seeds", seeds, batch, device, 0, 2**64)
    p_lo, _ = _split_u64("positions", positions, batch, device, 0, 2**32)
    if device.type == "cuda" and triton_installed():
        from reasonserve.ops.triton.noise import uniform_triton

        u = uniform_triton(s_lo, s_hi, p_lo, vocab_size)  # one kernel, the same bits
    else:
        h = mix_word(mix_word(mix_word(torch.zeros_like(s_lo), s_lo), s_hi), p_lo)
        idx = torch.arange(vocab_size, dtype=torch.int64, device=device)
        u = uniform_open01(finalize(mix_word(h[:, None], idx[None, :]), 16))
    return -torch.log(-torch.log(u))


def _batch_of(seeds, positions) -> int:
    for v in (seeds, positions):
        if isinstance(v, torch.Tensor) and v.dim() == 1:
            return v.shape[0]
        if isinstance(v, Sequence) and not isinstance(v, str):
            return len(v)
    return 1


def _allowed(logits, top_k, top_p, min_p, used: list[bool]) -> torch.Tensor | None:
    """``[B, V]`` boolean mask of the tokens that survive the filters of each row
    (``used``: whether any row sets top-k, top-p, min-p); None when no row filters."""
    uses_k, uses_p, uses_min_p = used
    if not (uses_k or uses_p or uses_min_p):
        return None
    keep = torch.ones_like(logits, dtype=torch.bool)
    if uses_k:
        k = top_k.clamp(max=logits.shape[1])
        sorted_logits = logits.sort(dim=-1, descending=True, stable=True).values
        kth = sorted_logits.gather(1, (k.clamp(min=1) - 1)[:, None])
        keep &= (logits >= kth) | (k[:, None] == 0)
    if uses_p or uses_min_p:
        probs = softmax(logits, dim=-1, impl="torch")
        if uses_p:
            sp, order = probs.sort(dim=-1, descending=True, stable=True)
            before = sp.cumsum(dim=-1) - sp  # mass strictly ahead of each token
            keep_sorted = (before < top_p[:, None]) | (top_p[:, None] >= 1)
            keep &= torch.zeros_like(keep).scatter(1, order, keep_sorted)
        if uses_min_p:
            keep &= probs >= min_p[:, None] * probs.amax(dim=-1, keepdim=True)
    return keep


def _flags(logits, temperature, top_k, top_p, min_p) -> list[bool]:
    """Every data-dependent check of one call, read back in a single device sync:
    [dead row, bad temperature, bad top_k, bad top_p, bad min_p, uses top-k, top-p, min-p]."""
    return torch.stack([
        torch.isneginf(logits).all(dim=-1).any(),
        ~torch.isfinite(temperature).all() | (temperature < 0).any(),
        (top_k < 0).any(),
        ~((top_p > 0) & (top_p <= 1)).all(),
        ~((min_p >= 0) & (min_p <= 1)).all(),
        (top_k > 0).any(), (top_p < 1).any(), (min_p > 0).any(),
    ]).tolist()  # fmt: skip


def _check_params(flags: list[bool], temperature, top_k, top_p, min_p) -> None:
    if flags[1]:
        raise InvalidArgumentError(f"temperature must be finite and >= 0, got {temperature.tolist()[:8]}")
    if flags[2]:
        raise InvalidArgumentError(f"top_k must be >= 0 (0 disables it), got {top_k.tolist()[:8]}")
    if flags[3]:
        raise InvalidArgumentError(f"top_p must lie in (0, 1], got {top_p.tolist()[:8]}")
    if flags[4]:
        raise InvalidArgumentError(f"min_p must lie in [0, 1], got {min_p.tolist()[:8]}")


def sample(
    logits: torch.Tensor,
    *,
    seeds,
    positions,
    temperature: Param = 1.0,
    top_k: Param = None,
    top_p: Param = None,
    min_p: Param = None,
) -> torch.Tensor:
    """Sample one token per row of ``logits [B, V]``; returns int64 ``[B]``.

    Parameters
    ----------
    seeds : int, list of ints or int tensor ``[B]`` — 64-bit seeds
    positions : int, list of ints or int tensor ``[B]`` — token positions (< 2**32)
    temperature : scalar or ``[B]``; 0 means greedy for that row
    top_k : scalar or ``[B]`` ints, 0/None disables; ties at the k-th logit are kept
    top_p : scalar or ``[B]`` in (0, 1]; keeps the fewest highest-probability tokens
        whose mass reaches ``top_p`` (1/None disables)
    min_p : scalar or ``[B]`` in [0, 1]; keeps tokens with ``p >= min_p * max p``

    Notes
    -----
    NaN logits are not an error: a row that holds NaN returns the index of its first
    NaN, the same alone and batched.
    """
    _check_logits_shape(logits)
    batch, vocab = logits.shape
    dev = logits.device
    temp = _row_param("temperature", temperature, batch, dev, torch.float64)
    k = _row_param("top_k", 0 if top_k is None else top_k, batch, dev, torch.int64)
    p = _row_param("top_p", 1.0 if top_p is None else top_p, batch, dev, torch.float64)
    mp = _row_param("min_p", 0.0 if min_p is None else min_p, batch, dev, torch.float64)
    flags = _flags(logits, temp, k, p, mp)
    if flags[0]:
        _raise_dead_rows(logits)
    _check_params(flags, temp, k, p, mp)
    noise = _noise(seeds, positions, batch, vocab, dev)
    greedy_rows = temp == 0
    scaled = logits.to(torch.float64) / torch.where(greedy_rows, 1.0, temp)[:, None]
    keep = _allowed(scaled, k, p, mp, flags[5:])
    scores = scaled + noise if keep is None else torch.where(keep, scaled + noise, float("-inf"))
    sampled = torch.where(greedy_rows, logits.argmax(dim=-1), scores.argmax(dim=-1))
    nan = torch.isnan(logits)
    return torch.where(nan.any(dim=-1), nan.to(torch.int8).argmax(dim=-1), sampled)

