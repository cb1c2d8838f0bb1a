"""An adversary's clients against a live ``reasonserve serve``: wrong media types, bad token
ids, streams left mid-way, streams never read, floods past the queue. After each, the
server serves a normal request correctly and the engine holds no request and no KV block.
One server for the module (issue 30's hostile-client battery, second round)."""

from __future__ import annotations

import json
import socket
import threading

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from _live_server import TIMEOUT_S, assert_error, live_server, tiny_engine, wait_until  # noqa: E402
from reasonserve.engine import EngineConfig  # noqa: E402
from reasonserve.serve.config import ServeConfig  # noqa: E402

QUEUE = 6
SEND_TIMEOUT_S = 1.0
CFG = ServeConfig(model_name="tiny", max_tokens_limit=2000, max_request_bytes=20_000, max_queued_requests=QUEUE,
                  send_timeout_s=SEND_TIMEOUT_S)  # fmt: skip
# A condition that has not come true within this bound never will (the server's own
# timeouts here are 1 s); it bounds a failure, it gates nothing on speed.
BUDGET_S = 20.0
LONG = {"prompt": [1], "max_tokens": 1900, "ignore_eos": True, "temperature": 1.0}


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    engine = tiny_engine(tmp_path_factory.mktemp("adversary"), EngineConfig(block_size=4, num_blocks=1100))
    with live_server(engine, CFG) as server:
        yield server


def post(live, body, path="/v1/completions", headers=None) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json"} if headers is None else headers
    return httpx.post(live.url + path, content=raw, headers=headers, timeout=TIMEOUT_S)


def assert_clean(live) -> None:
    """Nothing left behind, and a normal request is served in full."""
    assert wait_until(lambda: live.runner.num_live == 0, BUDGET_S), live.runner.num_live
    assert wait_until(lambda: live.runner.snapshot.kv_blocks_used == 0, BUDGET_S), live.runner.snapshot
    r = post(live, {"prompt": [1, 2], "max_tokens": 3, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3, r.text


def _metric(live, name: str) -> float:
    for line in httpx.get(live.url + "/metrics", timeout=TIMEOUT_S).text.splitlines():
        if line.startswith("reasonserve:" + name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"metric {name} missing")


ABORTS = 'request_success_total{finished_reason="abort"}'
CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "hi"}]
HUGE = [  # (body, path, param): each a 400 naming the parameter, before any engine work
    ({"prompt": "hi", "n": 65}, None, "n"),  # prompts x n over max_choices_per_request (64)
    ({"prompt": "hi", "n": 10**6}, None, "n"),
    ({"prompt": "hi", "best_of": 10**5}, None, "best_of"),
    ({"prompt": "hi", "max_tokens": 2**40}, None, "max_tokens"),
    ({"messages": USER, "logprobs": True, "top_logprobs": 10**9}, CHAT, "top_logprobs"),
    ({"prompt": "hi", "logprobs": 10**9}, None, "logprobs"),
    ({"prompt": "hi", "logit_bias": {str(i): 1.0 for i in range(1500)}}, None, "logit_bias"),
    ({"prompt": "hi", "stop": ["a"] * 1000}, None, "stop"),
    ({"prompt": "hi", "stop": ["a" * 10_000]}, None, "stop[0]"),
    ({"prompt": "hi", "stop_token_ids": list(range(1000))}, None, "stop_token_ids"),
    ({"prompt": "hi", "temperature": -0.5}, None, "temperature"),
    ({"prompt": "hi", "top_p": "0.5"}, None, "top_p"),
    ({"prompt": "hi", "seed": 2**64}, None, "seed"),
    ({"prompt": "a " * 5000}, None, "prompt"),  # 10,000 tokens: past the 2048-token context
    ({"messages": USER, "tools": [{"type": "function", "function": {"name": "f"}}]}, CHAT, "tools"),
    ({"messages": USER, "tool_choice": "required"}, CHAT, "tool_choice"),
    ({"messages": USER, "functions": [{"name": "f"}]}, CHAT, "functions"),
    ({"messages": USER, "max_tokens": 3, "max_completion_tokens": 4}, CHAT, "max_completion_tokens"),
    ({"tokens": [0, 1, -1]}, "/detokenize", "tokens[2]"),
    ({"tokens": ["a"]}, "/detokenize", "tokens[0]"),
    ({"prompt": "x", "messages": USER}, "/tokenize", "prompt"),
]


@pytest.mark.parametrize(("body", "path", "param"), HUGE, ids=[f"huge{i}" for i in range(len(HUGE))])
def test_out_of_range_and_unsupported_parameters_are_400s_naming_them(live, body, path, param):
    assert_error(post(live, body, path or "/v1/completions"), 400, param)
    assert live.runner.num_live == 0


def test_tool_messages_and_accepted_openai_fields_are_served(live):
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    messages = [*USER, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "content": "3", "tool_call_id": "c1"}]  # fmt: skip
    body = {"messages": messages, "max_tokens": 2, "tool_choice": "none", "store": False,
            "metadata": {"k": "v"}, "service_tier": "auto", "parallel_tool_calls": False, "user": "u"}  # fmt: skip
    r = post(live, body, CHAT)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["tool_calls"] == []
    bad = {**body, "messages": [*USER, {"role": "assistant", "tool_calls": [{**call, "function": {
        "name": "f", "arguments": "[" * 5000}}]}]}  # fmt: skip
    assert_error(post(live, bad, CHAT), 400, "messages[1].tool_calls[0].function.arguments")
    assert_clean(live)
