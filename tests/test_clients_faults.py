"""HTTPClient against a misbehaving HTTP server on loopback (a raw asyncio socket server
that answers what each test scripts): 4xx/5xx, retries only where the host cannot have
started the work, timeouts, malformed JSON and SSE, dropped streams. Every call must
end (typed error) well inside the asyncio timeout that wraps it: no hung tasks."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from _waits import until
from reasonserve.clients import (
    GenerateRequest,
    HostError,
    HostRejectedError,
    MalformedResponseError,
    OpenAIShim,
    RequestTimeoutError,
    SGLangShim,
    StreamDroppedError,
    TransportError,
)
from reasonserve.clients.http import HTTPClient

REQ = GenerateRequest("hi", max_tokens=4, request_id="f-1")
OK = {"choices": [{"text": "ok", "token_ids": [1], "finish_reason": "stop"}], "usage": {"prompt_tokens": 2}}


def _response(status: int, body: bytes, content_type: str = "application/json") -> bytes:
    head = f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def _sse_head() -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


@contextlib.asynccontextmanager
async def scripted(*replies):
    """A server answering the n-th request with ``replies[min(n, last)]``: bytes to send
    then close, or ``None`` to hang without answering. Yields (url, requests seen)."""
    seen: list[dict] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length")), 0)  # fmt: skip
        path = head.split(b" ")[1].decode()
        seen.append({"path": path, "body": json.loads(await reader.readexactly(length) or b"{}")})
        reply = replies[min(len(seen) - 1, len(replies) - 1)]
        if reply is None:
            await asyncio.sleep(3600)
        writer.write(reply)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        server.close()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10.0))  # a hang fails the test with TimeoutError


async def _generate(url, shim=None, **kw):
    async with HTTPClient(url, shim or OpenAIShim(), backoff_s=0.01, **kw) as c:
        return await c.generate(REQ)


async def _stream(url, **kw):
    async with HTTPClient(url, OpenAIShim(), backoff_s=0.01, **kw) as c:
        return [ch async for ch in c.stream(REQ)]


def test_500_is_typed_and_a_generation_is_not_retried():
    async def go():
        async with scripted(_response(500, b'{"error":{"message":"boom"}}')) as (url, seen):
            with pytest.raises(HostError) as info:
                await _generate(url)
            return info.value, len(seen)

    err, calls = run(go())
    assert err.status == 500 and "boom" in str(err) and not isinstance(err, HostRejectedError)
    assert calls == 1  # the host may have started it: never resent


def test_503_and_429_are_retried_with_backoff_then_succeed():
    async def go():
        replies = (_response(503, b"{}"), _response(429, b"{}"), _response(200, json.dumps(OK).encode()))
        async with scripted(*replies) as (url, seen):
            out = await _generate(url)
            return out, len(seen)

    out, calls = run(go())
    assert out.text == "ok" and calls == 3


def test_4xx_is_rejected_without_retry():
    async def go():
        async with scripted(_response(400, b'{"error":{"message":"bad max_tokens"}}')) as (url, seen):
            with pytest.raises(HostRejectedError, match="bad max_tokens"):
                await _generate(url)
            return len(seen)

    assert run(go()) == 1


def test_no_reply_times_out():
    async def go():
        async with scripted(None) as (url, seen):
            with pytest.raises(RequestTimeoutError):
                await _generate(url, timeout_s=0.3)
            return len(seen)

    assert run(go()) == 1


def test_connection_refused_is_a_transport_error():
    async def go():
        async with scripted(None) as (url, _):
            pass  # closed: nobody listens there any more
        with pytest.raises(TransportError):
            await _generate(url, max_retries=1)

    run(go())


def test_malformed_json_reply():
    async def go():
        async with scripted(_response(200, b"<html>proxy error</html>", "text/html")) as (url, _):
            with pytest.raises(MalformedResponseError, match="not JSON"):
                await _generate(url)

    run(go())


def test_malformed_sse():
    async def go():
        async with scripted(_sse_head() + b"<html>oops</html>\n\n") as (url, _):
            with pytest.raises(MalformedResponseError):
                await _stream(url)

    run(go())


def test_stream_dropped_before_its_final_event():
    event = {"choices": [{"text": "a", "token_ids": [1], "finish_reason": None}]}
    cut = _sse_head() + b"data: " + json.dumps(event).encode() + b"\n\n"

    async def go():
        async with scripted(cut) as (url, _):
            got = []
            with pytest.raises(StreamDroppedError):
                async with HTTPClient(url, OpenAIShim()) as c:
                    async for ch in c.stream(REQ):
                        got.append(ch)
            return got

    got = run(go())
    assert [ch.text for ch in got] == ["a"]  # what arrived before the drop was delivered


def test_stalled_stream_times_out():
    async def go():
        async with scripted(None) as (url, _):
            with pytest.raises(RequestTimeoutError):
                await _stream(url, timeout_s=0.3)

    run(go())


def test_sglang_cancel_calls_abort_request():
    async def go():
        async with scripted(None, _response(200, b"{}")) as (url, seen):
            async with HTTPClient(url, SGLangShim()) as c:
                task = asyncio.ensure_future(c.generate(REQ))
                await until(lambda: seen, "the request to reach the server")
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            return seen  # the client's close waits for the abort call

    seen = run(go())
    assert [s["path"] for s in seen] == ["/generate", "/abort_request"]
    assert seen[1]["body"] == {"rid": "f-1"}


def test_sglang_stream_left_early_calls_abort_request():
    event = {"text": "a", "output_ids": [1], "meta_info": {}}
    body = _sse_head() + b"data: " + json.dumps(event).encode() + b"\n\n"

    async def go():
        async with scripted(body, _response(200, b"{}")) as (url, seen):
            async with HTTPClient(url, SGLangShim()) as c, contextlib.aclosing(c.stream(REQ)) as chunks:
                async for chunk in chunks:
                    assert chunk.text == "a"
                    break  # the caller needs no more
            return seen  # the client's close waits for the abort call

    seen = run(go())
    assert [s["path"] for s in seen] == ["/generate", "/abort_request"]
    assert seen[1]["body"] == {"rid": "f-1"}


def test_an_error_event_mid_stream_is_a_host_error():
    first = {"choices": [{"text": "a", "token_ids": [1], "finish_reason": None}]}
    failed = {"error": {"message": "the engine failed", "type": "InternalServerError", "code": 500}}
    body = _sse_head() + b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in (first, failed))

    async def go():
        async with scripted(body) as (url, _):
            with pytest.raises(HostError, match="the engine failed") as info:
                await _stream(url)
            return info.value

    assert run(go()).status == 500


def test_aborting_an_unknown_id_leaves_no_mark():
    async def go():
        async with scripted(_response(200, json.dumps(OK).encode())) as (url, _seen):
            async with HTTPClient(url, OpenAIShim(), backoff_s=0.01) as c:
                for i in range(1000):
                    await c.abort(f"ghost-{i}")  # never started here: nothing to remember
                await c.abort(REQ.request_id)
                marks = len(c._aborted)
                out = await c.generate(REQ)  # the same id, started afterwards, is not "aborted"
            return marks, out

    marks, out = run(go())
    assert marks == 0 and out.finish_reason == "stop" and out.text == "ok"
