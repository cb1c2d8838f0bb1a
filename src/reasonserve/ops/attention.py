"""Batch-invariant scaled dot-product attention (prefill and decode forms).

Layout: ``q [B, Hq, S, D]``, ``k``/``v`` ``[B, Hkv, T, D]`` with ``Hq % Hkv == 0``
(grouped-query attention: query head ``h`` reads KV head ``h // (Hq // Hkv)``).
Causal masking is bottom-right aligned: query ``i`` of a sequence holding ``L`` keys
sits at position ``L - S + i`` and sees keys ``0 .. L - S + i``.

Guarantee: bitwise batch-invariant and run-to-run deterministic. Each sequence's
result depends only on its own ``q``, its first ``L`` keys/values and ``L``:

* native (CPU): the fixed-order kernel of ``_csrc/fixed_order.h`` (the same one
  ``paged_attention`` uses: ``k``/``v`` are read as a cache of ``B`` blocks of ``T``
  tokens), identical bits on every CPU.
* torch reference: dot products and sums over keys are fixed pairwise trees
  (``_fixed_order.tree_sum``) over KV chunks of :data:`KV_SPLIT_TOKENS` keys, chunk
  results combined by a tree in chunk order. A zero-padded tree gives the same bits
  as the unpadded one, so padding to the longest sequence in a batch changes nothing.
* Triton: one program per (sequence, head, query block) walks keys in fixed
  ``BLOCK_N`` chunks in order (one KV split, no split-KV reduction).
"""

from __future__ import annotations

import math

import torch

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError
from reasonserve.ops import _native_calls
from reasonserve.ops._checks import accumulation_dtype, check_same, check_tensor
from reasonserve.ops._fixed_order import tree_sum
from reasonserve.ops._impl import resolve_impl

__all__ = ["KV_SPLIT_TOKENS", "attention", "attention_reference", "decode_attention"]

# Keys per chunk of the reference reduction: a power of two, fixed for all batches.
KV_SPLIT_TOKENS = 256
# Elements of the largest temporary of the reference path ([B, H, queries, keys, D]
# per KV chunk). Queries are blocked to stay under it; blocking queries never changes
# bits (each query is computed on its own), so the block may depend on the batch.
_MAX_TEMP_ELEMS = 1 << 24


