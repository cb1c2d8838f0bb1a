"""Hostile inputs against a live server: each gets its status and the OpenAI error shape,
and the server answers a normal request right after (issue 13's reproduced defects)."""

from __future__ import annotations

import json
import os
import select
import socket
import threading
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from _live_server import TIMEOUT_S, assert_error, live_server, tiny_engine, wait_until  # noqa: E402
from reasonserve.engine import EngineConfig  # noqa: E402
from reasonserve.serve.config import ServeConfig  # noqa: E402

CFG = ServeConfig(model_name="tiny", max_tokens_limit=1000, max_request_bytes=20_000, header_timeout_s=1.0,
                  body_timeout_s=1.0, max_queued_requests=64)  # fmt: skip


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    engine = tiny_engine(tmp_path_factory.mktemp("hostile"), EngineConfig(block_size=4, num_blocks=1100))
    with live_server(engine, CFG) as server:
        yield server


def post(live, body, path: str = "/v1/completions", timeout: float = TIMEOUT_S) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        live.url + path, content=raw, headers={"content-type": "application/json"}, timeout=timeout
    )


def assert_still_serves(live) -> None:
    r = post(live, {"prompt": [1, 2], "max_tokens": 2, "temperature": 0})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


CHAT = "/v1/chat/completions"
BAD = [  # (raw body, path, param)
    (b'{"prompt":"hi","max_tokens":4,"top_k":9223372036854775808}', None, "top_k"),
    (b'{"prompt":"hi","top_k":-2}', None, "top_k"),
    (b'{"prompt":"hi","seed":18446744073709551616}', None, "seed"),
    (b'{"prompt":"hi","seed":-1}', None, "seed"),
    (b'{"prompt":"hi","temperature":NaN}', None, None),
    (b'{"prompt":"hi","temperature":1e999}', None, "temperature"),
    (b'{"prompt":"\\ud800"}', None, "prompt"),
    (b'{"messages":[{"role":"user","content":"a\\udfffb"}]}', CHAT, "messages"),  # tokenizer check
    (b"[" * 100_00 + b"]" * 100_00, None, None),
    (b'{"prompt":"hi","max_tokens":' + b"9" * 5000 + b"}", None, None),
    (b'{"prompt":[true,false]}', None, "prompt[0]"),
    (b'{"prompt":"hi","stream":"yes"}', None, "stream"),
    (b'{"prompt":"hi","seed":531.0}', None, "seed"),
    (b'{"prompt":"hi","max_tokens":"4"}', None, "max_tokens"),
    (b'{"messages":[{"role":"bogus","content":"x"}]}', CHAT, "messages[0].role"),
    (b'{"messages":[{"role":"user","content":null}]}', CHAT, "messages[0].content"),
    (
        b'{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}',
        CHAT,
        "messages[0].content[0].type",
    ),
    (b'{"messages":[]}', CHAT, "messages"),
    (b'{"prompt":"hi","max_tokens":1001}', None, "max_tokens"),
    (b'{"prompt":"hi","n":0}', None, "n"),
    (b'{"prompt":"hi","frobnicate":1}', None, "frobnicate"),
    (b'{"prompt":"hi","logprobs":21}', None, "logprobs"),
    (b'{"prompt":"hi","vllm_xargs":{"k":1}}', None, "vllm_xargs.k"),
    (b'{"prompt":[1,999]}', None, "prompt"),
    (b'{"prompt":[]}', None, "prompt"),
    (b'{"prompt": "\xff\xfe"}', None, None),
    (b"[1, 2]", None, None),
    (b"", None, None),
]


@pytest.mark.parametrize(("raw", "path", "param"), BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_body_gets_400_in_the_error_shape(live, raw, path, param):
    assert_error(post(live, raw, path or "/v1/completions"), 400, param)
    assert_still_serves(live)


def test_unknown_model_is_404_and_max_tokens_past_the_context_is_400(live):
    assert_error(post(live, {"prompt": "hi", "model": "gpt-4"}), 404, "model")
    err = assert_error(post(live, {"prompt": [1] * 2040, "max_tokens": 100}), 400, "max_tokens")
    assert "maximum context length is 2048" in err["message"]
    assert_still_serves(live)


def test_unknown_route_and_method_get_the_error_shape(live):
    assert_error(httpx.get(live.url + "/v2/nothing", timeout=TIMEOUT_S), 404)
    assert_error(httpx.get(live.url + "/v1/completions", timeout=TIMEOUT_S), 405)


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_chunked_body_over_the_limit_is_cut_off_at_the_limit(live):
    rss_before = _rss_mib()  # the server runs in this process
    sock = socket.create_connection(("127.0.0.1", live.port), timeout=TIMEOUT_S)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"transfer-encoding: chunked\r\n\r\n")  # fmt: skip
    chunk = b"%x\r\n%s\r\n" % (65536, b"a" * 65536)
    sent, reply = 0, b""
    try:
        while sent < 200_000_000 and not reply:
            sock.sendall(chunk)
            sent += 65536
            if select.select([sock], [], [], 0)[0]:
                reply = sock.recv(65536)
    except (BrokenPipeError, ConnectionResetError):
        reply = reply or _recv_quietly(sock)
    finally:
        sock.close()
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert sent < 20_000_000  # refused near the 20 kB limit, not after buffering the flood
    assert _rss_mib() - rss_before < 50
    assert httpx.get(live.url + "/health", timeout=TIMEOUT_S).status_code == 200
    assert_still_serves(live)


