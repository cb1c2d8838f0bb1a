"""A tiny real HF tokenizer (byte-level BPE, no merges) with Qwen3-style chat tokens.

Ids 0-255 are the bytes (GPT-2's byte-to-unicode map), then the added tokens below,
so a checkpoint with ``vocab_size >= 261`` can serve it. Its chat template is written
here (ChatML turns; ``enable_thinking: false`` puts an empty thinking block in the
prompt, as Qwen3's template does).
"""

from __future__ import annotations

import json
import pathlib

ADDED = {"<|im_end|>": 256, "<|endoftext|>": 257, "<think>": 258, "</think>": 259, "<|im_start|>": 260}
VOCAB_SIZE = 261
CHAT_TEMPLATE = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte-level map: printable bytes stand for themselves, the others for
    code points from 256 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    out, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            out[byte] = chr(byte)
        else:
            out[byte] = chr(256 + extra)
            extra += 1
    return out


def write_tiny_hf_tokenizer(folder: str | pathlib.Path, *, chat_template: str | None = CHAT_TEMPLATE) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: byte for byte, ch in _byte_chars().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.add_tokens(["<think>", "</think>"], special_tokens=False)  # as in Qwen3: kept in decoded text
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    if chat_template is not None:
        fast.chat_template = chat_template
    fast.save_pretrained(str(folder))
    ids = {t: fast.convert_tokens_to_ids(t) for t in ADDED}
    assert ids == ADDED, ids
    (pathlib.Path(folder) / "generation_config.json").write_text(json.dumps({"eos_token_id": [256, 257]}))


def tiny_hf_checkpoint(folder: str | pathlib.Path) -> pathlib.Path:
    """A tiny random Qwen3 checkpoint (head_dim 16, EOS ``<|im_end|>``) with this tokenizer."""
    from reasonserve.engine import make_tiny_checkpoint

    extra = {"head_dim": 16, "eos_token_id": ADDED["<|im_end|>"]}
    path = make_tiny_checkpoint(folder, model_type="qwen3", vocab_size=VOCAB_SIZE, extra=extra)
    write_tiny_hf_tokenizer(path)
    return path
