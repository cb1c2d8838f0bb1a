"""Request bytes -> a validated request model, every failure a 400 naming the parameter.

``json.loads`` failures of every kind are caught: malformed JSON, invalid UTF-8,
nesting too deep (``RecursionError``), integer literals over Python's digit limit,
and the non-standard ``NaN``/``Infinity`` literals. A body declared as another media
type than JSON is a 415 (vLLM's rule); a body with no content type is read as JSON.
"""

from __future__ import annotations

import json
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from reasonserve.serve.errors import ApiError

__all__ = ["json_body", "param_name", "parse_body"]

Model = TypeVar("Model", bound=BaseModel)
_TYPE_TAGS = {"str", "int", "float", "bool", "none", "dict", "list"}


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


async def json_body(request) -> bytes:
    """The raw body of a request whose content type is JSON (``application/json`` or a
    ``+json`` type) or absent; any other type is a 415 before the body is read."""
    declared = request.headers.get("content-type")
    if declared is not None:
        media = declared.split(";", 1)[0].strip().lower()
        if media != "application/json" and not media.endswith("+json"):
            raise ApiError(
                415, f"Unsupported Media Type: only 'application/json' is allowed, got {media[:64]!r}"
            )
    return await request.body()


def parse_body(raw: bytes, model: type[Model]) -> Model:
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply") from None
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, integer digit limit
        raise ApiError(400, f"request body is not valid JSON: {str(err)[:200]}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "request body must be a JSON object")
    try:
        return model.model_validate(data)
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply") from None
    except ValidationError as err:
        errors = err.errors(include_input=False, include_url=False)
        # of a union's branches the one that got furthest, and there a broken constraint
        # (``-1`` is not >= 0) over a type mismatch (``-1`` is not a string)
        first = max(errors, key=lambda e: (len(e["loc"]), not e["type"].endswith("_type")))
        param = param_name(first["loc"])
        raise ApiError(400, f"{param}: {first['msg']}" if param else first["msg"], param=param) from None


def param_name(loc: tuple) -> str | None:
    """``("messages", 0, "content", "list[TextPart]", 1, "type")`` -> ``messages[0].content[1].type``
    (union branch tags dropped)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.lower() in _TYPE_TAGS or not part.isidentifier() or part[:1].isupper():
            continue
        else:
            out += f".{part}" if out else part
    return out or None
