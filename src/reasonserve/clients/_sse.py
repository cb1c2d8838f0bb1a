"""Server-sent events from a byte stream, bounded: the ``data`` of each event.

Lines end in ``\\n`` (``\\r\\n`` and ``\\r`` accepted); an event ends at a blank line;
``data:`` lines are joined with ``\\n``; comments (``:``) and the ``event``/``id``/
``retry`` fields are skipped. Anything else, or a line or event past the size limits,
is a :class:`MalformedResponseError` (an HTML error page or a proxy's garbage must not
pass as a stream that merely ended).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from reasonserve.clients.errors import MalformedResponseError

__all__ = ["MAX_EVENT_BYTES", "sse_data"]

MAX_EVENT_BYTES = 8 * 2**20
_SKIPPED = (b"event", b"id", b"retry")


async def sse_data(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The ``data`` payload of every complete event in ``chunks``."""
    buffer = b""
    data: list[bytes] = []
    size = 0
    async for piece in chunks:
        buffer += piece
        if len(buffer) > MAX_EVENT_BYTES:
            raise MalformedResponseError(f"SSE line longer than {MAX_EVENT_BYTES} bytes")
        lines = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        buffer = lines.pop()
        for line in lines:
            if not line:
                if data:
                    yield _decode(b"\n".join(data))
                data, size = [], 0
                continue
            value = _field(line)
            if value is not None:
                data.append(value)
                size += len(value)
                if size > MAX_EVENT_BYTES:
                    raise MalformedResponseError(f"SSE event larger than {MAX_EVENT_BYTES} bytes")
    if data or buffer.strip():
        # The stream ended inside an event: the caller decides whether that is a drop.
        return


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
