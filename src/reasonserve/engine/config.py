"""Model configuration read from an HF-format ``config.json``: Llama, Qwen2, Qwen3.

Nothing is ever silently wrong: a field is either implemented, known not to change the
math (metadata such as ``architectures`` or ``bos_token_id``), or refused with an
:class:`InvalidArgumentError` naming it. Missing fields take the defaults of the
family's ``transformers`` config class, so a folder means what it means there.

Family differences (as in ``transformers``): Qwen2 has biases on the q/k/v projections;
Qwen3 normalises each head's queries and keys (RMSNorm over ``head_dim``, before RoPE)
and its ``head_dim`` is its own field (default 128), not ``hidden / heads``; Llama and
Qwen3 read ``attention_bias`` (q/k/v/o) and Llama ``mlp_bias``. Sliding-window
attention is not implemented: a config whose window could apply within the served
context is refused by :meth:`ModelConfig.check_context`.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reasonserve.core.checks import check_int
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine.rope import RopeConfig, parse_rope

__all__ = ["SUPPORTED_MODEL_TYPES", "ModelConfig", "eos_token_ids", "read_json_object"]

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3")
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
_REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
# Fields that do not change a forward pass (metadata, training-only, generation ids).
_INERT = {
    "_name_or_path", "architectures", "chunk_size_feed_forward", "dtype", "torch_dtype", "id2label",
    "label2id", "is_encoder_decoder", "output_attentions", "output_hidden_states", "problem_type",
    "return_dict", "transformers_version", "bos_token_id", "pad_token_id", "initializer_range",
    "use_cache", "attention_dropout", "tokenizer_class", "_attn_implementation_autoset",
    "pretraining_tp",  # transformers 5 does not read it
}  # fmt: skip
_COMMON = {*_REQUIRED, "model_type", "num_key_value_heads", "head_dim", "hidden_act", "rms_norm_eps",
           "max_position_embeddings", "tie_word_embeddings", "rope_theta", "rope_scaling",
           "rope_parameters", "partial_rotary_factor", "eos_token_id"}  # fmt: skip
_SLIDING = {"use_sliding_window", "sliding_window", "max_window_layers", "layer_types", "use_mrope"}
_FAMILY_KEYS = {
    "llama": _COMMON | {"attention_bias", "mlp_bias"},
    "qwen2": _COMMON | _SLIDING,
    "qwen3": _COMMON | _SLIDING | {"attention_bias"},
}
# transformers' class defaults for fields a config.json may leave out
_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"max_position_embeddings": 2048, "head_dim": None},
    "qwen2": {"max_position_embeddings": 32768, "head_dim": None, "num_key_value_heads": 32},
    "qwen3": {"max_position_embeddings": 32768, "head_dim": 128, "num_key_value_heads": 32},
}


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """The decoder's shape and math. ``qkv_bias``/``o_bias``/``mlp_bias``: projection
    biases; ``qk_norm``: Qwen3's per-head RMSNorm of queries and keys; ``sliding_window``:
    the window of the layers that have one (None: every layer attends to all keys);
    ``eos_token_ids``: ``config.json``'s end-of-sequence ids."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope: RopeConfig = field(default_factory=RopeConfig)
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise InvalidArgumentError(
                f"model_type must be one of {SUPPORTED_MODEL_TYPES}, got {self.model_type!r}"
            )
        for name in _POSITIVE_INTS:
            check_int(name, getattr(self, name), 1)
        if self.num_attention_heads % self.num_key_value_heads:
            raise InvalidArgumentError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.head_dim % 2:
            raise InvalidArgumentError(f"head_dim must be even for RoPE, got {self.head_dim}")
        if not isinstance(self.rms_norm_eps, (int, float)) or not self.rms_norm_eps > 0:
            raise InvalidArgumentError(f"rms_norm_eps must be > 0, got {self.rms_norm_eps!r}")
        if self.sliding_window is not None and (
            not isinstance(self.sliding_window, int) or self.sliding_window < 1
        ):
            raise InvalidArgumentError(
                f"sliding_window must be an int >= 1 or None, got {self.sliding_window!r}"
            )

    @property
    def rope_theta(self) -> float:
        return self.rope.theta

    @property
    def max_context_len(self) -> int:
        """Positions this model serves (its RoPE tables' length)."""
        return self.rope.max_context_len(self.max_position_embeddings)

    @property
    def default_max_model_len(self) -> int:
        """The context served by default: the model's, capped at a sliding window (within
        it, windowed and full attention are the same)."""
        return min(self.max_context_len, self.sliding_window or self.max_context_len)

    def check_context(self, max_model_len: int) -> None:
        """Refuse a served context the model cannot compute exactly."""
        if max_model_len > self.max_context_len:
            raise InvalidArgumentError(
                f"max_model_len {max_model_len} exceeds the model's context of {self.max_context_len} "
                f"positions (max_position_embeddings {self.max_position_embeddings}, "
                f"{self.rope.rope_type} RoPE)"
            )
        if self.sliding_window is not None and max_model_len > self.sliding_window:
            raise InvalidArgumentError(
                f"this model uses sliding-window attention (window {self.sliding_window}), which "
                f"would apply within max_model_len {max_model_len}; windowed attention is not "
                f"implemented: serve with max_model_len <= {self.sliding_window}"
            )

    @classmethod
    def from_dict(cls, raw: Mapping) -> ModelConfig:
        """From a parsed ``config.json``; missing, wrong or unimplemented fields raise."""
        model_type = raw.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise InvalidArgumentError(
                f"model_type must be one of {SUPPORTED_MODEL_TYPES}, got {model_type!r}"
            )
        _refuse_unimplemented(raw, model_type)
        missing = [k for k in _REQUIRED if raw.get(k) is None]
        if missing:
            raise InvalidArgumentError(f"config.json needs {missing}")
        values = {**_DEFAULTS[model_type], **{k: v for k, v in raw.items() if v is not None}}
        heads, hidden = values["num_attention_heads"], values["hidden_size"]
        head_dim = values.get("head_dim") or (
            hidden // heads if isinstance(hidden, int) and isinstance(heads, int) else None
        )
        bias = bool(values.get("attention_bias", False))
        return cls(
            model_type=model_type,
            vocab_size=values["vocab_size"],
            hidden_size=hidden,
            intermediate_size=values["intermediate_size"],
            num_hidden_layers=values["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=values.get("num_key_value_heads") or heads,
            head_dim=head_dim,  # type: ignore[arg-type]  # validated in __post_init__
            rms_norm_eps=values.get("rms_norm_eps", 1e-6),
            rope=parse_rope(raw, values["max_position_embeddings"]),
            max_position_embeddings=values["max_position_embeddings"],
            tie_word_embeddings=bool(values.get("tie_word_embeddings", False)),
            qkv_bias=model_type == "qwen2" or bias,
            o_bias=bias,
            mlp_bias=bool(values.get("mlp_bias", False)),
            qk_norm=model_type == "qwen3",
            sliding_window=_sliding_window(values),
            eos_token_ids=eos_token_ids(raw.get("eos_token_id"), "config.json eos_token_id"),
        )

    @classmethod
    def from_pretrained(cls, path: str | pathlib.Path) -> ModelConfig:
        file = pathlib.Path(path) / "config.json"
        if not file.is_file():
            raise InvalidArgumentError(f"{path} has no config.json")
        return cls.from_dict(read_json_object(file))


def read_json_object(file: pathlib.Path) -> dict:
    """A JSON file holding an object (a checkpoint's config files); anything else raises."""
    try:
        raw = json.loads(file.read_text())
    except ValueError as err:
        raise InvalidArgumentError(f"{file} is not valid JSON: {err}") from None
    if not isinstance(raw, dict):
        raise InvalidArgumentError(f"{file} must hold a JSON object")
    return raw


def _refuse_unimplemented(raw: Mapping, model_type: str) -> None:
    unknown = sorted(set(raw) - _FAMILY_KEYS[model_type] - _INERT)
    if unknown:
        raise InvalidArgumentError(
            f"config.json field(s) {unknown} are not implemented for model_type {model_type!r}; "
            "they may change the model's output, so the checkpoint is refused"
        )
    if raw.get("hidden_act", "silu") != "silu":
        raise InvalidArgumentError(f"hidden_act {raw['hidden_act']!r} is not implemented (only 'silu')")
    if raw.get("use_mrope"):
        raise InvalidArgumentError("multimodal RoPE (use_mrope) is not implemented")


def _sliding_window(values: Mapping) -> int | None:
    """The window of the layers that slide (transformers' Qwen2/Qwen3 rule), or None."""
    window = values.get("sliding_window", 4096) if values.get("use_sliding_window", False) else None
    layers = values["num_hidden_layers"]
    types = values.get("layer_types")
    if types is None:
        first = values.get("max_window_layers", 28)
        types = [
            "sliding_attention" if window is not None and i >= first else "full_attention"
            for i in range(layers)
        ]
    if not isinstance(types, list) or len(types) != layers:
        raise InvalidArgumentError(f"layer_types must list one type per layer ({layers}), got {types!r}")
    kinds = set(types) - {"full_attention", "sliding_attention"}
    if kinds:
        raise InvalidArgumentError(f"layer type(s) {sorted(kinds)} are not implemented")
    return window if "sliding_attention" in types else None


def eos_token_ids(value: object, where: str) -> tuple[int, ...]:
    """An ``eos_token_id`` field (an int, a list of ints, or null) as a tuple."""
    if value is None:
        return ()
    ids = value if isinstance(value, list) else [value]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise InvalidArgumentError(f"{where} must be an int >= 0 or a list of them, got {value!r}")
    return tuple(dict.fromkeys(ids))
