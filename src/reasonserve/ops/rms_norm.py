"""Batch-invariant RMSNorm over the last dimension.

``y = (x * 1/sqrt(mean(x**2) + eps)).to(x.dtype) * weight`` with statistics in
float32 (float64 for float64 input), the order used by Llama/Qwen2 reference code.
Guarantee: bitwise batch-invariant and run-to-run deterministic (one reduction
order per row, no shape-dependent switch). Native (CPU): the 16-lane order of
``_csrc/fixed_order.h``, the same bits on every CPU; torch path: a pairwise tree.
"""

from __future__ import annotations

import math

import torch

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.ops import _native_calls
from reasonserve.ops._checks import accumulation_dtype, check_same, check_tensor
from reasonserve.ops._fixed_order import tree_sum
from reasonserve.ops._impl import resolve_impl

__all__ = ["add_rms_norm", "rms_norm", "rms_norm_reference"]


def _check(x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    check_tensor("x", x, min_ndim=1)
    check_tensor("weight", weight, ndim=1)
    check_same(("x", "weight"), x, weight, dtype=False)
    if weight.shape[0] != x.shape[-1]:
        raise InvalidArgumentError(
            f"weight must have shape [{x.shape[-1]}] (x's last dim), got {tuple(weight.shape)}"
        )
    if not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise InvalidArgumentError(f"eps must be a finite number >= 0, got {eps!r}")


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The torch reference of :func:`rms_norm` (defines its meaning)."""
    return rms_norm(x, weight, eps, impl="torch")


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, impl: str = "auto"
) -> torch.Tensor:
    """RMS-normalize ``x [..., N]`` and scale by ``weight [N]``; returns ``[..., N]``.

    The output has ``x``'s dtype promoted with ``weight``'s (as ``weight * x`` would).
    """
    _check(x, weight, eps)
    which = resolve_impl(impl, x)
    if which == "native" and x.shape[-1]:
        normed = _native_calls.rms_normed(x.reshape(-1, x.shape[-1]), eps).reshape(x.shape)
        return weight * normed.to(x.dtype)
    if which == "triton":
        from reasonserve.ops.triton.rms_norm import rms_norm_triton

        normed, _ = rms_norm_triton(x.reshape(-1, x.shape[-1]), weight, float(eps))
        return normed.reshape(x.shape[:-1] + weight.shape)
    acc = x.to(accumulation_dtype(x.dtype))
    n = x.shape[-1]
    variance = tree_sum(acc * acc, keepdim=True) / n if n else acc.new_zeros(*x.shape[:-1], 1)
    # 1/sqrt rather than rsqrt: sqrt and division are correctly rounded everywhere.
    normed = acc * (1.0 / torch.sqrt(variance + eps))
    return weight * normed.to(x.dtype)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, impl: str = "auto"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual add of a transformer block fused with the next RMSNorm.

    Returns ``(rms_norm(summed, weight, eps), summed)`` with ``summed = x + residual`` in
    ``x``'s dtype: the bits of the two ops run separately with the same ``impl``
    (batch-invariant, run-to-run deterministic). Triton (CUDA) does both in one kernel;
    other implementations add, then normalize.

    Parameters
    ----------
    x, residual : Tensor ``[..., N]`` of one shape, dtype and device
    weight : Tensor ``[N]``
    """
    _check(x, weight, eps)
    check_tensor("residual", residual, min_ndim=1)
    check_same(("x", "residual"), x, residual)
    if residual.shape != x.shape:
        raise InvalidArgumentError(
            f"residual must have x's shape {tuple(x.shape)}, got {tuple(residual.shape)}"
        )
    if resolve_impl(impl, x) == "triton" and x.shape[-1]:
        from reasonserve.ops.triton.rms_norm import rms_norm_triton

        rows, res = x.reshape(-1, x.shape[-1]), residual.reshape(-1, x.shape[-1])
        normed, summed = rms_norm_triton(rows, weight, float(eps), res)
        assert summed is not None  # given a residual, the kernel returns the sum
        return normed.reshape(x.shape[:-1] + weight.shape), summed.reshape(x.shape)
    summed = x + residual
    return rms_norm(summed, weight, eps, impl=impl), summed
