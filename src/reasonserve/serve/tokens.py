"""``POST /tokenize`` and ``POST /detokenize`` in vLLM's shapes.

``/tokenize`` takes a ``prompt`` (special tokens added unless ``add_special_tokens`` is
false, as for completions) or chat ``messages`` (rendered by the chat template, no
special tokens added unless asked, as for chat); ``/detokenize`` decodes ``tokens`` the
way replies are decoded. Both run in a worker thread (they may tokenize a long text).
"""

from __future__ import annotations

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.serve.config import ServeConfig
from reasonserve.serve.errors import ApiError
from reasonserve.serve.protocol import DetokenizeRequest, TokenizeRequest
from reasonserve.serve.sampling import Capacity, chat_text

__all__ = ["detokenize", "tokenize"]


def tokenize(body: TokenizeRequest, cap: Capacity, cfg: ServeConfig) -> dict:
    _check_model(body.model, cfg)
    tokenizer = _tokenizer(cap, "messages" if body.messages is not None else "prompt")
    if (body.prompt is None) == (body.messages is None):
        raise ApiError(400, "send exactly one of prompt and messages", param="prompt")
    if body.prompt is None:
        text, param, special = chat_text(body, cap, cfg), "messages", bool(body.add_special_tokens)
    else:
        text, param, special = body.prompt, "prompt", body.add_special_tokens is not False
    try:
        tokens = tokenizer.encode(text, add_special_tokens=special)
    except InvalidArgumentError as err:
        raise ApiError(400, str(err), param=param) from None
    out: dict = {
        "count": len(tokens),
        "max_model_len": cap.max_model_len,
        "tokens": tokens,
        "token_strs": None,
    }
    if body.return_token_strs:
        out["token_strs"] = [tokenizer.decode([t]) for t in tokens]
    return out


def detokenize(body: DetokenizeRequest, cap: Capacity, cfg: ServeConfig) -> dict:
    _check_model(body.model, cfg)
    tokenizer = _tokenizer(cap, "tokens")
    vocab = cap.vocab_size
    bad = next((t for t in body.tokens if vocab is not None and t >= vocab), None)
    if bad is not None:
        raise ApiError(400, f"token id {bad} is outside the vocabulary [0, {vocab})", param="tokens")
    return {"prompt": tokenizer.decode(body.tokens)}


def _check_model(model: str | None, cfg: ServeConfig) -> None:
    if model is not None and model != cfg.model_name:
        raise ApiError(404, f"The model `{model[:200]}` does not exist.", param="model")


def _tokenizer(cap: Capacity, param: str):
    if cap.tokenizer is None:
        raise ApiError(400, "this model has no tokenizer; send token ids", param=param)
    return cap.tokenizer
