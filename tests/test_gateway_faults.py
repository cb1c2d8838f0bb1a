"""The gateway in front of a misbehaving upstream: clean OpenAI errors, no hang, nothing leaked.

The upstream is a real HTTP server on a loopback port (asyncio, raw bytes, so it can break
the protocol anywhere); the prompt names the fault it plays. After every request the
gateway must hold no program, no upstream request and no upstream connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading

import pytest

httpx = pytest.importorskip("httpx", reason="gateway tests need httpx (client extra)")
pytest.importorskip("fastapi", reason="gateway tests need fastapi (serve extra)")

from _gateway import live_gateway  # noqa: E402
from _live_server import TIMEOUT_S, wait_until  # noqa: E402
from reasonserve.gateway import GatewayConfig  # noqa: E402

_OK_EVENT = b'data: {"choices": [{"index": 0, "text": "thinking ", "finish_reason": null}]}\n\n'


def _response(status: int, body: bytes, content_type: bytes = b"application/json") -> bytes:
    head = b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (
        status,
        content_type,
        len(body),
    )
    return head + body


_STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


class FaultyUpstream:
    """Plays the fault named in the request's prompt; counts its open connections."""

    def __init__(self) -> None:
        self.open = 0
        self.requests = 0
        self.port = 0
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))  # fmt: skip
            body = json.loads(await reader.readexactly(length))
            self.requests += 1
            await self._play(str(body.get("prompt", "")), reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open -= 1
            writer.close()

    async def _play(self, prompt: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        fault = prompt.split()[-1]
        if fault == "status500":
            writer.write(_response(500, b'{"error": {"message": "engine died", "code": 500}}'))
        elif fault == "status400":
            writer.write(_response(400, b'{"error": {"message": "max_tokens is too large", "code": 400}}'))
        elif fault == "badjson":
            writer.write(_response(200, b"<html>proxy error</html>"))
        elif fault == "hang":
            await reader.read()  # until the gateway closes the connection
        elif fault == "garbage":
            writer.write(_STREAM_HEAD + b"this is not an event stream\n\n")
        elif fault == "cut":
            writer.write(_STREAM_HEAD + _OK_EVENT)
        elif fault == "errorevent":
            writer.write(_STREAM_HEAD + _OK_EVENT + b'data: {"error": {"message": "OOM", "code": 500}}\n\n')
        elif fault == "badevent":
            writer.write(_STREAM_HEAD + _OK_EVENT + b"data: {not json\n\n")
        elif fault == "longline":
            writer.write(_STREAM_HEAD + b"data: " + b"x" * (9 * 2**20))
        elif fault == "trickle":
            writer.write(_STREAM_HEAD)
            for _ in range(600):
                writer.write(b": keep-alive\n")
                await writer.drain()
                await asyncio.sleep(0.05)
        elif fault == "slow":  # well-formed, steady, endless: only a deadline ends it
            writer.write(_STREAM_HEAD)
            for _ in range(600):
                writer.write(_OK_EVENT)
                await writer.drain()
                await asyncio.sleep(0.05)
        await writer.drain()

    def _run(self) -> None:
        async def main() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            async with server:
                await self._stop.wait()

        asyncio.run(main())

    @contextlib.contextmanager
    def running(self):
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        assert self._ready.wait(TIMEOUT_S)
        try:
            yield f"http://127.0.0.1:{self.port}"
        finally:
            self._loop.call_soon_threadsafe(self._stop.set)
            thread.join(TIMEOUT_S)


@pytest.fixture(scope="module")
def faulty():
    upstream = FaultyUpstream()
    with upstream.running() as url:
        cfg = GatewayConfig(url, upstream_kind="openai", served_model_name="gw", default_early_exit="off",
                            upstream_timeout_s=0.5, program_timeout_s=20.0)  # fmt: skip
        with live_gateway(cfg) as (gw_url, gateway):
            yield gw_url, gateway, upstream


def settled(gateway, upstream) -> bool:
    """Nothing left behind: no program, no upstream request, no upstream connection."""
    http = gateway.http
    idle = not (http._inflight or http._streams or http._background)
    return gateway.scheduler.num_live == 0 and idle and upstream.open == 0


def assert_openai_error(r, status: int) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == status
    return err


@pytest.mark.parametrize(
    ("fault", "status"),
    [
        ("status500", 502),
        ("status400", 400),
        ("badjson", 502),
        ("hang", 504),
        ("garbage", 502),
        ("cut", 502),
        ("errorevent", 502),
        ("badevent", 502),
        ("longline", 502),
        ("trickle", 504),
    ],
)
@pytest.mark.parametrize("program", ["off", "mid"])  # one streamed request; CoT's unstreamed chunks
def test_an_upstream_fault_is_a_clean_error(faulty, fault, status, program):
    url, gateway, upstream = faulty
    body = {"prompt": f"Question? {fault}", "max_tokens": 64, "early_exit": program}
    r = httpx.post(url + "/v1/completions", json=body, timeout=TIMEOUT_S)
    err = assert_openai_error(r, status)
    if fault == "status400":
        assert "max_tokens is too large" in err["message"]
    assert wait_until(lambda: settled(gateway, upstream))


@pytest.mark.parametrize(("fault", "status"), [("status500", 502), ("hang", 504), ("garbage", 502)])
def test_a_stream_that_fails_before_any_text_gets_an_error_status(faulty, fault, status):
    url, gateway, upstream = faulty
    body = {"prompt": f"Q {fault}", "max_tokens": 64, "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=TIMEOUT_S) as r:
        r.read()
    assert_openai_error(r, status)
    assert wait_until(lambda: settled(gateway, upstream))


@pytest.mark.parametrize("fault", ["cut", "errorevent", "badevent"])
def test_a_stream_that_fails_midway_ends_with_an_error_event(faulty, fault):
    url, gateway, upstream = faulty
    body = {"prompt": f"Q {fault}", "max_tokens": 64, "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=TIMEOUT_S) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line]
    events = [json.loads(line[6:]) for line in lines[:-1]]
    assert events[0]["choices"][0]["reasoning"] == "thinking "  # the text that did arrive was sent
    assert events[-1]["error"]["code"] == 502 and lines[-1] == "data: [DONE]"
    assert wait_until(lambda: settled(gateway, upstream))


def test_an_unreachable_upstream_is_a_502():
    with contextlib.closing(__import__("socket").socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        cfg = GatewayConfig(f"http://127.0.0.1:{port}", upstream_kind="openai", default_early_exit="off")
        with live_gateway(cfg) as (url, gateway):
            r = httpx.post(url + "/v1/completions", json={"prompt": "Q", "max_tokens": 8}, timeout=TIMEOUT_S)
            assert "TransportError" in assert_openai_error(r, 502)["message"]
            assert gateway.scheduler.num_live == 0


def test_a_program_past_its_deadline_is_a_504(faulty):
    _, _, upstream = faulty
    cfg = GatewayConfig(f"http://127.0.0.1:{upstream.port}", upstream_kind="openai", default_early_exit="off",
                        program_timeout_s=0.5)  # fmt: skip
    with live_gateway(cfg) as (url, gateway):
        r = httpx.post(
            url + "/v1/completions", json={"prompt": "Q slow", "max_tokens": 64}, timeout=TIMEOUT_S
        )
        assert "did not end within 0.5 s" in assert_openai_error(r, 504)["message"]
        assert wait_until(lambda: settled(gateway, upstream))


def test_a_client_leaving_a_stream_before_its_first_text_cancels_the_program_at_once(faulty):
    """The upstream hangs before any text; the client leaves. Its program is cancelled and
    the upstream request aborted then, not when the 60 s upstream timeout would end it."""
    _, _, upstream = faulty
    cfg = GatewayConfig(f"http://127.0.0.1:{upstream.port}", upstream_kind="openai", default_early_exit="off",
                        upstream_timeout_s=60.0)  # fmt: skip
    with live_gateway(cfg) as (url, gateway):
        before = upstream.requests
        body = json.dumps({"prompt": "Q hang", "max_tokens": 64, "stream": True}).encode()
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
            assert wait_until(lambda: upstream.requests == before + 1 and gateway.scheduler.num_live == 1)
        # a bound on failure well inside the 60 s upstream timeout; leaving takes milliseconds
        assert wait_until(lambda: settled(gateway, upstream), timeout_s=15.0)


def test_request_size_limits_apply(faulty):
    url, _, upstream = faulty
    before = upstream.requests
    r = httpx.post(url + "/v1/completions", json={"prompt": "x" * 2_000_000}, timeout=TIMEOUT_S)
    assert_openai_error(r, 413)
    assert upstream.requests == before  # refused before anything went upstream
