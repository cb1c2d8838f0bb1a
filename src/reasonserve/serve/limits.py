"""Connection-level limits uvicorn does not have.

:class:`RequestLimitMiddleware` (ASGI, outermost) answers 503 at once, before reading
the body, to a request beyond ``max_requests`` being served; ``/health`` and
``/metrics`` are exempt, so a flood of slow clients can never make the server look
dead to its supervisor. (uvicorn's own ``limit_concurrency`` counts idle connections
and health checks alike, and is not used.)

:class:`BodyLimitMiddleware` (ASGI) reads a request body before the app sees it,
counting bytes as they arrive, so a chunked body over the limit is cut off at the
limit (413) instead of buffered; a body not complete within ``body_timeout_s`` gets 408.
The app then receives the body in one message, and the original ``receive`` after
it (for disconnect detection).

:func:`timed_h11_protocol` returns uvicorn's h11 protocol with a header-read timeout:
a connection that starts a request but has not sent the whole header block within
``header_timeout_s`` is closed (uvicorn's own keep-alive timer stops at the first byte),
and so is a new connection that sends nothing within that time. It also has a send
timeout: a client that stops reading its reply (a stream it never drains) holds the
connection's write buffer above uvicorn's high-water mark; if it stays there for
``send_timeout_s`` the connection is dropped (its buffered bytes discarded), the app
sees the disconnect, and the request's engine work is aborted. Without it such a
client would hold a connection, and the reply it does not read, for ever.
"""

from __future__ import annotations

import asyncio
import json

from reasonserve.serve.errors import error_body

__all__ = ["EXEMPT_PATHS", "BodyLimitMiddleware", "RequestLimitMiddleware", "timed_h11_protocol"]

EXEMPT_PATHS = frozenset({"/health", "/metrics"})


class RequestLimitMiddleware:
    def __init__(self, app, *, max_requests: int) -> None:
        self.app, self.max_requests = app, max_requests
        self.active = 0  # requests being served, exempt paths left out (one event loop: no lock)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] in EXEMPT_PATHS:
            return await self.app(scope, receive, send)
        if self.active >= self.max_requests:
            return await _reply(send, 503, f"the server is serving its limit of {self.max_requests} requests")
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1


class BodyLimitMiddleware:
    def __init__(self, app, *, max_bytes: int, body_timeout_s: float) -> None:
        self.app, self.max_bytes, self.body_timeout_s = app, max_bytes, body_timeout_s

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            return await _reply(send, 413, f"request body larger than {self.max_bytes} bytes")
        try:
            body = await asyncio.wait_for(self._read(receive), self.body_timeout_s)
        except asyncio.TimeoutError:
            return await _reply(send, 408, f"request body not received within {self.body_timeout_s} s")
        except _TooLarge:
            return await _reply(send, 413, f"request body larger than {self.max_bytes} bytes")
        if body is None:
            return None  # the client went away
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive) -> bytes | None:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


class _TooLarge(Exception):
    pass


def _replay(body: bytes, receive):
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _reply(send, status: int, message: str) -> None:
    payload = json.dumps(error_body(status, message)).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def timed_h11_protocol(header_timeout_s: float, send_timeout_s: float = 30.0):
    """uvicorn's ``H11Protocol`` plus a header-read deadline and a send-stall deadline, as a
    class for ``Config(http=...)``."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _send_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def data_received(self, data: bytes) -> None:
            if self._header_timer is None and (self.cycle is None or self.cycle.response_complete):
                self._header_timer = self.loop.call_later(header_timeout_s, self._headers_too_slow)
            before = self.cycle
            super().data_received(data)
            if self.cycle is not before:  # a new request's headers are complete
                self._cancel_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_header_timer()
            self._cancel_send_timer()
            super().connection_lost(exc)

        def pause_writing(self) -> None:  # the client is not reading what we send
            super().pause_writing()
            if self._send_timer is None:
                self._send_timer = self.loop.call_later(send_timeout_s, self._reader_too_slow)

        def resume_writing(self) -> None:
            self._cancel_send_timer()
            super().resume_writing()

        def _cancel_send_timer(self) -> None:
            if self._send_timer is not None:
                self._send_timer.cancel()
                self._send_timer = None

        def _reader_too_slow(self) -> None:
            self._send_timer = None
            self.transport.abort()  # close() would wait to flush to a client that never reads

        def _cancel_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    return TimedH11Protocol
