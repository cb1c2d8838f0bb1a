"""Argument checks shared by the ops: each raises a typed error naming the argument."""

from __future__ import annotations

import torch

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def check_tensor(name: str, value: object, *, min_ndim: int = 0, ndim: int | None = None) -> None:
    """Require a floating-point tensor of the given rank."""
    if not isinstance(value, torch.Tensor):
        raise InvalidTypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dtype not in FLOAT_DTYPES:
        allowed = ", ".join(str(d) for d in FLOAT_DTYPES)
        raise InvalidTypeError(f"{name} must have a floating dtype ({allowed}), got {value.dtype}")
    if ndim is not None and value.dim() != ndim:
        raise InvalidArgumentError(f"{name} must have {ndim} dimensions, got shape {tuple(value.shape)}")
    if value.dim() < min_ndim:
        raise InvalidArgumentError(
            f"{name} must have at least {min_ndim} dimensions, got shape {tuple(value.shape)}"
        )


def check_same(names: tuple[str, ...], *tensors: torch.Tensor, dtype: bool = True) -> None:
    """Require tensors on one device (and, by default, of one dtype)."""
    first = tensors[0]
    for name, t in zip(names[1:], tensors[1:], strict=True):
        if t.device != first.device:
            raise InvalidTypeError(
                f"{name} is on {t.device} but {names[0]} is on {first.device}; put them on one device"
            )
        if dtype and t.dtype != first.dtype:
            raise InvalidTypeError(
                f"{name} has dtype {t.dtype} but {names[0]} has {first.dtype}; use one dtype"
            )


def normalize_dim(name: str, dim: int, ndim: int) -> int:
    """Map a possibly negative ``dim`` into ``[0, ndim)``."""
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise InvalidTypeError(f"{name} must be an int, got {type(dim).__name__}")
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise InvalidArgumentError(f"{name}={dim} is out of range for a tensor with {ndim} dimensions")
    return dim % max(ndim, 1)


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """Reductions accumulate half types in float32, as ATen does."""
    return torch.float64 if dtype == torch.float64 else torch.float32
