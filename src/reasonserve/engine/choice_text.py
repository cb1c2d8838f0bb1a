"""One choice's text: incremental detokenization plus stop strings.

Streaming and non-streaming responses both build their text here, from the same token
ids in the same order, so a streamed reply concatenates to the non-streamed one.
A piece is emitted only when it cannot be the start of a stop string: up to
``len(longest stop) - 1`` characters are held back until they are decided.
"""

from __future__ import annotations

from collections.abc import Sequence

from reasonserve.engine.tokenizer import IncrementalDecoder

__all__ = ["ChoiceText"]


class ChoiceText:
    """Detokenized text of one choice, cut at the first stop string.

    Emitted pieces are kept as a list (``text`` joins them once, when read) and only
    the undecided tail is searched, so each ``push`` costs O(its new text + the longest
    stop string), whatever the length of the text so far."""

    def __init__(self, tokenizer, stop: Sequence[str] = (), *, include_stop: bool = False) -> None:
        self._decoder = IncrementalDecoder(tokenizer) if tokenizer is not None else None
        self._stop = tuple(stop)
        self._include_stop = include_stop
        self._holdback = max((len(s) for s in self._stop), default=1) - 1
        self._sent: list[str] = []  # emitted pieces
        self._pending = ""  # decoded, not emitted: may hold the start of a stop string
        self.stop_hit: str | None = None  # the stop string that ended the text

    @property
    def text(self) -> str:
        return "".join(self._sent) + self._pending

    def push(self, token_ids: Sequence[int]) -> str:
        """Add tokens; return the text that is now safe to send."""
        if self.stop_hit is None and self._decoder is not None:
            self._append(self._decoder.push(token_ids))
        return self._emit(final=self.stop_hit is not None)

    def finish(self) -> str:
        """The request ended: return everything not yet sent."""
        if self.stop_hit is None and self._decoder is not None:
            self._append(self._decoder.flush())
        return self._emit(final=True)

    def _append(self, piece: str) -> None:
        if not piece:
            return
        self._pending += piece  # a stop string can only start in the held-back tail or later
        hits = [(i, s) for s in self._stop if (i := self._pending.find(s)) >= 0]
        if hits:
            index, stop = min(hits)
            self.stop_hit = stop
            self._pending = self._pending[: index + (len(stop) if self._include_stop else 0)]

    def _emit(self, *, final: bool) -> str:
        end = len(self._pending) if final else max(0, len(self._pending) - self._holdback)
        piece, self._pending = self._pending[:end], self._pending[end:]
        if piece:
            self._sent.append(piece)
        return piece
