"""RoPE tables against transformers' own ``modeling_rope_utils``, field by field.

``test_model_families`` runs whole models with each RoPE type's common settings; this
file covers the fields those leave at their defaults (YaRN's ``mscale``/
``mscale_all_dim``, ``attention_factor``, ``beta_fast``/``beta_slow``, ``truncate``, a
missing ``factor``; llama3's frequency bands) and compares the cos/sin tables at
positions past the original context, where scaling is what decides the logits.

The engine computes ``inv_freq``, the angles and their cos/sin in float32 by the same
operations as transformers (the model was trained with those tables): the frequencies and
the attention factor are equal, and every table entry up to the longest context equals
transformers' rotary embedding module's, within one float32 ulp (``cos``/``sin`` of the
same float32 angle: a last-bit difference is a libm's, not a formula's).
"""

import pytest
import torch

from reasonserve.engine.rope import _attention_factor, _inv_freq, parse_rope, rope_tables

transformers = pytest.importorskip("transformers", reason="the cross-check needs transformers (dev extra)")
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

HEAD_DIM = 64
_YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "original_max_position_embeddings": 4096}
CASES = {
    "default": ({"rope_type": "default", "rope_theta": 500000.0}, 131072),
    "dynamic": ({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 3.3}, 3000),
    "llama3-8x": ({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, 131072),
    "llama3-bands": ({"rope_type": "llama3", "rope_theta": 10000.0, "factor": 16.0, "low_freq_factor": 2.0,
                      "high_freq_factor": 8.0, "original_max_position_embeddings": 512}, 8192),
    "linear": ({"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, 4096),
    "yarn": (_YARN | {"factor": 8.0}, 4096),
    "yarn-32x": ({"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 32.0,
                  "original_max_position_embeddings": 4096}, 4096),
    "yarn-mscale": (_YARN | {"factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.707}, 4096),
    "yarn-mscale-one": (_YARN | {"factor": 40.0, "mscale": 0.707, "mscale_all_dim": 0.707}, 4096),
    "yarn-attention-factor": (_YARN | {"factor": 16.0, "attention_factor": 1.3}, 4096),
    "yarn-betas": (_YARN | {"factor": 16.0, "beta_fast": 8.0, "beta_slow": 2.0}, 4096),
    "yarn-no-truncate": (_YARN | {"factor": 16.0, "truncate": False}, 4096),
    "yarn-null-factor": (_YARN | {"factor": None}, 4096 * 6),  # max_position_embeddings / original
}  # fmt: skip


def _hf(params: dict, max_pos: int, family: str = "llama"):
    kind = {"llama": transformers.LlamaConfig, "qwen3": transformers.Qwen3Config}[family]
    cfg = kind(
        vocab_size=16, hidden_size=HEAD_DIM * 2, intermediate_size=8, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, head_dim=HEAD_DIM, max_position_embeddings=max_pos,
        rope_parameters=dict(params),
    )  # fmt: skip
    init = ROPE_INIT_FUNCTIONS.get(params["rope_type"])
    inv_freq, scale = init(cfg, "cpu") if init else _rotary(cfg, family).compute_default_rope_parameters(cfg)
    return cfg, inv_freq, scale


def _rotary(cfg, family: str):
    module = {"llama": transformers.models.llama.modeling_llama.LlamaRotaryEmbedding,
              "qwen3": transformers.models.qwen3.modeling_qwen3.Qwen3RotaryEmbedding}[family]  # fmt: skip
    return module(cfg)


@pytest.mark.parametrize("name", sorted(CASES))
def test_frequencies_and_attention_factor_equal_transformers(name):
    params, max_pos = CASES[name]
    _, inv_freq, scale = _hf(params, max_pos)
    rope = parse_rope({"rope_parameters": params}, max_pos)
    assert torch.equal(_inv_freq(rope, HEAD_DIM, rope.max_context_len(max_pos)), inv_freq)
    assert _attention_factor(rope) == scale


def _ulps(ours: torch.Tensor, ref: torch.Tensor) -> int:
    """The largest distance in float32 steps (bit patterns mapped to a monotone integer line)."""
    assert ours.dtype == ref.dtype == torch.float32
    bits = lambda t: torch.where(t < 0, -(t.view(torch.int32) & 0x7FFFFFFF), t.view(torch.int32))
    return int((bits(ours).long() - bits(ref).long()).abs().max())


@pytest.mark.parametrize("family", ["llama", "qwen3"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_tables_equal_transformers_across_the_context(name, family):
    """Positions across the whole context (up to 163839), the last 512 all, cos and sin,
    against the model's own rotary module: within one float32 ulp."""
    params, max_pos = CASES[name]
    cfg, _, _ = _hf(params, max_pos, family)
    rope = parse_rope({"rope_parameters": params}, max_pos)
    n = rope.max_context_len(max_pos)
    positions = torch.cat([torch.arange(0, n - 512, 61), torch.arange(n - 512, n)])
    cos_hf, sin_hf = _rotary(cfg, family)(torch.zeros(1, len(positions), HEAD_DIM), positions[None])
    cos, sin = rope_tables(rope, HEAD_DIM, n, dtype=torch.float32, device="cpu")
    for ours, ref in ((cos[positions], cos_hf[0]), (sin[positions], sin_hf[0])):
        assert _ulps(ours, ref) <= 1, (name, _ulps(ours, ref))
