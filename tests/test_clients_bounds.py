"""A hostile host cannot make the HTTP client read without bound or spin: SSE lines are
scanned once per chunk (also across a ``\\r\\n`` cut between chunks), keep-alive-only
streams time out, reply bodies (success or error) are read only up to their cap and
must be complete within the timeout of their headers (a trickle is cut off);
settings that would disable those bounds (infinite/NaN timeouts, endless retries) are refused."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from reasonserve.clients import GenerateRequest, HostError, MalformedResponseError, RequestTimeoutError
from reasonserve.clients import http as http_module
from reasonserve.clients._sse import sse_data
from reasonserve.clients.http import HTTPClient
from reasonserve.core.errors import InvalidArgumentError


async def _collect(parts, **kw) -> list[str]:
    async def gen():
        for p in parts:
            await asyncio.sleep(0)
            yield p

    return [d async for d in sse_data(gen(), **kw)]


def test_crlf_cut_between_chunks_does_not_end_the_event():
    raw = b"data: line1\r\ndata: line2\r\n\r\ndata: [DONE]\r\n\r\n"
    for cut in range(1, len(raw)):
        assert asyncio.run(_collect([raw[:cut], raw[cut:]])) == ["line1\nline2", "[DONE]"], cut
    assert asyncio.run(_collect([b"data: x\r", b"\n", b"\n"])) == ["x"]  # the second \n ends the event


# 3 MB in 30,000 chunks: a linear parse takes about 0.1 s; rescanning the whole buffer
# per chunk compares ~45 G bytes (minutes). The budget is 50x the linear cost.
LINEAR_PARSE_BUDGET_S = 5.0


def test_a_line_trickled_in_small_chunks_costs_linear_time():
    parts = [b"data: "] + [b"a" * 100] * 30_000 + [b"\n\n"]  # 3 MB in 100-byte chunks
    start = time.perf_counter()
    (event,) = asyncio.run(_collect(parts))
    assert len(event) == 3_000_000
    took = time.perf_counter() - start
    assert took < LINEAR_PARSE_BUDGET_S, f"{took:.1f} s: the parser rescans its buffer"


def test_keep_alives_without_events_time_out():
    async def comments():
        while True:
            await asyncio.sleep(0.005)
            yield b": keep-alive\n"

    async def go():
        return [d async for d in sse_data(comments(), idle_s=0.1)]

    with pytest.raises(RequestTimeoutError, match="no server-sent event"):
        asyncio.run(asyncio.wait_for(go(), 5.0))


class _Endless(httpx.AsyncByteStream):
    def __init__(self) -> None:
        self.sent = 0

    async def __aiter__(self):
        while self.sent < 64 * 2**20:  # would be read whole without a cap
            self.sent += 2**16
            await asyncio.sleep(0)
            yield b"x" * 2**16


def _client(status: int, body: _Endless) -> HTTPClient:
    def handler(request):
        return httpx.Response(status, stream=body)

    return HTTPClient("http://h", transport=httpx.MockTransport(handler), max_retries=0)


def test_a_huge_reply_is_rejected_after_the_cap_not_read_whole(monkeypatch):
    monkeypatch.setattr(http_module, "MAX_BODY_BYTES", 2**20)
    body = _Endless()

    async def go():
        async with _client(200, body) as c:
            await c.generate(GenerateRequest("hi"))

    with pytest.raises(MalformedResponseError, match="larger than"):
        asyncio.run(asyncio.wait_for(go(), 10.0))
    assert body.sent <= 2**20 + 2**16


@pytest.mark.parametrize("streamed", [False, True])
def test_a_huge_error_page_is_read_only_in_part(streamed):
    body = _Endless()

    async def go():
        async with _client(500, body) as c:
            if streamed:
                return [ch async for ch in c.stream(GenerateRequest("hi"))]
            return await c.generate(GenerateRequest("hi"))

    with pytest.raises(HostError, match="answered 500"):
        asyncio.run(asyncio.wait_for(go(), 10.0))
    assert body.sent <= 2 * 2**16 + http_module._ERROR_BODY_BYTES


class _Trickle(httpx.AsyncByteStream):
    """A small reply body, one byte every ``gap`` seconds: each read is well inside the
    per-read timeout, so only a deadline on the whole body ends it."""

    def __init__(self, gap: float) -> None:
        self.gap, self.sent = gap, 0

    async def __aiter__(self):
        while self.sent < 10_000:
            await asyncio.sleep(self.gap)
            self.sent += 1
            yield b" "


def test_a_trickled_reply_body_is_cut_off_at_the_timeout():
    body = _Trickle(0.02)

    def handler(request):
        return httpx.Response(200, stream=body)

    async def go():
        async with HTTPClient("http://h", transport=httpx.MockTransport(handler), max_retries=0,
                              timeout_s=0.3) as c:  # fmt: skip
            await c.generate(GenerateRequest("hi"))

    with pytest.raises(RequestTimeoutError, match="no reply within the timeout"):
        asyncio.run(asyncio.wait_for(go(), 30.0))  # without the deadline: 200 s of trickle
    assert body.sent < 1_000  # cut off long before the body's 10,000 bytes (20 ms each)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"backoff_s": float("nan")},  # asyncio.sleep(nan) between retries
        {"backoff_s": "0.1"},
        {"timeout_s": float("inf")},  # no timeout: a silent host hangs the call
        {"timeout_s": True},
        {"connect_timeout_s": 0},
        {"max_retries": True},
        {"max_retries": 10**9},
    ],
)
def test_bad_client_settings_are_typed_errors(kwargs):
    with pytest.raises(InvalidArgumentError):
        HTTPClient("http://h", **kwargs)
