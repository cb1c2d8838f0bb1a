"""RoPE tables against transformers' own ``modeling_rope_utils``, field by field.

``test_model_families`` runs whole models with each RoPE type's common settings; this
file covers the fields those leave at their defaults (YaRN's ``mscale``/
``mscale_all_dim``, ``attention_factor``, ``beta_fast``/``beta_slow``, ``truncate``, a
missing ``factor``; llama3's frequency bands) and compares the cos/sin tables at
positions past the original context, where scaling is what decides the logits.

transformers computes ``inv_freq`` and the angles in float32, we in float64, so the
frequencies agree to float32 rounding (rtol 2e-6) and the tables to the angle error that
rounding makes at position ``p`` (about ``p * 1e-7`` radians): the tolerance below.
"""

import pytest
import torch

from reasonserve.engine.rope import _attention_factor, _inv_freq, parse_rope, rope_tables

transformers = pytest.importorskip("transformers", reason="the cross-check needs transformers (dev extra)")
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

HEAD_DIM = 64
_YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "original_max_position_embeddings": 4096}
CASES = {
    "llama3-8x": ({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, 131072),
    "llama3-bands": ({"rope_type": "llama3", "rope_theta": 10000.0, "factor": 16.0, "low_freq_factor": 2.0,
                      "high_freq_factor": 8.0, "original_max_position_embeddings": 512}, 8192),
    "linear": ({"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, 4096),
    "yarn": (_YARN | {"factor": 8.0}, 4096),
    "yarn-mscale": (_YARN | {"factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.707}, 4096),
    "yarn-mscale-one": (_YARN | {"factor": 40.0, "mscale": 0.707, "mscale_all_dim": 0.707}, 4096),
    "yarn-attention-factor": (_YARN | {"factor": 16.0, "attention_factor": 1.3}, 4096),
    "yarn-betas": (_YARN | {"factor": 16.0, "beta_fast": 8.0, "beta_slow": 2.0}, 4096),
    "yarn-no-truncate": (_YARN | {"factor": 16.0, "truncate": False}, 4096),
    "yarn-null-factor": (_YARN | {"factor": None}, 4096 * 6),  # max_position_embeddings / original
}  # fmt: skip


def _hf(params: dict, max_pos: int):
    cfg = transformers.LlamaConfig(
        vocab_size=16, hidden_size=HEAD_DIM * 2, intermediate_size=8, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=max_pos,
        rope_parameters=dict(params),
    )  # fmt: skip
    inv_freq, scale = ROPE_INIT_FUNCTIONS[params["rope_type"]](cfg, "cpu")
    return cfg, inv_freq, scale


@pytest.mark.parametrize("name", sorted(CASES))
def test_frequencies_and_attention_factor_equal_transformers(name):
    params, max_pos = CASES[name]
    _, inv_freq, scale = _hf(params, max_pos)
    rope = parse_rope({"rope_parameters": params}, max_pos)
    torch.testing.assert_close(_inv_freq(rope, HEAD_DIM), inv_freq.double(), atol=0, rtol=2e-6)
    assert _attention_factor(rope) == pytest.approx(scale, rel=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_tables_equal_transformers_past_the_original_context(name):
    params, max_pos = CASES[name]
    cfg, _, _ = _hf(params, max_pos)
    rope = parse_rope({"rope_parameters": params}, max_pos)
    n = rope.max_context_len(max_pos)
    original = params.get("original_max_position_embeddings", max_pos)
    positions = torch.tensor([0, 1, original - 1, original, (original + n) // 2, n - 1])
    rotary = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding(cfg)
    cos_hf, sin_hf = rotary(torch.zeros(1, len(positions), HEAD_DIM), positions[None])
    cos, sin = rope_tables(rope, HEAD_DIM, n, dtype=torch.float64, device="cpu")
    atol = (positions.double() * 2e-7 + 1e-6)[:, None]
    for ours, ref in ((cos[positions], cos_hf[0]), (sin[positions], sin_hf[0])):
        assert ((ours - ref.double()).abs() <= atol).all(), (ours - ref.double()).abs().amax(dim=1)
