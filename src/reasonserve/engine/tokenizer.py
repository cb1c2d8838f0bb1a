"""Tokenizers for checkpoint folders, and incremental detokenization for streams.

A folder with HF tokenizer files gets ``transformers.AutoTokenizer`` (local files only);
its chat template is applied by ``apply_chat_template`` and its text decodes without
special tokens (vLLM's default ``skip_special_tokens``). A folder without one, whose
vocabulary has at least 256 ids, gets :class:`ByteTokenizer` (ids 0-255 are UTF-8 bytes)
so tiny random checkpoints can take and return text; its chat template is the plain
``<|role|>`` one (:data:`BYTE_CHAT_TEMPLATE`, rendered here without Jinja), and a custom
template for it is rendered by ``transformers``' sandboxed Jinja.

Text that cannot be encoded (a lone UTF-16 surrogate such as ``"\\ud800"``, which JSON
can carry) raises :class:`InvalidArgumentError` naming the position.
:class:`IncrementalDecoder` turns a growing list of token ids into text pieces whose
concatenation equals ``decode`` of all the ids: it never emits half of a character.
"""

from __future__ import annotations

import importlib.util
import pathlib
from collections.abc import Sequence
from typing import Any, Protocol

from reasonserve.core.errors import ImplementationUnavailableError, InvalidArgumentError

__all__ = [
    "BYTE_CHAT_TEMPLATE",
    "ByteTokenizer",
    "IncrementalDecoder",
    "Tokenizer",
    "check_text",
    "load_tokenizer",
]

_REPLACEMENT = "\ufffd"


BYTE_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content or '' }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)  # what ByteTokenizer.apply_chat_template computes without a custom template


class Tokenizer(Protocol):
    eos_token_id: int | None

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def convert_tokens_to_ids(self, token: str) -> int | None: ...

    def apply_chat_template(
        self,
        messages: list[dict],
        *,
        chat_template: str | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        **kwargs: Any,
    ) -> str: ...


def check_text(text: str) -> None:
    """Raise :class:`InvalidArgumentError` if ``text`` has no UTF-8 encoding (lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InvalidArgumentError(
            f"text contains a lone surrogate U+{ord(text[err.start]):04X} at index {err.start}; "
            "send valid Unicode (surrogates only in pairs)"
        ) from None


class ByteTokenizer:
    """UTF-8 bytes as token ids; ids above 255 decode to nothing. No special tokens."""

    eos_token_id: int | None = None
    has_chat_template = True  # the plain <|role|> template

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        check_text(text)
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return None  # no multi-byte tokens: a tag is its bytes

    def apply_chat_template(self, messages: list[dict], **options: Any) -> str:
        """``options``: as :meth:`Tokenizer.apply_chat_template`."""
        if options.get("chat_template") is not None:
            from transformers.utils.chat_template_utils import render_jinja_template

            return str(render_jinja_template(conversations=[messages], **options)[0][0])
        return _plain_chat(messages, **options)


def _plain_chat(
    messages: list[dict],
    *,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
    **_: Any,
) -> str:
    """:data:`BYTE_CHAT_TEMPLATE` in Python (template variables it does not read are ignored)."""
    parts = [f"<|{m['role']}|>\n{m.get('content') or ''}\n" for m in messages]
    if continue_final_message:
        parts[-1] = parts[-1][:-1]
    return "".join(parts) + ("<|assistant|>\n" if add_generation_prompt else "")


class _HFTokenizer:
    def __init__(self, path: str) -> None:
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.eos_token_id: int | None = self._tok.eos_token_id
        self.unk_token_id: int | None = self._tok.unk_token_id

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self._tok, "chat_template", None))

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        check_text(text)
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=True))

    def convert_tokens_to_ids(self, token: str) -> int | None:
        token_id = self._tok.convert_tokens_to_ids(token)
        return token_id if isinstance(token_id, int) else None

    def apply_chat_template(self, messages: list[dict], **options: Any) -> str:
        """``options``: as :meth:`Tokenizer.apply_chat_template`."""
        return str(self._tok.apply_chat_template(messages, tokenize=False, **options))


class IncrementalDecoder:
    """Decode a stream of token ids piece by piece.

    Keeps two offsets into the ids seen so far: text up to ``_read`` has been emitted,
    and ``_prefix`` is where the last emitted piece started (decoding from there keeps
    context such as a word-initial space). A piece ending in U+FFFD is held back: its
    last character is incomplete until more ids arrive. ``flush`` emits whatever is
    left, replacement characters included, so the pieces always add up to ``decode``.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tok = tokenizer
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def push(self, ids: Sequence[int]) -> str:
        self._ids.extend(ids)
        return self._advance(final=False)

    def flush(self) -> str:
        return self._advance(final=True)

    def _advance(self, *, final: bool) -> str:
        if self._read == len(self._ids):
            return ""
        done = self._tok.decode(self._ids[self._prefix : self._read])
        text = self._tok.decode(self._ids[self._prefix :])
        end = len(self._ids)
        if not final and (len(text) <= len(done) or text.endswith(_REPLACEMENT)):
            settled = self._settled(done, text)
            if settled is None:
                return ""
            end = settled
            text = self._tok.decode(self._ids[self._prefix : end])
        self._prefix, self._read = self._read, end
        return text[len(done) :]

    def _settled(self, done: str, text: str) -> int | None:
        """While ``text`` ends in U+FFFD: the largest id boundary (at most 4 back, UTF-8's
        longest character) whose text is final — a prefix of ``text`` followed by more of
        it, so its own last character, even a U+FFFD, can no longer change. Emitting it
        keeps a run of bytes that never form a character (a model's lone continuation
        bytes) from being held, and decoded again with each new id, without end."""
        for end in range(len(self._ids) - 1, max(self._read, len(self._ids) - 4), -1):
            head = self._tok.decode(self._ids[self._prefix : end])
            if len(done) < len(head) < len(text) and text.startswith(head):
                return end
        return None


def load_tokenizer(path: str | pathlib.Path, vocab_size: int) -> Tokenizer | None:
    """The folder's HF tokenizer; without tokenizer files, the byte tokenizer (vocabularies
    of 256+ ids) or None. Tokenizer files without ``transformers`` installed are an error:
    the byte tokenizer would read such a model's ids wrong."""
    folder = pathlib.Path(path)
    has_files = any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json"))
    if has_files:
        if importlib.util.find_spec("transformers") is None:
            raise ImplementationUnavailableError(
                f"{folder} has a tokenizer, which needs transformers: pip install 'reasonserve[serve]'"
            )
        return _HFTokenizer(str(folder))
    return ByteTokenizer() if vocab_size >= 256 else None
