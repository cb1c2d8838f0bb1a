"""Model shapes for the cost model (from the models' published ``config.json``)."""

from __future__ import annotations

from dataclasses import dataclass

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["MODELS", "ModelSpec"]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    num_params: float
    num_layers: int
    hidden_size: int
    num_kv_heads: int
    head_dim: int
    bytes_per_param: int = 2  # BF16 weights and KV

    def __post_init__(self) -> None:
        for fname in (
            "num_params",
            "num_layers",
            "hidden_size",
            "num_kv_heads",
            "head_dim",
            "bytes_per_param",
        ):
            value = getattr(self, fname)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InvalidArgumentError(f"ModelSpec.{fname} must be a number > 0, got {value!r}")

    @property
    def weight_bytes(self) -> float:
        return self.num_params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer: 2 x layers x kv_heads x head_dim x bytes."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.bytes_per_param


MODELS = {
    # DeepSeek-R1-Distill-Qwen-32B (Qwen2.5-32B shape): 64 layers, 5120 hidden, 8 KV heads x 128.
    "qwen2.5-32b": ModelSpec("qwen2.5-32b", 32.76e9, 64, 5120, 8, 128),
    # DeepSeek-R1-Distill-Qwen-7B (Qwen2.5-7B shape): 28 layers, 3584 hidden, 4 KV heads x 128.
    "qwen2.5-7b": ModelSpec("qwen2.5-7b", 7.62e9, 28, 3584, 4, 128),
    # Qwen3-8B: 36 layers, 4096 hidden, 8 KV heads x 128.
    "qwen3-8b": ModelSpec("qwen3-8b", 8.19e9, 36, 4096, 8, 128),
}
