"""Accelerator presets for the roofline cost model, from the vendors' datasheets.

Peak FLOP/s are dense BF16 tensor-core numbers (no sparsity); bandwidths are the HBM/GDDR
bandwidth and the host link per direction. Sources (public datasheets):

* A100-80G SXM: 312 TFLOP/s BF16, 2,039 GB/s HBM2e, 80 GB, PCIe Gen4 x16 (32 GB/s).
* H100 SXM5 80 GB: 989 TFLOP/s BF16 (1,979 with sparsity), 3,350 GB/s HBM3, PCIe Gen5
  x16 (64 GB/s).
* H200 SXM 141 GB: 989 TFLOP/s BF16, 4,800 GB/s HBM3e, PCIe Gen5 x16 (64 GB/s).
* RTX 4090 24 GB: 165.2 TFLOP/s BF16 with FP32 accumulate (dense), 1,008 GB/s GDDR6X,
  PCIe Gen4 x16 (32 GB/s).
"""

from __future__ import annotations

from dataclasses import dataclass

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["HARDWARE", "HardwareSpec"]


@dataclass(frozen=True, slots=True)
class HardwareSpec:
    name: str
    peak_flops: float  # dense BF16 FLOP/s
    memory_bandwidth_bytes_s: float
    memory_bytes: float
    host_link_bytes_s: float  # per direction, for swapping KV to host memory

    def __post_init__(self) -> None:
        for fname in ("peak_flops", "memory_bandwidth_bytes_s", "memory_bytes", "host_link_bytes_s"):
            value = getattr(self, fname)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InvalidArgumentError(f"HardwareSpec.{fname} must be a number > 0, got {value!r}")


HARDWARE = {
    "a100-80g": HardwareSpec("a100-80g", 312e12, 2.039e12, 80e9, 32e9),
    "h100": HardwareSpec("h100", 989e12, 3.35e12, 80e9, 64e9),
    "h200": HardwareSpec("h200", 989e12, 4.8e12, 141e9, 64e9),
    "rtx4090": HardwareSpec("rtx4090", 165.2e12, 1.008e12, 24e9, 32e9),
}