def _check_qkv(q, k, v, kv_lens, causal):
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, ndim=4)
    check_same(("q", "k", "v"), q, k, v)
    b, hq, s, d = q.shape
    if k.shape != v.shape:
        raise InvalidArgumentError(f"k and v must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if k.shape[0] != b or k.shape[3] != d:
        raise InvalidArgumentError(
            f"k/v must be [B={b}, Hkv, T, D={d}] to match q {tuple(q.shape)}, got {tuple(k.shape)}"
        )
    if k.shape[1] == 0 or hq % k.shape[1] != 0:
        raise InvalidArgumentError(f"q heads ({hq}) must be a multiple of k/v heads ({k.shape[1]})")
    lens = _lengths(kv_lens, b, k.shape[2], q.device)
    if causal and s > 0 and bool((lens < s).any()):
        raise InvalidArgumentError(
            f"causal attention needs at least S={s} keys per sequence; kv_lens={lens.tolist()}"
        )
    if s > 0 and bool((lens < 1).any()):
        raise InvalidArgumentError(f"every sequence needs at least one key; kv_lens={lens.tolist()}")
    return lens


def resolve_scale(scale, head_dim: int) -> float:
    """``scale`` as a float (``1 / sqrt(D)`` when None); a typed error when not finite."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim) if head_dim else 1.0
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not math.isfinite(scale):
        raise InvalidArgumentError(f"scale must be a finite number, got {scale!r}")
    return float(scale)


def _lengths(kv_lens, batch: int, max_len: int, device) -> torch.Tensor:
    if kv_lens is None:
        return torch.full((batch,), max_len, dtype=torch.long, device=device)
    if not isinstance(kv_lens, torch.Tensor) or kv_lens.dtype not in (torch.int32, torch.int64):
        raise InvalidTypeError("kv_lens must be an int32/int64 tensor of shape [B]")
    if kv_lens.shape != (batch,):
        raise InvalidArgumentError(f"kv_lens must have shape [{batch}], got {tuple(kv_lens.shape)}")
    if bool((kv_lens < 0).any()) or bool((kv_lens > max_len).any()):
        raise InvalidArgumentError(f"kv_lens must lie in [0, {max_len}], got {kv_lens.tolist()}")
    return kv_lens.to(device=device, dtype=torch.long)


def _mask(lens: torch.Tensor, s: int, t: int, causal: bool) -> torch.Tensor:
    """``[B, 1, S, T]`` boolean: which keys each query may see."""
    key_pos = torch.arange(t, device=lens.device)
    visible = key_pos[None, None, :] < lens[:, None, None]
    if causal:
        query_pos = lens[:, None] - s + torch.arange(s, device=lens.device)[None, :]
        visible = visible & (key_pos[None, None, :] <= query_pos[:, :, None])
    return visible.unsqueeze(1)


def _chunked_tree(terms, dim: int) -> torch.Tensor:
    """Tree-combine per-chunk tree sums: the same bits as one tree over all keys."""
    return tree_sum(torch.stack(list(terms), dim=dim), dim=dim)


def _reference(q, k, v, lens, causal: bool, scale: float) -> torch.Tensor:
    acc_dtype = accumulation_dtype(q.dtype)
    b, hq, s, d = q.shape
    hkv, t = k.shape[1], k.shape[2]
    # [B, Hkv, G, S, D]: query heads grouped under their KV head, no K/V copies.
    qf = q.to(acc_dtype).view(b, hkv, hq // hkv, s, d)
    in_cache = torch.arange(t, device=q.device)[None, :] < lens[:, None]  # [B, T]
    # Zero unused cache slots once, so inf/NaN there cannot leak in (0 * inf = NaN).
    kf = torch.where(in_cache[:, None, :, None], k.to(acc_dtype), 0.0)[:, :, None, None]
    vf = torch.where(in_cache[:, None, :, None], v.to(acc_dtype), 0.0)[:, :, None, None]
    mask = _mask(lens, s, t, causal)[:, :, None]  # [B, 1, 1, S, T]
    chunks = [(c, min(c + KV_SPLIT_TOKENS, t)) for c in range(0, t, KV_SPLIT_TOKENS)]
    outs = []
    block = max(1, _MAX_TEMP_ELEMS // (b * hq * min(t, KV_SPLIT_TOKENS) * max(d, 1)))
    for qs in range(0, s, block):
        qb = qf[:, :, :, qs : qs + block, None, :]  # [B, Hkv, G, Sb, 1, D]
        scores = torch.cat([tree_sum(qb * kf[..., a:e, :]) for a, e in chunks], dim=-1) * scale
        scores = scores.masked_fill(~mask[..., qs : qs + block, :], float("-inf"))
        p = torch.exp(scores - scores.amax(dim=-1, keepdim=True))  # [B, Hkv, G, Sb, T]
        denom = _chunked_tree((tree_sum(p[..., a:e]) for a, e in chunks), dim=-1)
        numer = _chunked_tree(
            (tree_sum(p[..., a:e, None] * vf[..., a:e, :], dim=-2) for a, e in chunks), dim=-1
        )
        outs.append(numer / denom[..., None])
    return torch.cat(outs, dim=3).reshape(b, hq, s, d).to(q.dtype)


def query_rows(seq_lens: torch.Tensor, query_lens: torch.Tensor, causal: bool = True):
    """``(row_seq, row_keys)`` ``[T]`` int64: each packed query's sequence and how many
    keys it sees (``position + 1`` when causal, its sequence's length otherwise)."""
    qlens, lens = query_lens.to(torch.int64).cpu(), seq_lens.to(torch.int64).cpu()
    row_seq = torch.repeat_interleave(torch.arange(qlens.shape[0]), qlens)
    if not causal:
        return row_seq, lens[row_seq].contiguous()
    starts = torch.cumsum(qlens, 0) - qlens
    index = torch.arange(row_seq.shape[0]) - starts[row_seq]
    return row_seq, (lens[row_seq] - qlens[row_seq] + index + 1).contiguous()


def _native(q, k, v, lens, causal: bool, scale: float) -> torch.Tensor:
    """Contiguous attention as paged attention over ``B`` blocks of ``T`` tokens."""
    b, hq, s, d = q.shape
    tables = torch.arange(b, dtype=torch.int64)[:, None]
    row_seq, row_keys = query_rows(lens, torch.full((b,), s, dtype=torch.int64), causal)
    packed = q.transpose(1, 2).reshape(b * s, hq, d)
    out = _native_calls.paged(packed, k.contiguous(), v.contiguous(), tables, row_seq, row_keys, scale)
    return out.reshape(b, s, hq, d).transpose(1, 2).to(q.dtype)


def attention_reference(q, k, v, *, causal: bool = True, scale: float | None = None, kv_lens=None):
    """The torch reference of :func:`attention` (defines its meaning)."""
    return attention(q, k, v, causal=causal, scale=scale, kv_lens=kv_lens, impl="torch")


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = True,
    scale: float | None = None,
    kv_lens: torch.Tensor | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Scaled dot-product attention, ``softmax(q k^T * scale) v`` per head.

    Parameters
    ----------
    q : Tensor ``[B, Hq, S, D]``
    k, v : Tensor ``[B, Hkv, T, D]``
    causal : bottom-right aligned causal mask (see module doc)
    scale : defaults to ``1 / sqrt(D)``
    kv_lens : int tensor ``[B]`` or None — keys ``>= kv_lens[b]`` are ignored
        (default: all ``T``). Values in ignored slots never affect the result.
    impl : ``"auto"`` | ``"torch"`` | ``"native"`` | ``"triton"``

    Returns
    -------
    Tensor ``[B, Hq, S, D]`` of ``q``'s dtype.
    """
    lens = _check_qkv(q, k, v, kv_lens, causal)
    scale = resolve_scale(scale, q.shape[-1])
    if q.numel() == 0:
        return q.new_zeros(q.shape)
    which = resolve_impl(impl, q)
    if which == "triton":
        from reasonserve.ops.triton.attention import attention_triton

        return attention_triton(q, k, v, lens, causal, float(scale))
    if which == "native" and k.shape[2] > 0:
        return _native(q, k, v, lens, causal, float(scale))
    return _reference(q, k, v, lens, causal, float(scale))


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cache_lens: torch.Tensor,
    *,
    scale: float | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """One decode step over a KV cache with per-sequence lengths.

    Parameters
    ----------
    q : Tensor ``[B, Hq, D]`` — the newest token of each sequence
    k_cache, v_cache : Tensor ``[B, Hkv, T_max, D]``; slots ``>= cache_lens[b]`` unused
    cache_lens : int tensor ``[B]`` — keys held per sequence, the new token's included

    Returns
    -------
    Tensor ``[B, Hq, D]``. Bitwise equal to running the sequence alone, whatever the
    other sequences, their lengths or ``T_max``.
    """
    check_tensor("q", q, ndim=3)
    out = attention(
        q.unsqueeze(2), k_cache, v_cache, causal=True, scale=scale, kv_lens=cache_lens, impl=impl
    )
    return out.squeeze(2)
