"""Cross-check on code no one here wrote: tiny random transformers Qwen2 / Llama models.

Under ``deterministic_mode()`` a prompt's logits are bitwise equal whether it runs alone
or inside a batch of random other prompts **of the same length** (no padding: HF's
eager attention contracts over the padded key length, so padding changes the shape of
that product; reasonserve's own ``ops.attention`` with ``kv_lens`` is the padded form).
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import reasonserve
from _compare import assert_bitwise_equal

transformers = pytest.importorskip("transformers", reason="the cross-check needs transformers (dev extra)")


def _model(family: str, attn: str):
    common = dict(vocab_size=512, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)  # fmt: skip
    torch.manual_seed(0)
    if family == "qwen2":
        cfg = transformers.Qwen2Config(**common)
        cls = transformers.Qwen2ForCausalLM
    else:
        cfg = transformers.LlamaConfig(**common)
        cls = transformers.LlamaForCausalLM
    return cls._from_config(cfg, attn_implementation=attn).eval()


MODELS = {(f, a): None for f in ("qwen2", "llama") for a in ("eager", "sdpa")}


def _get(family, attn):
    if MODELS[(family, attn)] is None:
        MODELS[(family, attn)] = _model(family, attn)
    return MODELS[(family, attn)]


@pytest.mark.parametrize("family", ["qwen2", "llama"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@settings(max_examples=6)
@given(length=st.integers(1, 20), batch=st.integers(2, 12), seed=st.integers(0, 2**31 - 1))
def test_logits_are_batch_invariant_under_deterministic_mode(family, attn, length, batch, seed):
    model = _get(family, attn)
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, 512, (batch, length), generator=g)
    pos = int(torch.randint(0, batch, (1,), generator=g))
    with torch.no_grad(), reasonserve.deterministic_mode():
        alone = model(input_ids=prompts[pos : pos + 1]).logits
        batched = model(input_ids=prompts).logits[pos : pos + 1]
        again = model(input_ids=prompts).logits[pos : pos + 1]
    assert_bitwise_equal(batched, alone, f"{family}/{attn} logits, batch {batch}, position {pos}")
    assert_bitwise_equal(again, batched, "run-to-run")


def test_deterministic_logits_stay_close_to_stock():
    model = _get("qwen2", "eager")
    ids = torch.randint(0, 512, (3, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        stock = model(input_ids=ids).logits
        with reasonserve.deterministic_mode():
            det = model(input_ids=ids).logits
    torch.testing.assert_close(det, stock, atol=1e-4, rtol=1e-4)
    assert torch.equal(det.argmax(-1), stock.argmax(-1))
