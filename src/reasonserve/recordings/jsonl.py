"""Read recorded JSONL files (plain or ``.gz``) one object per line.

Blank lines are skipped; a line that is not a JSON object, or a missing or unreadable
file, raises :class:`InvalidArgumentError` naming ``path:line`` — recordings from
elsewhere must fail with a message, not a traceback from deep inside a loader.
"""

from __future__ import annotations

import gzip
import json
import pathlib
from collections.abc import Iterator

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["read_jsonl"]


def read_jsonl(path: str | pathlib.Path) -> Iterator[tuple[int, dict]]:
    """``(line number from 1, object)`` for every non-blank line of ``path``."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise InvalidArgumentError(f"{path}: no such file")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                if line.strip():
                    yield number, _object(path, number, line)
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError) as exc:
        raise InvalidArgumentError(f"{path}: unreadable ({type(exc).__name__}: {exc})") from None


def _object(path: pathlib.Path, number: int, line: str) -> dict:
    try:
        row = json.loads(line)
    except (ValueError, RecursionError) as exc:
        why = getattr(exc, "msg", "nested too deeply")
        raise InvalidArgumentError(f"{path}:{number}: not valid JSON ({why})") from None
    if not isinstance(row, dict):
        raise InvalidArgumentError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
    return row
