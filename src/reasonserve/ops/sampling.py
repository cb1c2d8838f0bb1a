"""Seeded, batch-invariant token sampling (Gumbel-max with counter-based noise).

For row ``r`` with seed ``s`` and position ``p``, vocabulary entry ``i`` gets the
noise ``g = -log(-log(u))`` with ``u = (hash32(s_lo, s_hi, p, i) + 0.5) / 2**32``
(murmur3-style, see ``_hash``), evaluated in float64 with a fixed sequence of
correctly rounded operations (``_hash.log64``), and the token is
``argmax(logits / temperature + g)`` (float64, first index on ties) over the
candidates that survive top-k, top-p and min-p. Temperature 0 is greedy: argmax of the
logits with first-index tie-break.

Filters are per-row thresholds on ``logits / temperature``: top-k keeps the entries at
or above the k-th largest (ties kept), min-p keeps ``x >= max + log(min_p)``
(``p >= min_p * max p``), top-p keeps the fewest highest entries whose probability mass
reaches ``top_p`` (ties at the cut kept).

Guarantees
----------
* A row's token depends only on that row's logits, seed, position and parameters —
  never on the rest of the batch, its order, the thread count or the implementation
  (torch, native C++ or Triton): the noise and the scores have the same bits on every
  device (IEEE add/sub/mul/div only, no library ``log``, no fused multiply-add).
* Greedy, temperature-only, top-k and min-p rows therefore give the same token on CPU
  and GPU for the same logits. The top-p cut uses torch's ``exp`` and ``cumsum``, whose
  last bits can differ by device: a top-p row can differ across devices only when the
  cumulative mass of the sorted candidates lies within rounding (~1e-15) of ``top_p``.
* The same (seed, position) gives the same noise in decode and in verify passes.

Cost: the native (CPU) and Triton (CUDA) paths make one fused pass per row with no
``[rows, vocab]`` buffer; filters add a chunked sort (top-k, top-p) whose scratch is at
most about one logits-sized buffer. :func:`sample_into` runs without any host sync.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reasonserve.core.errors import ImplementationUnavailableError, InvalidArgumentError, InvalidTypeError
from reasonserve.ops import _native
from reasonserve.ops._checks import check_tensor
from reasonserve.ops._hash import gumbel_from_uniform, hash_columns, log64, uniform_open01
from reasonserve.ops._impl import triton_installed, triton_interpreting
from reasonserve.ops._sample_params import Param, batch_of, check_params, row_param, states

__all__ = ["BAD_ROW", "DEAD_ROW", "INACTIVE_ROW", "greedy", "gumbel_noise", "sample", "sample_into"]

#: Token :func:`sample_into` returns for a row where nothing can be sampled (all -inf).
DEAD_ROW = -1
#: Token :func:`sample_into` returns for a row it was told to skip.
INACTIVE_ROW = -2
#: Token :func:`sample_into` returns for an entry of a ``rows`` tensor outside ``[0, N)``.
BAD_ROW = -3
_IMPLS = ("auto", "torch", "native", "triton")
_SCRATCH_BYTES_PER_ENTRY = 40  # float64 scores, sort values and indices, weights, cumsum


def _check_logits_shape(logits: torch.Tensor) -> None:
    check_tensor("logits", logits, ndim=2)
    if logits.shape[1] == 0:
        raise InvalidArgumentError("logits must have a non-empty vocabulary dimension")


def _raise_dead_rows(rows: list[int]) -> None:
    raise InvalidArgumentError(f"logits rows {rows[:8]} are all -inf: nothing can be sampled")


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """``[B, V]`` -> ``[B]`` int64: argmax per row, first index on ties."""
    _check_logits_shape(logits)
    if bool(torch.isneginf(logits).all(dim=-1).any()):
        _raise_dead_rows(torch.isneginf(logits).all(dim=-1).nonzero().flatten().tolist())
    return logits.argmax(dim=-1)


# noise -----------------------------------------------------------------------------------
def gumbel_noise(seeds, positions, vocab_size: int, *, device=None) -> torch.Tensor:
    """Float64 Gumbel noise ``[B, vocab_size]`` for per-row seeds and positions.

    ``seeds``: int in ``[0, 2**64)``, a list of them, or an int64 tensor ``[B]`` (its
    bits read as unsigned). ``positions``: ints in ``[0, 2**32)`` likewise.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    state = states(seeds, positions, batch_of(seeds, positions), device)
    return gumbel_from_uniform(uniform_open01(hash_columns(state, 0, vocab_size)))


