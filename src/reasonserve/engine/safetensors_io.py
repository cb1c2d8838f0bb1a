"""Reading and writing the safetensors format with torch alone (no extra dependency).

Layout: an 8-byte little-endian header length ``N``, ``N`` bytes of JSON mapping each
tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets into the
data that follows; ``"__metadata__"`` holds strings), then the raw little-endian data.
Reads validate the header against the file size before touching data, so a truncated
or hostile file gives an error, not a crash or a huge allocation.
"""

from __future__ import annotations

import json
import math
import pathlib
import struct

import torch

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["load_safetensors", "save_safetensors"]

_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}  # fmt: skip
_NAMES = {v: k for k, v in _DTYPES.items()}
_MAX_HEADER_BYTES = 100 * 1024 * 1024


def save_safetensors(
    tensors: dict[str, torch.Tensor], path: str | pathlib.Path, metadata: dict | None = None
):
    header: dict = {"__metadata__": {str(k): str(v) for k, v in (metadata or {}).items()}}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        if t.dtype not in _NAMES:
            raise InvalidArgumentError(f"{name}: dtype {t.dtype} cannot be stored")
        data = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {
            "dtype": _NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # align the data start to 8 bytes
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        for blob in blobs:
            fh.write(blob)


def load_safetensors(path: str | pathlib.Path) -> dict[str, torch.Tensor]:
    """All tensors of a safetensors file, as CPU tensors."""
    data = pathlib.Path(path).read_bytes()
    if len(data) < 8:
        raise InvalidArgumentError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if n > min(_MAX_HEADER_BYTES, len(data) - 8):
        raise InvalidArgumentError(f"{path}: header length {n} does not fit the file")
    try:
        header = json.loads(data[8 : 8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InvalidArgumentError(f"{path}: header is not JSON") from err
    body = memoryview(data)[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        out[name] = _tensor(path, name, info, body)
    return out


def _tensor(path, name: str, info: dict, body: memoryview) -> torch.Tensor:
    try:
        dtype = _DTYPES[info["dtype"]]
        shape = [int(s) for s in info["shape"]]
        begin, end = (int(x) for x in info["data_offsets"])
    except (KeyError, TypeError, ValueError) as err:
        raise InvalidArgumentError(f"{path}: bad header entry for {name}") from err
    size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if any(s < 0 for s in shape) or not 0 <= begin <= end <= len(body) or end - begin != size:
        raise InvalidArgumentError(f"{path}: {name} has offsets [{begin}, {end}) that do not fit")
    if size == 0:
        return torch.empty(shape, dtype=dtype)
    raw = torch.frombuffer(bytearray(body[begin:end]), dtype=torch.uint8)
    return raw.view(dtype).reshape(shape)
