"""Server-sent events from a byte stream, bounded: the ``data`` of each event.

Lines end in ``\\n`` (``\\r\\n`` and ``\\r`` accepted, also when a chunk ends between
``\\r`` and ``\\n``); an event ends at a blank line; ``data:`` lines are joined with
``\\n``; comments (``:``) and the ``event``/``id``/``retry`` fields are skipped. Anything
else, or a line or event past the size limits, is a :class:`MalformedResponseError`
(an HTML error page or a proxy's garbage must not pass as a stream that merely ended).
Each chunk is scanned once (a line trickled in tiny chunks costs linear time), and with
``idle_s`` a stream that keeps sending bytes (keep-alive comments, a never-ending line)
but no event for ``idle_s`` seconds raises :class:`RequestTimeoutError`.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator

from reasonserve.clients.errors import MalformedResponseError, RequestTimeoutError

__all__ = ["MAX_EVENT_BYTES", "sse_data"]

MAX_EVENT_BYTES = 8 * 2**20
_SKIPPED = (b"event", b"id", b"retry")
_EOL = re.compile(rb"\r\n|\r|\n")


async def sse_data(chunks: AsyncIterator[bytes], *, idle_s: float | None = None) -> AsyncIterator[str]:
    """The ``data`` payload of every complete event in ``chunks``."""
    lines = _Lines()
    data: list[bytes] = []
    size = 0
    last_event = time.monotonic()
    async for piece in chunks:
        for line in lines.feed(piece):
            if not line:
                if data:
                    yield _decode(b"\n".join(data))
                    last_event = time.monotonic()
                data, size = [], 0
                continue
            value = _field(line)
            if value is not None:
                data.append(value)
                size += len(value)
                if size > MAX_EVENT_BYTES:
                    raise MalformedResponseError(f"SSE event larger than {MAX_EVENT_BYTES} bytes")
        if idle_s is not None and time.monotonic() - last_event > idle_s:
            raise RequestTimeoutError(
                f"no server-sent event within {idle_s} s (keep-alives or a partial line only)"
            )
    # A stream that ends inside an event delivers nothing more: the caller decides
    # whether that is a drop.


class _Lines:
    """Splits chunks into lines, scanning each byte once; the unfinished line is bounded."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.after_cr = False

    def feed(self, piece: bytes) -> list[bytes]:
        if self.after_cr and piece.startswith(b"\n"):
            piece = piece[1:]  # the \n of a \r\n cut between two chunks
        self.after_cr = False
        if not piece:
            return []
        self.after_cr = piece.endswith(b"\r")
        *done, tail = _EOL.split(piece)
        out = []
        for segment in done:
            self.parts.append(segment)
            out.append(b"".join(self.parts))
            self.parts, self.size = [], 0
        if tail:
            self.parts.append(tail)
            self.size += len(tail)
            if self.size > MAX_EVENT_BYTES:
                raise MalformedResponseError(f"SSE line longer than {MAX_EVENT_BYTES} bytes")
        return out


def _field(line: bytes) -> bytes | None:
    if line.startswith(b":"):
        return None
    name, sep, value = line.partition(b":")
    if name == b"data":
        return value[1:] if value.startswith(b" ") else value
    if sep and name in _SKIPPED:
        return None
    raise MalformedResponseError(f"not a server-sent event line: {line[:80]!r}")


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedResponseError("SSE data is not UTF-8") from None
