"""Bounded, typed reads of untrusted host replies (no eval; shapes checked)."""

from __future__ import annotations

import json

from reasonserve.clients.errors import HostError, HostRejectedError, MalformedResponseError

__all__ = ["MAX_BODY_BYTES", "error_event", "field", "ids_or_none", "load_json", "opt_int"]

MAX_BODY_BYTES = 64 * 2**20  # a reply larger than this is malformed, not read


def load_json(raw: bytes | str, what: str) -> dict:
    if len(raw) > MAX_BODY_BYTES:
        raise MalformedResponseError(f"{what}: reply larger than {MAX_BODY_BYTES} bytes")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as err:
        raise MalformedResponseError(f"{what}: not JSON ({type(err).__name__}: {str(err)[:120]})") from None
    if not isinstance(body, dict):
        raise MalformedResponseError(f"{what}: expected a JSON object, got {type(body).__name__}")
    return body


def field(body: dict, key: str, kind: type | tuple[type, ...], what: str):
    value = body.get(key) if isinstance(body, dict) else None
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _tuple(kind)):
        shown = str(value)[:80]
        raise MalformedResponseError(f"{what}: field {key!r} missing or not {_names(kind)}: {shown}")
    return value


def opt_int(body: dict, key: str, what: str) -> int | None:
    value = body.get(key) if isinstance(body, dict) else None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MalformedResponseError(f"{what}: field {key!r} must be an int >= 0, got {str(value)[:80]}")
    return value


def ids_or_none(value, what: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not set(map(type, value)) <= {int}:  # bools are not ids
        raise MalformedResponseError(f"{what}: token ids must be a list of ints")
    return tuple(value)


def _tuple(kind) -> tuple:
    return kind if isinstance(kind, tuple) else (kind,)


def _names(kind) -> str:
    return "/".join(k.__name__ for k in _tuple(kind))


def error_event(data: dict, what: str) -> HostError:
    """A stream event carrying ``{"error": {...}}`` (the host failed mid-stream)."""
    err = data.get("error")
    code = err.get("code") if isinstance(err, dict) else None
    status = code if isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 600 else 500
    message = err.get("message") if isinstance(err, dict) else err
    kind = HostRejectedError if status < 500 else HostError
    return kind(f"{what}: the host reported an error: {str(message)[:300]}", status=status, body=str(err))
