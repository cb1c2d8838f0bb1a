"""HF-format checkpoint folders: ``config.json`` + ``*.safetensors``.

:func:`make_tiny_checkpoint` writes a small random Llama/Qwen2/Qwen3 model (no download)
for demos and tests; :func:`load_weights` reads the tensors of any such folder, sharded
or not, with the parameter names the HF implementations use; :func:`checkpoint_eos_ids`
collects the end-of-sequence ids of ``config.json`` and ``generation_config.json``.
"""

from __future__ import annotations

import json
import pathlib

import torch

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine.config import ModelConfig, eos_token_ids, read_json_object
from reasonserve.engine.safetensors_io import load_safetensors, save_safetensors

__all__ = ["checkpoint_eos_ids", "load_weights", "make_tiny_checkpoint"]


def _param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    h, d = cfg.hidden_size, cfg.head_dim
    q, kv = cfg.num_attention_heads * d, cfg.num_key_value_heads * d
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (cfg.vocab_size, h),
        "model.norm.weight": (h,),
    }
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
            p + "mlp.gate_proj.weight": (cfg.intermediate_size, h),
            p + "mlp.up_proj.weight": (cfg.intermediate_size, h),
            p + "mlp.down_proj.weight": (h, cfg.intermediate_size),
        }  # fmt: skip
        if cfg.qkv_bias:
            shapes |= {p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
                       p + "self_attn.v_proj.bias": (kv,)}  # fmt: skip
        if cfg.o_bias:
            shapes[p + "self_attn.o_proj.bias"] = (h,)
        if cfg.mlp_bias:
            i = cfg.intermediate_size
            shapes |= {p + "mlp.gate_proj.bias": (i,), p + "mlp.up_proj.bias": (i,),
                       p + "mlp.down_proj.bias": (h,)}  # fmt: skip
        if cfg.qk_norm:
            shapes |= {p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight": (d,)}
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, h)
    return shapes


_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def make_tiny_checkpoint(
    path: str | pathlib.Path,
    *,
    model_type: str = "qwen2",
    vocab_size: int = 256,
    hidden_size: int = 64,
    intermediate_size: int = 128,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    max_position_embeddings: int = 2048,
    tie_word_embeddings: bool = False,
    seed: int = 0,
    extra: dict | None = None,
) -> pathlib.Path:
    """Write a random model folder loadable by reasonserve and by ``transformers``;
    ``extra`` adds or replaces ``config.json`` fields (e.g. ``rope_scaling``)."""
    raw = {
        "model_type": model_type,
        "architectures": [_ARCHITECTURES.get(model_type, "LlamaForCausalLM")],
        "vocab_size": vocab_size, "hidden_size": hidden_size, "intermediate_size": intermediate_size,
        "num_hidden_layers": num_hidden_layers, "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads, "max_position_embeddings": max_position_embeddings,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": tie_word_embeddings,
        "hidden_act": "silu", "torch_dtype": "float32",
    }  # fmt: skip
    raw |= extra or {}
    cfg = ModelConfig.from_dict(raw)
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in _param_shapes(cfg).items():
        if name.endswith("norm.weight"):
            tensors[name] = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        else:
            tensors[name] = torch.randn(shape, generator=gen) * (
                0.02 if name.endswith("bias") else shape[-1] ** -0.5
            )
    folder = pathlib.Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw, indent=2))
    save_safetensors(tensors, folder / "model.safetensors", {"format": "pt"})
    return folder


def load_weights(path: str | pathlib.Path, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """All parameters of a checkpoint folder, checked against ``cfg``'s shapes."""
    files = sorted(pathlib.Path(path).glob("*.safetensors"))
    if not files:
        raise InvalidArgumentError(f"{path} holds no *.safetensors file")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors |= load_safetensors(f)
    expected = _param_shapes(cfg)
    missing = sorted(set(expected) - set(tensors))
    if missing:
        raise InvalidArgumentError(f"{path} is missing parameters, e.g. {missing[:3]}")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise InvalidArgumentError(f"{name} has shape {tuple(tensors[name].shape)}, expected {shape}")
    return {name: tensors[name] for name in expected}


def checkpoint_eos_ids(path: str | pathlib.Path) -> tuple[int, ...]:
    """End-of-sequence ids a checkpoint declares: ``config.json``'s ``eos_token_id`` and
    ``generation_config.json``'s (each an int or a list), in that order, without repeats."""
    folder = pathlib.Path(path)
    ids = list(ModelConfig.from_pretrained(folder).eos_token_ids)
    generation = folder / "generation_config.json"
    if generation.is_file():
        raw = read_json_object(generation)
        ids += eos_token_ids(raw.get("eos_token_id"), "generation_config.json eos_token_id")
    return tuple(dict.fromkeys(ids))
