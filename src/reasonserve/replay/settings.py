"""``--setting``: which stopping rule a replay reports as its headline.

Settings are chosen on the development recordings (``reasonserve calibrate``) and then
*applied unchanged* to any other recordings; that is how a chosen setting is shown to
generalize. A setting string is one of

- ``dev`` — the setting shipped for this replay kind (chosen on the development data);
- ``all`` — no early stop (every sample; ``sc``/``prm``/``mcts`` only);
- ``calibrated`` — re-chosen on the given data by cross-validation (out-of-sample on
  those data, but the setting itself is fitted to them);
- explicit ``key=value`` pairs separated by commas, as ``reasonserve calibrate`` prints
  them: for ``probes``/``cot`` ``agree=<tokens>[,min=<tokens>]``; for ``sc``/``prm``/
  ``mcts`` any of ``agree=<votes>``, ``entropy=<0..1>``, ``min=<samples>``,
  ``reward=<first-sample reward gate>``, ``max=<samples>``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["SAMPLE_KEYS", "TOKEN_KEYS", "parse_setting", "resolve_setting"]

R = TypeVar("R")

TOKEN_KEYS: dict[str, type] = {"agree": int, "min": int}
SAMPLE_KEYS: dict[str, type] = {"agree": int, "entropy": float, "min": int, "reward": float, "max": int}
_MAX_LEN = 200


def parse_setting(text: str, keys: dict[str, type]) -> dict[str, int | float] | str:
    """``"dev"``/``"calibrated"`` as they are, else the ``key=value`` pairs, validated.

    Raises :class:`InvalidArgumentError` naming the bad part: unknown or repeated keys,
    values that are not numbers of the key's type, non-finite or negative numbers.
    """
    if not isinstance(text, str) or len(text) > _MAX_LEN:
        raise InvalidArgumentError(f"a setting is a string of at most {_MAX_LEN} characters")
    text = text.strip()
    if text in ("dev", "calibrated"):
        return text
    if text == "all":
        return {}
    out: dict[str, int | float] = {}
    for part in text.split(","):
        key, sep, raw = (s.strip() for s in part.partition("="))
        if not sep or key not in keys:
            raise InvalidArgumentError(
                f"setting part {part.strip()!r}: expected key=value with key in {sorted(keys)}, "
                "or 'dev' / 'calibrated'"
            )
        if key in out:
            raise InvalidArgumentError(f"setting key {key!r} given twice")
        out[key] = _number(key, raw, keys[key])
    return out


def resolve_setting(
    text: str, keys: dict[str, type], dev: R, build: Callable[[dict[str, int | float]], R]
) -> R | None:
    """The rule ``text`` names: ``dev``, ``build(pairs)``, or ``None`` for "calibrated"."""
    parsed = parse_setting(text, keys)
    if parsed == "calibrated":
        return None
    if parsed == "dev":
        return dev
    assert isinstance(parsed, dict)
    return build(parsed)


def _number(key: str, raw: str, kind: type) -> int | float:
    try:
        value = kind(raw)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise InvalidArgumentError(f"setting {key}={raw!r}: not {what}") from None
    signed = key == "reward"  # a reward scale may be negative (logits)
    if not math.isfinite(value) or (not signed and value < 0):
        raise InvalidArgumentError(f"setting {key}={raw!r}: must be finite" + ("" if signed else " and >= 0"))
    return value
