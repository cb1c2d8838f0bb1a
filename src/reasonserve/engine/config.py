"""Model configuration read from an HF-format ``config.json`` (Llama / Qwen2 family)."""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass
from typing import Any

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["SUPPORTED_MODEL_TYPES", "ModelConfig"]

SUPPORTED_MODEL_TYPES = ("llama", "qwen2")
_POSITIVE_INTS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
)


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """The decoder's shape. ``qkv_bias`` is True for Qwen2 (biases on q/k/v projections)."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    qkv_bias: bool = False

    def __post_init__(self) -> None:
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise InvalidArgumentError(
                f"model_type must be one of {SUPPORTED_MODEL_TYPES}, got {self.model_type!r}"
            )
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise InvalidArgumentError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if not self.rms_norm_eps > 0 or not self.rope_theta > 0:
            raise InvalidArgumentError("rms_norm_eps and rope_theta must be > 0")

    @classmethod
    def from_dict(cls, raw: dict) -> ModelConfig:
        """From a parsed ``config.json``; missing or wrong fields raise InvalidArgumentError."""

        def field(key: str, default: Any = None) -> Any:  # validated in __post_init__
            return raw.get(key, default)

        model_type = field("model_type")
        heads, hidden = field("num_attention_heads"), field("hidden_size")
        try:
            head_dim = field("head_dim") or hidden // heads
        except TypeError as err:
            raise InvalidArgumentError("config needs hidden_size and num_attention_heads") from err
        return cls(
            model_type=model_type,
            vocab_size=field("vocab_size"),
            hidden_size=hidden,
            intermediate_size=field("intermediate_size"),
            num_hidden_layers=field("num_hidden_layers"),
            num_attention_heads=heads,
            num_key_value_heads=field("num_key_value_heads") or heads,
            head_dim=head_dim,
            rms_norm_eps=float(field("rms_norm_eps", 1e-6)),
            rope_theta=float(field("rope_theta", 10000.0)),
            max_position_embeddings=field("max_position_embeddings", 4096),
            tie_word_embeddings=bool(field("tie_word_embeddings", False)),
            qkv_bias=model_type == "qwen2" or bool(field("attention_bias", False)),
        )

    @classmethod
    def from_pretrained(cls, path: str | pathlib.Path) -> ModelConfig:
        file = pathlib.Path(path) / "config.json"
        if not file.is_file():
            raise InvalidArgumentError(f"{path} has no config.json")
        return cls.from_dict(json.loads(file.read_text()))
