"""Reasoning parsers: split a model's output into thinking text and answer text.

vLLM's ``--reasoning-parser`` semantics for the ``<think>...</think>`` family
(``deepseek_r1``, ``qwen3``), written as one small state machine so that the streamed
result is, by construction and by test, the non-streamed one:

* A start tag is dropped when the output *begins* with it (DeepSeek-R1 and older Qwen3
  templates let the model write ``<think>``; newer ones put it in the prompt).
* Everything before the first end tag is reasoning, everything after it is content;
  an output without an end tag is all reasoning (it was cut off while thinking).
* A request whose prompt already closed the thinking block (Qwen3's template with
  ``enable_thinking: false`` writes ``<think>\\n\\n</think>`` into it), or a ``qwen3``
  request with ``chat_template_kwargs.enable_thinking`` false, starts in the answer:
  all of its output is content.

Differences from vLLM, all for streaming equality: a start tag later in the output is
text (vLLM's non-streaming path would drop everything before it), and Qwen3's implicit
end of reasoning at ``<tool_call>`` is not recognised (no tool calling here).

:meth:`ReasoningParser.split` is the non-streaming split; :meth:`ReasoningParser.stream`
returns a :class:`ReasoningStream` taking text deltas. It holds back at most
``len(tag) - 1`` characters that could be the beginning of a tag, so its memory is
bounded and each delta costs O(its length). :class:`ReasoningTokenCounter` counts the
reasoning tokens of a stream of token ids by the tags' token ids: one id each in
DeepSeek-R1 and Qwen3 tokenizers; a sequence of ids when the vocabulary splits a tag,
exact for a model that writes the tokenizer's own split (the split a thinking budget
forces; see :func:`tag_token_ids`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from reasonserve.core.errors import InvalidArgumentError

__all__ = [
    "REASONING_PARSERS",
    "ReasoningParser",
    "ReasoningStream",
    "ReasoningTokenCounter",
    "get_reasoning_parser",
    "tag_token_ids",
]


@dataclass(frozen=True, slots=True)
class ReasoningParser:
    """One parser: its tags and whether it reads ``enable_thinking`` from the request's
    ``chat_template_kwargs`` (Qwen3's switch)."""

    name: str
    start_tag: str = "<think>"
    end_tag: str = "</think>"
    reads_enable_thinking: bool = False

    def __post_init__(self) -> None:
        if not self.start_tag or not self.end_tag or self.start_tag == self.end_tag:
            raise InvalidArgumentError(
                f"reasoning parser {self.name!r} needs two different non-empty tags, "
                f"got {self.start_tag!r} and {self.end_tag!r}"
            )

    def split(self, text: str, *, in_answer: bool = False) -> tuple[str | None, str | None]:
        """``(reasoning, content)`` of a whole output; an empty part is ``None``."""
        if in_answer:
            return None, text or None
        if text.startswith(self.start_tag):
            text = text[len(self.start_tag) :]
        reasoning, found, content = text.partition(self.end_tag)
        return reasoning or None, (content if found else "") or None

    def stream(self, *, in_answer: bool = False) -> ReasoningStream:
        """An incremental parser for one output (``in_answer``: see :meth:`starts_in_answer`)."""
        return ReasoningStream(self, in_answer=in_answer)

    def starts_in_answer(
        self, prompt: str | None = None, chat_template_kwargs: Mapping[str, object] | None = None
    ) -> bool:
        """Whether a request's output is all content: its prompt closed the thinking block
        (the last end tag comes after the last start tag), or, for parsers that read it,
        ``enable_thinking`` is false."""
        if self.reads_enable_thinking and (chat_template_kwargs or {}).get("enable_thinking", True) is False:
            return True
        return prompt is not None and prompt.rfind(self.end_tag) > prompt.rfind(self.start_tag)


class ReasoningStream:
    """Text deltas in, ``(reasoning_delta, content_delta)`` out (empty strings when none).

    The concatenation of everything returned by :meth:`push` and :meth:`finish` equals
    :meth:`ReasoningParser.split` of the concatenated deltas, whatever the split.
    """

    def __init__(self, parser: ReasoningParser, *, in_answer: bool = False) -> None:
        self._start, self._end = parser.start_tag, parser.end_tag
        self._at_start = not in_answer  # may still see the start tag
        self._in_answer = in_answer
        self._held = ""  # undecided text: a possible tag prefix (< len(tag) characters)

    @property
    def in_answer(self) -> bool:
        """True once the end tag has been seen (or the output started in the answer)."""
        return self._in_answer

    def push(self, delta: str) -> tuple[str, str]:
        if self._in_answer:
            return "", delta
        text = self._held + delta
        if self._at_start:
            if len(text) < len(self._start) and self._start.startswith(text):
                self._held = text
                return "", ""
            self._at_start = False
            if text.startswith(self._start):
                text = text[len(self._start) :]
        return self._reasoning(text)

    def finish(self) -> tuple[str, str]:
        """The output ended: release what was held back (a partial tag is text)."""
        held, self._held, self._at_start = self._held, "", False
        return ("", held) if self._in_answer else (held, "")

    def _reasoning(self, text: str) -> tuple[str, str]:
        index = text.find(self._end)
        if index >= 0:
            self._held, self._in_answer = "", True
            return text[:index], text[index + len(self._end) :]
        keep = _partial_tag_length(text, self._end)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep], ""


