"""Reading and writing checkpoints with the ``safetensors`` package (the format's reference
implementation; reads are memory-mapped).

Any failure to parse a file (truncated, hostile header, unknown dtype, offsets past the
end) becomes an :class:`InvalidArgumentError` naming the file.
"""

from __future__ import annotations

import pathlib

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["load_safetensors", "save_safetensors"]


def load_safetensors(path: str | pathlib.Path) -> dict[str, torch.Tensor]:
    """Every tensor of one ``.safetensors`` file, on CPU."""
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            return {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 - safe_open has no __iter__
    except Exception as err:  # safetensors raises several types for bad files
        raise InvalidArgumentError(f"{path} is not a valid safetensors file: {err}") from err


def save_safetensors(
    tensors: dict[str, torch.Tensor], path: str | pathlib.Path, metadata: dict[str, str] | None = None
) -> None:
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata=metadata)