# filters as thresholds ----------------------------------------------------------------
def _chunk_rows(logits: torch.Tensor, count: int) -> int:
    """Rows per chunk so that a chunk's float64 scratch stays near one logits buffer."""
    budget = logits.element_size() * logits.numel()
    return max(1, min(count, budget // (_SCRATCH_BYTES_PER_ENTRY * logits.shape[1])))


def _thresholds(logits, rows, temp, top_k, top_p, min_p, used: list[bool]) -> torch.Tensor:
    """``[R]`` float64: candidates of row ``rows[j]`` have ``logits / temp >= out[j]``."""
    uses_k, uses_p, uses_min_p = used
    out = torch.full(rows.shape, float("-inf"), dtype=torch.float64, device=logits.device)
    if not any(used):
        return out
    vocab = logits.shape[1]
    step = _chunk_rows(logits, rows.numel())
    for a in range(0, rows.numel(), step):
        b = min(a + step, rows.numel())
        t = temp[a:b]
        scaled = logits[rows[a:b]].to(torch.float64) / torch.where(t == 0, 1.0, t)[:, None]
        top = scaled.amax(dim=-1)
        cut = out[a:b]
        if uses_min_p:
            mp = min_p[a:b]
            floor = top + log64(torch.where(mp > 0, mp, 1.0))
            cut = torch.maximum(cut, torch.where(mp > 0, floor, float("-inf")))
        if uses_k or uses_p:
            ordered = scaled.sort(dim=-1, descending=True).values
            del scaled
            if uses_k:
                k = top_k[a:b].clamp(max=vocab)
                kth = ordered.gather(1, (k.clamp(min=1) - 1)[:, None])[:, 0]
                cut = torch.maximum(cut, torch.where(k > 0, kth, float("-inf")))
            if uses_p:
                cut = torch.maximum(cut, _top_p_cut(ordered, top[:, None], top_p[a:b]))
        out[a:b] = cut
    return out


def _top_p_cut(ordered: torch.Tensor, top: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """The lowest kept value of rows sorted descending: the first whose mass ahead of it
    reaches ``top_p``; -inf where ``top_p >= 1``."""
    weights = torch.exp(ordered - top)
    mass = weights.cumsum(dim=-1)
    ahead = mass - weights
    kept = (ahead < top_p[:, None] * mass[:, -1:]).sum(dim=-1)
    cut = ordered.gather(1, (kept.clamp(min=1) - 1)[:, None])[:, 0]
    return torch.where(top_p >= 1, float("-inf"), cut)


# the three implementations ------------------------------------------------------------
def _tokens_torch(logits, rows, active, state, temp, thr, one_hot: bool) -> torch.Tensor:
    """The definition, chunked by rows (float64 scratch of about one logits buffer). An
    entry outside ``[0, N)`` reads row 0 in its place and takes ``BAD_ROW``."""
    out = torch.empty(rows.shape, dtype=torch.int64, device=logits.device)
    inside = (rows >= 0) & (rows < logits.shape[0])
    rows = torch.where(inside, rows, 0)
    step = _chunk_rows(logits, rows.numel())
    for a in range(0, rows.numel(), step):
        b = min(a + step, rows.numel())
        r = rows[a:b]
        x = logits[r].to(torch.float64)
        t = temp[a:b, None]
        greedy_rows = t == 0
        scaled = x / torch.where(greedy_rows, 1.0, t)
        noise = gumbel_from_uniform(uniform_open01(hash_columns(state[a:b], 0, x.shape[1])))
        scores = torch.where(scaled >= thr[a:b, None], scaled + noise, float("-inf"))
        scores = torch.where(greedy_rows, x, scores)
        best = scores.max(dim=-1)
        nan = torch.isnan(x)
        tok = torch.where(best.values == float("-inf"), DEAD_ROW, best.indices)
        tok = torch.where(nan.any(dim=-1), nan.to(torch.int8).argmax(dim=-1), tok)
        tok = torch.where(active[a:b], tok, INACTIVE_ROW)
        tok = torch.where(inside[a:b], tok, BAD_ROW)
        out[a:b] = tok
        if one_hot:
            _write_one_hot(logits, r, tok)
    return out


def _write_one_hot(logits: torch.Tensor, r: torch.Tensor, tok: torch.Tensor) -> None:
    """Rows ``r`` with ``tok >= 0`` become one-hot; every entry naming the same row writes
    the same content (a skipped entry standing in for row 0 never undoes its one-hot)."""
    per_row = torch.full((logits.shape[0] + 1,), -1, dtype=torch.int64, device=logits.device)
    per_row.scatter_(0, torch.where(tok >= 0, r, logits.shape[0]), tok)  # skipped: the spare slot
    hot_tok = per_row[r]
    hot = torch.full_like(logits[r], float("-inf"))
    hot.scatter_(1, hot_tok.clamp(min=0)[:, None], 0.0)
    logits[r] = torch.where((hot_tok >= 0)[:, None], hot, logits[r])


def _native_ready() -> bool:
    return _native.available() and hasattr(torch.ops.reasonserve, "seeded_sample")


def _resolve(impl: str, logits: torch.Tensor) -> str:
    if impl not in _IMPLS:
        raise InvalidArgumentError(f"impl must be one of {_IMPLS}, got {impl!r}")
    on_cpu = logits.device.type == "cpu"
    if impl == "auto":
        if on_cpu:
            if _native_ready():
                return "native"
            if not _native.available():
                _native.warn_fallback()  # the same bits, slower
            return "torch"
        return "triton" if logits.device.type == "cuda" and triton_installed() else "torch"
    if impl == "native" and not (on_cpu and _native_ready()):
        raise ImplementationUnavailableError(
            f"impl='native' needs CPU logits and the built extension (device={logits.device}, "
            f"extension: {_native.load_error() or 'loaded, without seeded_sample: rebuild it'})"
        )
    if impl == "triton" and not (triton_installed() and (not on_cpu or triton_interpreting())):
        raise ImplementationUnavailableError(
            "impl='triton' needs the triton package and CUDA logits (or CPU logits with TRITON_INTERPRET=1)"
        )
    return impl


def _run(impl, logits, rows, active, state, temp, thr, one_hot: bool) -> torch.Tensor:
    if impl != "torch" and logits.stride(1) != 1:
        if one_hot:
            raise InvalidArgumentError("one_hot rewrites rows in place: logits need a unit column stride")
        logits = logits.contiguous()
    if impl == "native":
        isa = _native.selected_isa()
        return torch.ops.reasonserve.seeded_sample(logits, rows, active, state, temp, thr, one_hot, isa)
    if impl == "triton":
        from reasonserve.ops.triton.sampling import sample_triton

        return sample_triton(logits, rows, active, state, temp, thr, one_hot)
    return _tokens_torch(logits, rows, active, state, temp, thr, one_hot)


# public entry points ------------------------------------------------------------------
def sample_into(
    logits: torch.Tensor,
    *,
    seeds,
    positions,
    temperature: Param = 1.0,
    top_k: Param = None,
    top_p: Param = None,
    min_p: Param = None,
    rows: torch.Tensor | Sequence[int] | None = None,
    active: torch.Tensor | None = None,
    one_hot: bool = False,
    impl: str = "auto",
) -> torch.Tensor:
    """Sample rows ``rows`` (default: all) of ``logits [N, V]`` without any host sync;
    returns int64 ``[R]`` on the logits' device.

    ``DEAD_ROW`` (-1) marks a row where nothing can be sampled, ``INACTIVE_ROW`` (-2) a
    row whose ``active`` flag is False (it is not read), ``BAD_ROW`` (-3) an entry of a
    ``rows`` tensor outside ``[0, N)`` (nothing is read or written for it: a rows tensor is
    not read back, so it is bounded on the device; a host sequence is checked on the host).
    With ``one_hot`` each sampled row of ``logits`` is rewritten in place: 0 at its token,
    -inf elsewhere (dead, inactive and bad rows are left as they are; give distinct rows).
    Per-row parameters (scalars, host sequences or device tensors ``[R]``) are those of
    :func:`sample`; host values are validated on the host, tensors are trusted (nothing is
    read back; their shapes and dtypes are checked).
    """
    _check_logits_shape(logits)
    dev = logits.device
    rows_t = _row_index(rows, logits.shape[0], dev)
    count = rows_t.numel()
    used = check_params(temperature, top_k, top_p, min_p, check_tensors=False)
    temp = row_param("temperature", temperature, count, dev, torch.float64)
    state = states(seeds, positions, count, dev, check=False)
    act = torch.ones(count, dtype=torch.bool, device=dev) if active is None else active.to(dev, torch.bool)
    if act.shape != (count,):
        raise InvalidArgumentError(f"active must have shape [{count}], got {tuple(act.shape)}")
    inside_rows = torch.where((rows_t >= 0) & (rows_t < logits.shape[0]), rows_t, 0)  # BAD_ROW's stand-in
    thr = _thresholds(logits, inside_rows, temp, *_filters(top_k, top_p, min_p, count, dev), used)
    return _run(_resolve(impl, logits), logits, rows_t, act, state, temp, thr, one_hot)


def _filters(top_k, top_p, min_p, count: int, dev) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (
        row_param("top_k", 0 if top_k is None else top_k, count, dev, torch.int64),
        row_param("top_p", 1.0 if top_p is None else top_p, count, dev, torch.float64),
        row_param("min_p", 0.0 if min_p is None else min_p, count, dev, torch.float64),
    )


def _row_index(rows, num_rows: int, dev) -> torch.Tensor:
    if rows is None:
        return torch.arange(num_rows, device=dev)
    if isinstance(rows, torch.Tensor):  # not read back: an entry outside [0, N) gives BAD_ROW
        if rows.dtype not in (torch.int32, torch.int64):
            raise InvalidTypeError(f"rows must be an int32 or int64 tensor, got {rows.dtype}")
        if rows.dim() != 1:
            raise InvalidArgumentError(f"rows must be one-dimensional, got shape {tuple(rows.shape)}")
        return rows.to(dev, torch.int64)
    items = list(rows)
    if any(isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < num_rows for r in items):
        raise InvalidArgumentError(f"rows must be ints in [0, {num_rows}), got {items[:8]}")
    return torch.tensor(items, dtype=torch.int64).to(dev, non_blocking=True)


def sample(
    logits: torch.Tensor,
    *,
    seeds,
    positions,
    temperature: Param = 1.0,
    top_k: Param = None,
    top_p: Param = None,
    min_p: Param = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Sample one token per row of ``logits [B, V]``; returns int64 ``[B]``.

    Parameters
    ----------
    seeds : int, list of ints or int tensor ``[B]`` — 64-bit seeds
    positions : int, list of ints or int tensor ``[B]`` — token positions (< 2**32)
    temperature : scalar or ``[B]``; 0 means greedy for that row
    top_k : scalar or ``[B]`` ints, 0/None disables; ties at the k-th logit are kept
    top_p : scalar or ``[B]`` in (0, 1]; keeps the fewest highest-probability tokens
        whose mass reaches ``top_p`` (ties at the cut kept; 1/None disables)
    min_p : scalar or ``[B]`` in [0, 1]; keeps tokens with ``p >= min_p * max p``
    impl : "auto" (Triton on CUDA, the native kernel on CPU, else torch), "torch",
        "native" or "triton"; all give the same bits

    Raises
    ------
    InvalidArgumentError
        For a row of all ``-inf`` (after reading the tokens: the call's one host sync)
        and for bad parameters.

    Notes
    -----
    NaN logits are not an error: a row that holds NaN returns the index of its first
    NaN, the same alone and batched.
    """
    _check_logits_shape(logits)
    batch = logits.shape[0]
    check_params(temperature, top_k, top_p, min_p, check_tensors=True)
    states(seeds, positions, batch, logits.device)  # range checks of tensor seeds/positions
    tokens = sample_into(logits, seeds=seeds, positions=positions, temperature=temperature, top_k=top_k,
                         top_p=top_p, min_p=min_p, impl=impl)  # fmt: skip
    dead = (tokens == DEAD_ROW).nonzero().flatten().tolist()
    if dead:
        _raise_dead_rows(dead)
    return tokens
