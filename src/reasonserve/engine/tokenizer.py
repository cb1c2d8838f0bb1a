"""Tokenizers for checkpoint folders.

A folder with HF tokenizer files gets ``transformers.AutoTokenizer`` (local files only).
A folder without one, whose vocabulary has at least 256 ids, gets :class:`ByteTokenizer`
(ids 0-255 are UTF-8 bytes) so tiny random checkpoints can take and return text.
"""

from __future__ import annotations

import importlib.util
import pathlib
from collections.abc import Sequence
from typing import Protocol

__all__ = ["ByteTokenizer", "Tokenizer", "load_tokenizer"]


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes as token ids; ids above 255 decode to nothing."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


class _HFTokenizer:
    def __init__(self, path: str) -> None:
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(path, local_files_only=True)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids)))


def load_tokenizer(path: str | pathlib.Path, vocab_size: int) -> Tokenizer | None:
    folder = pathlib.Path(path)
    has_files = any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json"))
    if has_files and importlib.util.find_spec("transformers") is not None:
        return _HFTokenizer(str(folder))
    return ByteTokenizer() if vocab_size >= 256 else None