def _partial_tag_length(text: Sequence, tag: Sequence) -> int:
    """Length of the longest proper prefix of ``tag`` that ``text`` ends with."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text[len(text) - size :] == tag[:size]:
            return size
    return 0


class ReasoningTokenCounter:
    """Count the reasoning tokens of one output from its token ids, pushed as they come.

    The same rule as the text: start-tag ids at the very beginning are not reasoning,
    the end-tag ids and everything after them are not; without an end tag every token
    is. ``reasoning_tokens`` counts a possible partial end tag at the end as reasoning
    until it completes. Memory is bounded by the tags' lengths.
    """

    def __init__(self, start_ids: Sequence[int], end_ids: Sequence[int], *, in_answer: bool = False) -> None:
        if not start_ids or not end_ids:
            raise InvalidArgumentError("start_ids and end_ids must be non-empty token id sequences")
        self._start, self._end = tuple(start_ids), tuple(end_ids)
        self._head: list[int] | None = None if in_answer else []  # ids that may be the start tag
        self._tail: list[int] = []  # last len(end) - 1 reasoning ids
        self._in_answer = in_answer
        self.reasoning_tokens = 0

    @property
    def in_answer(self) -> bool:
        return self._in_answer

    def push(self, token_ids: Sequence[int]) -> int:
        """Take new ids; return the reasoning-token count so far."""
        for token in token_ids:
            if self._in_answer:
                break
            if self._head is None:
                self._count(token)
                continue
            self._head.append(token)
            if tuple(self._head) == self._start:
                self._head = None
            elif tuple(self._head) != self._start[: len(self._head)]:
                head, self._head = self._head, None
                for held in head:
                    if not self._in_answer:
                        self._count(held)
        return self.reasoning_tokens

    def finish(self) -> int:
        """The output ended: ids held as a possible start tag are reasoning."""
        head, self._head = self._head or [], None
        for token in head:
            if not self._in_answer:
                self._count(token)
        return self.reasoning_tokens

    def _count(self, token: int) -> None:
        window = (*self._tail, token)
        if window[-len(self._end) :] == self._end:
            self.reasoning_tokens -= len(self._end) - 1  # those ids were the tag, not reasoning
            self._in_answer, self._tail = True, []
            return
        self.reasoning_tokens += 1
        self._tail = list(window[1 - len(self._end) :]) if len(self._end) > 1 else []


def tag_token_ids(tokenizer, tag: str) -> tuple[int, ...]:
    """The token ids a tokenizer writes ``tag`` as: one id when the vocabulary has the tag
    as a token (``convert_tokens_to_ids``, HF tokenizers), else its encoding."""
    convert = getattr(tokenizer, "convert_tokens_to_ids", None)
    unknown = getattr(tokenizer, "unk_token_id", None)
    if convert is not None:
        token = convert(tag)
        if isinstance(token, int) and token != unknown:
            return (token,)
    ids = tuple(tokenizer.encode(tag))
    if not ids:
        raise InvalidArgumentError(f"the tokenizer encodes the tag {tag!r} to no tokens")
    return ids


REASONING_PARSERS: Mapping[str, ReasoningParser] = MappingProxyType(
    {
        "deepseek_r1": ReasoningParser("deepseek_r1"),
        "qwen3": ReasoningParser("qwen3", reads_enable_thinking=True),
    }
)


def get_reasoning_parser(name: str) -> ReasoningParser:
    """The parser called ``name`` (``--reasoning-parser``); unknown names are an error."""
    try:
        return REASONING_PARSERS[name]
    except KeyError:
        known = ", ".join(sorted(REASONING_PARSERS))
        raise InvalidArgumentError(f"unknown reasoning parser {name!r}; choose one of: {known}") from None
