"""Tensor-level calls into the native kernels: dtype conversion, packing, its cache.

Every function takes tensors the public op has already validated and returns the
op's result in float32 (the caller rounds to the output dtype). Half inputs convert
to float32 exactly, so the kernels' fixed order defines the bits for every dtype.
"""

from __future__ import annotations

import threading

import torch
from torch.utils.weak import WeakIdKeyDictionary

from reasonserve.ops import _native

__all__ = ["PanelCache", "bmm", "matmul_2d", "mean_rows", "paged", "rms_normed", "softmax_rows"]

_PANEL = 16


def _f32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32).contiguous()


def pack_panels(b: torch.Tensor) -> torch.Tensor:
    """``b [K, N]`` as float32 panels ``[ceil(N/16), K, 16]`` (zero-padded columns)."""
    k, n = b.shape
    panels = -(-n // _PANEL)
    bt = b.t().to(torch.float32)
    if panels * _PANEL != n:
        bt = torch.cat([bt, bt.new_zeros((panels * _PANEL - n, k))])
    return bt.reshape(panels, _PANEL, k).transpose(1, 2).contiguous()


class PanelCache:
    """Packed right-hand sides, kept while the tensor they came from lives.

    Keyed weakly by the tensor owning the memory (a view's ``_base``), and by the
    view's offset, shape, strides, dtype and version counter, so an in-place update
    of a weight repacks it and a freed weight drops its panels.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def panels(self, b: torch.Tensor) -> torch.Tensor:
        owner = b._base if b._base is not None else b
        key = (b.storage_offset(), tuple(b.shape), b.stride(), b.dtype, b._version)
        with self._lock:
            found = self._entries.get(owner)
            if found is not None and found[0] == key:
                return found[1]
        packed = pack_panels(b)
        with self._lock:
            self._entries[owner] = (key, packed)
        return packed


_CACHE = PanelCache()


def matmul_2d(a: torch.Tensor, b: torch.Tensor, *, weight: bool = False, cache: PanelCache = _CACHE):
    """``a [M, K] @ b [K, N]`` in float32.

    A weight (``weight=True`` from ``linear``, or a view of an ``nn.Parameter``, as
    ``deterministic_mode()`` sees ``F.linear``) is packed into panels once and the
    packing cached — the fastest form to read. Any other ``b`` (an activation, used
    once) is read in place when it is float32 with contiguous rows, else packed
    without caching. All forms give the same bits.
    """
    ops, isa = _native.ops(), _native.selected_isa()
    a32 = _f32(a)
    owner = b._base if b._base is not None else b
    if weight or isinstance(owner, torch.nn.Parameter):
        return ops.linear_packed(a32, cache.panels(b), b.shape[1], isa)
    if b.dtype == torch.float32 and (b.shape[1] <= 1 or b.stride(1) == 1):
        return ops.matmul_rows(a32, b, isa)
    return ops.linear_packed(a32, pack_panels(b), b.shape[1], isa)


def bmm(a3: torch.Tensor, b3: torch.Tensor) -> torch.Tensor:
    """``a3 [E, M, K] @ b3 [E, K, N]`` in float32, one native call for all entries."""
    b32 = b3.to(torch.float32)
    if b32.shape[2] > 1 and b32.stride(2) != 1:
        b32 = b32.contiguous()
    return _native.ops().bmm_rows(_f32(a3), b32, _native.selected_isa())


def rms_normed(rows: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / sqrt(mean(x**2) + eps)`` per row of ``rows [R, N]``, float32."""
    return _native.ops().rms_norm(_f32(rows), float(eps), _native.selected_isa())


def softmax_rows(rows: torch.Tensor, log: bool) -> torch.Tensor:
    return _native.ops().softmax(_f32(rows), log, _native.selected_isa())


def mean_rows(rows: torch.Tensor) -> torch.Tensor:
    return _native.ops().mean(_f32(rows), _native.selected_isa())


def paged(q, k_cache, v_cache, tables, row_seq, row_keys, scale: float) -> torch.Tensor:
    """Attention rows ``[T, Hq, D]`` (float32); see ``ops.paged_attention``."""
    cache_ok = k_cache.dtype in (torch.float32, torch.bfloat16, torch.float16) and k_cache.stride(3) == 1
    if not cache_ok or v_cache.stride() != k_cache.stride():
        k_cache, v_cache = _f32(k_cache), _f32(v_cache)
    return _native.ops().paged_attention(
        _f32(q), k_cache, v_cache, tables.to(torch.int64).contiguous(), row_seq, row_keys, float(scale),
        _native.selected_isa(),
    )