def _recv_quietly(sock) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


# The server's header_timeout_s is 1 s (the fixture's ServeConfig); a cut-off within this
# budget is the timeout at work, with room for a loaded machine. Without the timeout the
# trickle would go on until the test's own 8 s stop.
CUT_OFF_BUDGET_S = 5


def test_slow_headers_are_cut_off(live):
    sock = socket.create_connection(("127.0.0.1", live.port), timeout=TIMEOUT_S)
    start = time.monotonic()
    closed = False
    try:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n")
        while time.monotonic() - start < 8:
            sock.sendall(b"x")  # one header byte every 0.2 s, never finishing
            if select.select([sock], [], [], 0.2)[0] and sock.recv(1024) == b"":
                closed = True
                break
    except (BrokenPipeError, ConnectionResetError):
        closed = True
    finally:
        sock.close()
    took = time.monotonic() - start
    assert closed and took < CUT_OFF_BUDGET_S, f"closed={closed} after {took:.1f} s"


def test_slow_body_gets_408(live):
    sock = socket.create_connection(("127.0.0.1", live.port), timeout=TIMEOUT_S)
    start, reply = time.monotonic(), b""
    try:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{")
        while time.monotonic() - start < 8 and not reply:
            if select.select([sock], [], [], 0.2)[0]:
                reply = sock.recv(4096)
            else:
                sock.sendall(b" ")
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        sock.close()
    took = time.monotonic() - start
    assert reply.startswith(b"HTTP/1.1 408") and took < CUT_OFF_BUDGET_S, (reply[:40], took)


def test_non_streaming_requests_are_aborted_when_the_client_leaves(live):
    def aborted() -> float:
        return _metric(live, 'request_success_total{finished_reason="abort"}')

    before_abort, before_length = aborted(), _metric(live, 'request_success_total{finished_reason="length"}')
    body = {"prompt": [3, 4, 5], "max_tokens": 1000, "temperature": 1.0}

    def leave_early():
        with pytest.raises(httpx.ReadTimeout):
            post(live, body, timeout=0.3)

    threads = [threading.Thread(target=leave_early) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S)
    assert wait_until(lambda: live.runner.num_live == 0, timeout_s=10)
    assert aborted() - before_abort == 4  # ended by abort, not run to max_tokens
    assert _metric(live, 'request_success_total{finished_reason="length"}') == before_length
    assert wait_until(lambda: live.runner.snapshot.kv_blocks_used == 0, timeout_s=5)
    assert_still_serves(live)


def test_finished_requests_are_released(live):
    from reasonserve.core.errors import UnknownRequestError

    for i in range(5):
        r = post(live, {"prompt": [1, 2], "max_tokens": 2, "request_id": f"released-{i}"})
        assert r.status_code == 200
    assert live.runner.num_live == 0
    for i in range(5):  # the engine keeps nothing of a delivered request
        with pytest.raises(UnknownRequestError):
            live.runner.engine.verified_tokens(f"cmpl-released-{i}-0")
    assert post(live, {"prompt": [1], "max_tokens": 1, "request_id": "released-0"}).status_code == 200  # id reusable


def _metric(live, name: str) -> float:
    text = httpx.get(live.url + "/metrics", timeout=TIMEOUT_S).text
    for line in text.splitlines():
        if line.startswith("reasonserve:" + name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"metric {name} missing")


def test_a_client_leaving_mid_body_is_harmless(live):
    sock = socket.create_connection(("127.0.0.1", live.port), timeout=TIMEOUT_S)
    sock.sendall(b'POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n{"prompt": [1')
    sock.close()
    assert_still_serves(live)
    assert wait_until(lambda: live.runner.num_live == 0, timeout_s=5)
