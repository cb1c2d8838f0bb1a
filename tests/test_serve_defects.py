"""Regressions for the defects a hostile client found (issue 30), one test each.

Defect 9 (standard OpenAI chat fields were 400s) is
``test_serve_chat.py::test_standard_openai_chat_fields_are_accepted``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from _live_server import TIMEOUT_S, Held, live_server, tiny_engine, wait_until  # noqa: E402
from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint  # noqa: E402
from reasonserve.serve import routes  # noqa: E402
from reasonserve.serve.config import ServeConfig  # noqa: E402

CFG = ServeConfig(model_name="tiny", max_tokens_limit=2000, max_request_bytes=2_000_000)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    engine = tiny_engine(tmp_path_factory.mktemp("defects"), EngineConfig(block_size=4, num_blocks=1024))
    with live_server(engine, CFG) as server:
        yield server


def _sse(lines) -> list:
    return [x[6:] if x == "data: [DONE]" else json.loads(x[6:]) for x in lines if x.startswith("data: ")]


def test_1_a_reused_request_id_does_not_touch_the_other_clients_stream(live):
    body = {"prompt": "hello", "max_tokens": 400, "stream": True, "request_id": "r1", "ignore_eos": True}
    with httpx.stream("POST", live.url + "/v1/completions", json=body, timeout=10) as stream:
        lines = stream.iter_lines()
        first = next(lines)
        second = httpx.post(live.url + "/v1/completions", timeout=10,
                            json={"prompt": "x", "max_tokens": 2, "request_id": "r1"})  # fmt: skip
        events = _sse([first, *lines])  # read to the end (the old server never ended it)
    assert second.status_code == 200 and second.json()["id"] == "cmpl-r1"
    assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "length"
    assert sum(len(e["choices"][0]["text"].encode()) > 0 for e in events[:-1]) > 0


@pytest.mark.parametrize(
    ("path", "raw", "status"),
    [
        ("/v1/completions", b'{"model":"\\ud800","prompt":"hi"}', 404),
        ("/v1/chat/completions", b'{"model":"\\ud800","messages":[{"role":"user","content":"x"}]}', 404),
        ("/v1/chat/completions", b'{"messages":[{"role":"user","content":"\\ud800"}]}', 400),
        ("/tokenize", b'{"prompt":"a\\ud800"}', 400),
        ("/tokenize", b'{"model":"\\udfff","prompt":"a"}', 404),
        ("/v1/completions", b'{"prompt":"hi","vllm_xargs":{"\\ud800":1}}', 400),
    ],
)
def test_2_lone_surrogates_get_a_json_error_not_a_500(live, path, raw, status):
    r = httpx.post(
        live.url + path, content=raw, headers={"content-type": "application/json"}, timeout=TIMEOUT_S
    )
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == status  # valid JSON: the surrogate is escaped


def test_3_request_bodies_are_parsed_one_at_a_time(live, monkeypatch):
    """The stall came from a pool of parsing threads taking the GIL from the event loop in
    turns; now one planning thread parses, so at most one parse runs at any time."""
    held = Held(routes.parse_body)
    monkeypatch.setattr(routes, "parse_body", held)
    body = json.dumps({"prompt": [300] * 50_000, "max_tokens": 4})  # 300: outside the vocabulary
    replies: list = []

    def bad():
        replies.append(httpx.post(live.url + "/v1/completions", content=body, timeout=TIMEOUT_S))

    workers = [threading.Thread(target=bad) for _ in range(6)]
    for w in workers:
        w.start()
    assert wait_until(lambda: held.active == 1)
    assert not wait_until(lambda: held.peak > 1, timeout_s=1.0)  # a pool would have started more
    assert httpx.get(live.url + "/health", timeout=TIMEOUT_S).status_code == 200
    held.release()
    for w in workers:
        w.join(TIMEOUT_S)
    assert [r.status_code for r in replies] == [400] * 6 and held.peak == 1


def test_4_health_is_outside_the_request_cap(tmp_path):
    cfg = ServeConfig(model_name="tiny", max_connections=2, body_timeout_s=30, header_timeout_s=1)
    with live_server(tiny_engine(tmp_path), cfg) as live:
        slow = [socket.create_connection(("127.0.0.1", live.port)) for _ in range(2)]
        try:
            for s in slow:  # headers sent, the body trickles: each holds a request slot
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                          b"content-length: 100\r\n\r\n{")  # fmt: skip
            assert wait_until(lambda: _over_cap(live.url))
            assert httpx.get(live.url + "/health", timeout=TIMEOUT_S).status_code == 200
            assert httpx.get(live.url + "/metrics", timeout=TIMEOUT_S).status_code == 200
        finally:
            for s in slow:
                s.close()
        idle = socket.create_connection(("127.0.0.1", live.port))
        idle.settimeout(TIMEOUT_S)
        assert idle.recv(1) == b""  # a connection that sends nothing is closed (header timeout)
        idle.close()


def _over_cap(url: str) -> bool:
    r = httpx.post(url + "/v1/completions", json={"prompt": [1], "max_tokens": 1}, timeout=TIMEOUT_S)
    return r.status_code == 503 and r.json()["error"]["code"] == 503


def test_5_n_beyond_the_queue_cap_is_a_400_not_a_429(tmp_path):
    with live_server(tiny_engine(tmp_path), ServeConfig(model_name="tiny", max_queued_requests=2)) as live:
        r = httpx.post(live.url + "/v1/completions", json={"prompt": [1, 2], "max_tokens": 2, "n": 3},
                       timeout=TIMEOUT_S)  # fmt: skip
        assert r.status_code == 400 and r.json()["error"]["param"] == "n"
        ok = httpx.post(live.url + "/v1/completions", json={"prompt": [1, 2], "max_tokens": 2, "n": 2},
                        timeout=TIMEOUT_S)  # fmt: skip
        assert ok.status_code == 200


def test_6_cached_tokens_never_exceed_the_prompt(live):
    body = {"prompt": list(range(3, 83)), "max_tokens": 2, "n": 4}
    for _ in range(2):  # the second time the whole prompt is in the prefix cache
        usage = httpx.post(live.url + "/v1/completions", json=body, timeout=TIMEOUT_S).json()["usage"]
        assert usage["prompt_tokens"] == 80
        assert 0 <= usage["prompt_tokens_details"]["cached_tokens"] <= 80
    assert usage["prompt_tokens_details"]["cached_tokens"] > 0


def test_7_deterministic_with_a_stop_string_counts_the_tokens_it_returns(tmp_path):
    path = make_tiny_checkpoint(tmp_path / "m")
    config = EngineConfig(block_size=4, num_blocks=256, dvr_window=8)
    ref = Engine.from_pretrained(path, config).generate(
        [[1, 2, 3]], SamplingParams(max_tokens=40, seed=4, deterministic=True)
    )[0]
    tok = Engine.from_pretrained(path, config).tokenizer
    # a stop string completed mid-window: the verified window brings tokens after it too
    cut = next(i for i, t in enumerate(ref.token_ids) if i % 8 in (2, 3, 4, 5) and 33 <= t < 127
               and chr(t) not in tok.decode(ref.token_ids[:i]))  # fmt: skip
    stop = chr(ref.token_ids[cut])
    with live_server(Engine.from_pretrained(path, config), CFG) as live:
        for stream in (False, True):
            body = {"prompt": [1, 2, 3], "max_tokens": 40, "seed": 4, "deterministic": True, "stop": stop,
                    "return_token_ids": True, "stream": stream, "stream_options": {"include_usage": True}}  # fmt: skip
            if not stream:
                body.pop("stream_options")
                out = httpx.post(live.url + "/v1/completions", json=body, timeout=TIMEOUT_S).json()
                ids, usage, text = out["choices"][0]["token_ids"], out["usage"], out["choices"][0]["text"]
            else:
                with httpx.stream("POST", live.url + "/v1/completions", json=body, timeout=TIMEOUT_S) as r:
                    events = _sse(r.iter_lines())[:-1]
                ids = [t for e in events if e["choices"] for t in e["choices"][0]["token_ids"]]
                text = "".join(e["choices"][0]["text"] for e in events if e["choices"])
                usage = events[-1]["usage"]
            assert ids == ref.token_ids[: cut + 1] and usage["completion_tokens"] == cut + 1
            assert text == tok.decode(ref.token_ids[: cut + 1]).split(stop)[0]


def test_8_the_drain_deadline_ends_streams_with_an_error_event(tmp_path):
    model = make_tiny_checkpoint(tmp_path / "m")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["serve", "--model", str(model), "--port", str(port), "--num-blocks", "2048", "--block-size", "4",
            "--drain-timeout-s", "1", "--max-tokens-limit", "4000", "--mode", "batch_invariant"]  # fmt: skip
    script = f"import sys\nfrom reasonserve.cli import main\nsys.exit(main({argv!r}))\n"
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: _up(url), timeout_s=60), "server did not come up"
        body = {"prompt": [1, 2], "max_tokens": 2040, "stream": True, "ignore_eos": True}  # runs for seconds
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=TIMEOUT_S) as r:
            lines = r.iter_lines()
            first = next(lines)
            proc.send_signal(signal.SIGTERM)
            events = _sse([first, *lines])
        assert proc.wait(timeout=TIMEOUT_S) == 0
        assert events[-1] == "[DONE]"
        assert events[-2]["error"]["code"] == 503 and "shutting down" in events[-2]["error"]["message"]
        out, err = proc.communicate(timeout=TIMEOUT_S)
        assert "Traceback" not in err and "Cancel" not in err
        assert "model 'm'" in out  # the served model name is printed at start
    finally:
        proc.kill()


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
