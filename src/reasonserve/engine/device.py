"""Where the engine runs: the device and dtype arguments, checked once at load time.

``device``: ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (a ``torch.device`` too).
``dtype``: ``"float32"``/``"fp32"``, ``"bfloat16"``/``"bf16"``, ``"float16"``/``"fp16"``,
a ``torch.dtype``, or ``None``/``"auto"``: float32 on CPU, bfloat16 on CUDA.
"""

from __future__ import annotations

import torch

from reasonserve.core.errors import ImplementationUnavailableError, InvalidArgumentError, InvalidTypeError

__all__ = ["DTYPE_NAMES", "resolve_device", "resolve_dtype"]

DTYPE_NAMES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}  # fmt: skip


def resolve_device(device: object) -> torch.device:
    """A checked ``torch.device``; CUDA must be present and the index in range."""
    if not isinstance(device, (str, torch.device)):
        raise InvalidTypeError(f"device must be a str or torch.device, got {type(device).__name__}")
    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise InvalidArgumentError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}") from err
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise InvalidArgumentError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if not torch.cuda.is_available():
        raise ImplementationUnavailableError(f"device={device!r}, but this machine has no usable CUDA device")
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if not 0 <= index < torch.cuda.device_count():
        raise InvalidArgumentError(
            f"device={device!r}: index out of range; CUDA devices here: {torch.cuda.device_count()}"
        )
    return torch.device("cuda", index)


def resolve_dtype(dtype: object, device: torch.device) -> torch.dtype:
    """float32, bfloat16 or float16 (``None``/``"auto"``: float32 on CPU, bfloat16 on CUDA)."""
    if dtype is None or dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, str):
        if dtype not in DTYPE_NAMES:
            raise InvalidArgumentError(f"dtype must be one of {sorted(DTYPE_NAMES)} or 'auto', got {dtype!r}")
        return DTYPE_NAMES[dtype]
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise InvalidTypeError(f"dtype must be torch.float32, torch.bfloat16 or torch.float16, got {dtype!r}")
    return dtype  # type: ignore[return-value]