ROUTES = [
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
    ("/tokenize", {"prompt": "hi"}),
    ("/detokenize", {"tokens": [104, 105]}),
]


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=[p for p, _ in ROUTES])
@pytest.mark.parametrize("media", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_a_body_that_is_not_json_by_its_content_type_is_415(live, path, body, media):
    assert_error(post(live, body, path, headers={"content-type": media}), 415)
    assert (
        post(live, body, path, headers={"content-type": "application/json; charset=utf-8"}).status_code == 200
    )
    assert (
        post(live, body, path, headers={}).status_code == 200
    )  # no type at all: read as JSON (curl -d ... -H none)
    assert_clean(live)


def test_bad_token_ids_name_the_prompt_and_say_what_is_allowed(live):
    err = assert_error(post(live, {"prompt": [-1]}), 400, "prompt[0]")
    assert "greater than or equal to 0" in err["message"]  # not "should be a valid string"
    err = assert_error(post(live, {"prompt": [5, 256]}), 400, "prompt")
    assert "256" in err["message"] and "[0, 256)" in err["message"]
    assert_error(post(live, {"prompt": [[1], [10**6]]}), 400, "prompt")
    assert_error(post(live, {"tokens": [256]}, "/detokenize"), 400, "tokens")
    assert_clean(live)


def test_a_client_that_leaves_mid_stream_has_its_request_aborted_and_its_blocks_freed(live):
    aborts = _metric(live, ABORTS)
    assert live.runner.snapshot.kv_blocks_used == 0
    with httpx.stream(
        "POST", live.url + "/v1/completions", json={**LONG, "stream": True}, timeout=TIMEOUT_S
    ) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: {")
        assert live.runner.num_live == 1 and live.runner.snapshot.kv_blocks_used > 0
    assert wait_until(lambda: _metric(live, ABORTS) == aborts + 1, BUDGET_S)
    assert_clean(live)


def _connected(live, sock: socket.socket) -> bool:
    """Whether the server still holds the connection of ``sock``."""
    return sock.getsockname() in {p.client for p in list(live.server.server_state.connections)}


def test_a_client_that_never_reads_its_stream_is_cut_off_and_blocks_no_one(live):
    """The reply (4 chat choices with top-20 logprobs: 1.6 kB per token each, about 12 MB
    in all) outgrows the socket buffers (Linux's grow to 4 MB on the sending side) of a
    client that reads nothing, within its first 700 or so tokens; after
    ``send_timeout_s`` stalled the server drops the connection, and the engine requests
    with it. Meanwhile other requests are served."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", live.port))
    body = {"messages": USER, "max_tokens": 1900, "ignore_eos": True, "stream": True, "logprobs": True,
            "top_logprobs": 20, "n": 4}  # fmt: skip
    body = json.dumps(body).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"content-length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
    try:
        assert wait_until(lambda: live.runner.num_live == 4, BUDGET_S)
        r = post(live, {"prompt": [1, 2], "max_tokens": 3, "temperature": 0, "ignore_eos": True})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3  # not blocked by it
        assert wait_until(lambda: not _connected(live, sock), BUDGET_S), (
            "the stalled connection is still held"
        )
        sock.settimeout(TIMEOUT_S)
        received = b""
        while chunk := _recv(sock):
            received += chunk
        assert received.startswith(b"HTTP/1.1 200"), received[:100]
        assert b"data: [DONE]" not in received, len(received)  # cut off, not finished
    finally:
        sock.close()
    assert_clean(live)


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except ConnectionResetError:
        return b""


def test_a_flood_past_the_queue_gets_429_and_every_accepted_request_is_served_in_full(live):
    results: list[httpx.Response] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        r = post(live, {"prompt": [1, 2, i % 200 + 3], "max_tokens": 40, "ignore_eos": True, "seed": i})
        with lock:
            results.append(r)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4 * QUEUE)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S)
    codes = sorted(r.status_code for r in results)
    assert len(results) == 4 * QUEUE and set(codes) <= {200, 429}, codes
    assert codes.count(200) >= 1 and codes.count(429) >= 1, codes  # more than the queue holds came at once
    for r in results:
        if r.status_code == 429:
            assert r.headers["retry-after"] == "1" and r.json()["error"]["type"] == "RateLimitError"
        else:
            assert r.json()["usage"]["completion_tokens"] == 40  # accepted means served in full
    assert_clean(live)


def test_stream_options_include_usage_ends_with_the_usage_of_what_was_streamed(live):
    body = {"prompt": [1, 2, 3], "max_tokens": 5, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}, "return_token_ids": True}  # fmt: skip
    with httpx.stream("POST", live.url + "/v1/completions", json=body, timeout=TIMEOUT_S) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    ids = [t for c in chunks for ch in c["choices"] for t in ch.get("token_ids") or []]
    assert all(c["usage"] is None for c in chunks[:-1]) and chunks[-1]["choices"] == []
    assert (
        chunks[-1]["usage"]["completion_tokens"] == len(ids) == 5
        and chunks[-1]["usage"]["prompt_tokens"] == 3
    )
    assert_clean(live)
