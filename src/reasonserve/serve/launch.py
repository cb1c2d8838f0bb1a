"""What ``reasonserve serve`` builds from its flags: the engine, its policy, the limits.

A checkpoint is served the way vLLM serves it: its end-of-sequence ids (``config.json``,
``generation_config.json`` and the tokenizer's) all end a request; its chat template
comes from the tokenizer unless ``--chat-template`` names a file (or is the template
itself); with ``--reasoning-parser`` the engine watches the end-of-thinking tag's token
id (when the tokenizer has it as one token) so requests move from REASONING to
ANSWERING and ``thinking_token_budget`` can be enforced. ``--policy`` picks a
scheduling policy by name, ``--policy-args`` gives its fields as a JSON object.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Mapping

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine.checkpoint import checkpoint_eos_ids
from reasonserve.engine.config import ModelConfig
from reasonserve.engine.tokenizer import Tokenizer, load_tokenizer
from reasonserve.serve.reasoning_parser import get_reasoning_parser, tag_token_ids

__all__ = [
    "end_of_thinking_config",
    "end_of_thinking_id",
    "end_of_thinking_ids",
    "make_policy",
    "read_chat_template",
    "serving_eos_ids",
]


def serving_eos_ids(model: str | pathlib.Path, tokenizer: Tokenizer | None) -> tuple[int, ...]:
    """The checkpoint's end-of-sequence ids, then the tokenizer's, without repeats."""
    ids = list(checkpoint_eos_ids(model))
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        ids.append(eos)
    return tuple(dict.fromkeys(ids))


def read_chat_template(value: str | None) -> str | None:
    """``--chat-template``: a file's text, or the template itself when no such file
    exists and the value looks like Jinja (vLLM accepts both)."""
    if value is None:
        return None
    path = pathlib.Path(value)
    if path.is_file():
        return path.read_text()
    if "{" in value:
        return value
    raise InvalidArgumentError(f"--chat-template: no file {value!r} (and it is not a Jinja template)")


def end_of_thinking_ids(parser_name: str | None, tokenizer: Tokenizer | None) -> tuple[int, ...]:
    """The token ids the tokenizer writes the parser's end tag as (one id when its
    vocabulary has the tag; several when it splits it); empty without a parser."""
    if parser_name is None or tokenizer is None:
        return ()
    return tag_token_ids(tokenizer, get_reasoning_parser(parser_name).end_tag)


def end_of_thinking_id(parser_name: str | None, tokenizer: Tokenizer | None) -> int | None:
    """The end tag's token id when the tokenizer writes it as one token, else None."""
    ids = end_of_thinking_ids(parser_name, tokenizer)
    return ids[0] if len(ids) == 1 else None


def end_of_thinking_config(flag_id: int | None, parser_name: str | None, tokenizer: Tokenizer | None) -> dict:
    """The :class:`~reasonserve.engine.EngineConfig` fields of the end of thinking:
    ``--end-of-thinking-token-id`` when given, else the parser's end tag as the tokenizer
    writes it (one id, or a sequence of ids)."""
    if flag_id is not None:
        return {"end_of_thinking_token_id": flag_id}
    ids = end_of_thinking_ids(parser_name, tokenizer)
    if len(ids) == 1:
        return {"end_of_thinking_token_id": ids[0]}
    return {"end_of_thinking_token_ids": ids}


def make_policy(name: str, args: str | None) -> object:
    """A policy from the registry, its dataclass fields set from a JSON object."""
    from reasonserve.policies import REGISTRY

    if name not in REGISTRY:
        raise InvalidArgumentError(f"--policy must be one of {sorted(REGISTRY)}, got {name!r}")
    factory = REGISTRY[name]
    fields = _json_object(args, "--policy-args")
    known = {f.name for f in dataclasses.fields(factory)} if dataclasses.is_dataclass(factory) else set()
    unknown = sorted(set(fields) - known - {"name"})
    if unknown or "name" in fields:
        allowed = sorted(known - {"name"})
        bad = unknown or ["name"]
        raise InvalidArgumentError(f"--policy-args: {name} has no field(s) {bad}; its fields: {allowed}")
    try:
        return factory(**fields)
    except (TypeError, ValueError) as err:
        raise InvalidArgumentError(f"--policy-args for {name}: {err}") from None


def _json_object(text: str | None, flag: str) -> Mapping:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError as err:
        raise InvalidArgumentError(f"{flag} must be a JSON object: {err}") from None
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{flag} must be a JSON object, got {text[:80]!r}")
    return value


def load_serving_tokenizer(model: str | pathlib.Path) -> Tokenizer | None:
    return load_tokenizer(model, ModelConfig.from_pretrained(model).vocab_size)
