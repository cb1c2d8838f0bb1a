"""The engine's model and checkpoint I/O: HF cross-check, invariance, bad input."""

import json
import struct

import pytest
import torch

from _compare import assert_bitwise_equal
from reasonserve.core import InvalidArgumentError
from reasonserve.engine import DecoderModel, ModelConfig, SequenceBatch, load_weights, make_tiny_checkpoint
from reasonserve.engine.safetensors_io import load_safetensors, save_safetensors


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def checkpoint(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    make_tiny_checkpoint(path, model_type=request.param, tie_word_embeddings=request.param == "llama")
    return path


def _prefill(model, ids):
    logits, kv = model.forward(SequenceBatch([ids], [0], [None]))
    return logits[0], kv[0]


def test_logits_match_transformers_and_greedy_tokens_agree(checkpoint):
    transformers = pytest.importorskip("transformers", reason="cross-check needs transformers (dev extra)")
    model = DecoderModel.from_pretrained(checkpoint)
    hf = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, attn_implementation="eager").eval()
    ids = torch.randint(0, 256, (17,), generator=torch.Generator().manual_seed(0))
    ours, _ = _prefill(model, ids)
    with torch.no_grad():
        ref = hf(input_ids=ids[None]).logits[0]
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-4)  # fp32, 2-layer model
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))


def test_decode_steps_reproduce_prefill_bit_for_bit(checkpoint):
    model = DecoderModel.from_pretrained(checkpoint)
    ids = torch.randint(0, 256, (20,), generator=torch.Generator().manual_seed(1))
    full, (k, v) = _prefill(model, ids)
    for cut in (1, 7, 19):
        step, _ = model.forward(SequenceBatch([ids[cut : cut + 1]], [cut], [(k[:, :, :cut], v[:, :, :cut])]))
        assert_bitwise_equal(step[0][0], full[cut], f"decode at {cut}")


def test_a_sequence_gives_the_same_logits_whatever_shares_the_pass(checkpoint):
    model = DecoderModel.from_pretrained(checkpoint)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 256, (11,), generator=g)
    alone, _ = _prefill(model, ids)
    others = [torch.randint(0, 256, (n,), generator=g) for n in (3, 29, 1)]
    batch = SequenceBatch([others[0], ids, others[1], others[2]], [0] * 4, [None] * 4)
    logits, _ = model.forward(batch)
    assert_bitwise_equal(logits[1], alone, "inside a mixed batch")


def test_bad_model_input(checkpoint):
    model = DecoderModel.from_pretrained(checkpoint)
    for batch in (SequenceBatch([torch.tensor([300])], [0], [None]),
                  SequenceBatch([torch.tensor([], dtype=torch.long)], [0], [None]),
                  SequenceBatch([torch.tensor([1])], [0, 1], [None]),
                  SequenceBatch([torch.tensor([1, 2])], [2047], [None])):  # fmt: skip
        with pytest.raises(InvalidArgumentError):
            model.forward(batch)


def test_safetensors_round_trip_and_interop(tmp_path):
    tensors = {"a": torch.randn(3, 4), "b": torch.arange(5, dtype=torch.int64), "c": torch.randn(2).bfloat16(),
               "empty": torch.empty(0, 3)}  # fmt: skip
    save_safetensors(tensors, tmp_path / "x.safetensors", {"format": "pt"})
    back = load_safetensors(tmp_path / "x.safetensors")
    for name, t in tensors.items():
        assert torch.equal(back[name], t), name


def test_hostile_safetensors_files_are_rejected(tmp_path):
    bad = tmp_path / "bad.safetensors"
    for payload in (b"\x01", struct.pack("<Q", 10**12) + b"{}",
                    struct.pack("<Q", 2) + b"{x",
                    _file({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 400]}}, b"\0" * 16),
                    _file({"t": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 8]}}, b"\0" * 16),
                    _file({"t": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}, b"\0")):  # fmt: skip
        bad.write_bytes(payload)
        with pytest.raises(InvalidArgumentError):
            load_safetensors(bad)


def _file(header: dict, data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def test_config_and_weight_validation(tmp_path):
    make_tiny_checkpoint(tmp_path / "m")
    cfg = ModelConfig.from_pretrained(tmp_path / "m")
    assert cfg.qkv_bias and cfg.head_dim == 16
    with pytest.raises(InvalidArgumentError, match="model_type"):
        ModelConfig.from_dict({"model_type": "gpt2", "hidden_size": 8, "num_attention_heads": 2})
    with pytest.raises(InvalidArgumentError, match="multiple"):
        ModelConfig.from_dict({"model_type": "llama", "vocab_size": 8, "hidden_size": 12, "intermediate_size": 8,
                               "num_hidden_layers": 1, "num_attention_heads": 3, "num_key_value_heads": 2})  # fmt: skip
    with pytest.raises(InvalidArgumentError, match=r"config\.json"):
        ModelConfig.from_pretrained(tmp_path)
    other = ModelConfig.from_dict(
        {**json.loads((tmp_path / "m" / "config.json").read_text()), "hidden_size": 32}
    )
    with pytest.raises(InvalidArgumentError, match="shape"):
        load_weights(tmp_path / "m", other)
