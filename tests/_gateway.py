"""Gateway test helpers: a tiny checkpoint whose output is known, and a live gateway.

:func:`write_chain_checkpoint` writes, with transformers' own classes
(``save_pretrained``), a Qwen2 model whose next token depends on the current one only:
one-hot embeddings, zeroed attention and MLP outputs, an LM head that maps each
character to its successor with a margin no sampling temperature here overcomes. Its
tokenizer has one token per character plus ``<think>``, ``</think>`` (the fixed
end-of-thinking token) and ``<eos>``. From any character outside the chains below the
model writes ``REASONING``, ``</think>``, ``ANSWER``, ``<eos>``; after ``~`` it reasons
forever (``LOOP`` again and again); after a probe's ``\\boxed{`` it answers ``42}``.
The head size is 64, so vLLM's CPU attention takes it too. Characters outside printable
ASCII and newline are unknown to it.
"""

from __future__ import annotations

import contextlib
import itertools
import pathlib

from _live_server import live_app
from reasonserve.gateway import GatewayConfig, create_gateway_app

REASONING = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
ANSWER = "\n\\boxed{42}"
LOOP = "acfghijklmnpqrstuvwyz"
THINK_END = "</think>"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|><think>{% endif %}"
)
_SPECIALS = ("<unk>", "<eos>", "<think>", THINK_END)
# With ``split_think_end``: no ``</think>`` token; BPE merges write it as these three.
SPLIT_THINK_END = ("</", "think", ">")
_MERGES = (("<", "/"), ("t", "h"), ("th", "i"), ("thi", "n"), ("thin", "k"))


def _byte_char(text: str) -> str:
    """A character as byte-level BPE writes it (GPT-2's alphabet: space is Ġ, newline Ċ)."""
    return {" ": "\u0120", "\n": "\u010a"}.get(text, text)


def _vocab(split_think_end: bool = False) -> dict[str, int]:
    """Token -> id; the tokens are the specials and the byte-level forms of the characters
    (and, with ``split_think_end``, the merged tokens instead of ``</think>``)."""
    specials = _SPECIALS[:-1] if split_think_end else _SPECIALS
    merged = [a + b for a, b in _MERGES] if split_think_end else []
    tokens = [*specials, *(_byte_char(chr(c)) for c in range(32, 127)), _byte_char("\n"), *merged]
    return {t: i for i, t in enumerate(tokens)}


def _successors(vocab: dict[str, int], split_think_end: bool = False) -> dict[str, str]:
    """Token -> the token the model writes after it."""
    end = SPLIT_THINK_END if split_think_end else (THINK_END,)
    chain = [*REASONING, *end, *map(_byte_char, ANSWER), "<eos>"]
    nxt = {t: REASONING[0] for t in vocab}
    nxt.update(itertools.pairwise(chain))
    nxt.update(zip(LOOP, LOOP[1:] + LOOP[0], strict=True))
    nxt["~"] = LOOP[0]
    return nxt


def write_chain_checkpoint(folder: pathlib.Path, *, split_think_end: bool = False) -> pathlib.Path:
    """``split_think_end``: a vocabulary without ``</think>`` as one token (it is written
    as :data:`SPLIT_THINK_END`), and a model that writes those three tokens."""
    import torch
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = _vocab(split_think_end)
    # byte-level BPE: one token per character (but for the merges of the split tag), the
    # same under the tokenizer transformers builds for a Qwen2 checkpoint (its own
    # byte-level pipeline)
    merges = list(_MERGES) if split_think_end else []
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<unk>", special=True), AddedToken("<eos>", special=True)])
    tok.add_tokens([AddedToken(t, normalized=False) for t in _SPECIALS[2:] if t in vocab])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    hidden = 128
    cfg = Qwen2Config(vocab_size=len(vocab), hidden_size=hidden, intermediate_size=256, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=8192,
                      tie_word_embeddings=False, eos_token_id=vocab["<eos>"], bos_token_id=None,
                      pad_token_id=None)  # fmt: skip
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                param.zero_()  # the residual stream stays the current token's embedding
        model.model.embed_tokens.weight.copy_(torch.eye(len(vocab), hidden))
        head = torch.zeros(len(vocab), hidden)
        for token, successor in _successors(vocab, split_think_end).items():
            head[vocab[successor], vocab[token]] = 40.0 / hidden**0.5  # logit 40 after the RMS norm
        model.lm_head.weight.copy_(head)
    model.save_pretrained(folder)
    return folder


def token_id(token: str, split_think_end: bool = False) -> int:
    return _vocab(split_think_end)[token]


@contextlib.contextmanager
def chain_upstream(folder: pathlib.Path):
    """``reasonserve serve`` of the chain checkpoint written to ``folder`` (model "chain",
    ``<eos>`` ends a request, ``</think>`` is the end-of-thinking token): yields its
    :class:`~_live_server.Live`, with ``folder`` set."""
    from _live_server import live_server
    from reasonserve.engine import Engine, EngineConfig
    from reasonserve.serve.config import ServeConfig

    write_chain_checkpoint(folder)
    ids = dict(eos_token_id=token_id("<eos>"), end_of_thinking_token_id=token_id(THINK_END))
    engine = Engine.from_pretrained(folder, EngineConfig(block_size=16, num_blocks=1024, **ids))
    with live_server(engine, ServeConfig(model_name="chain", max_tokens_limit=4000)) as live:
        live.folder = folder
        yield live


@contextlib.contextmanager
def live_gateway(cfg: GatewayConfig):
    """The gateway of ``cfg`` on a loopback port: yields ``(url, gateway)``."""
    app = create_gateway_app(cfg)
    gateway = app.state.gateway
    with live_app(app, cfg.limits, cleanup=gateway.http.aclose) as (_server, port):
        yield f"http://127.0.0.1:{port}", gateway
