"""The supervised engine loop: engine failures, capacity, event-loop freedom, SIGTERM."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from _live_server import TIMEOUT_S, live_server, tiny_engine, wait_until  # noqa: E402
from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint  # noqa: E402
from reasonserve.serve.config import ServeConfig  # noqa: E402


class FlakyEngine(Engine):
    """``step()`` raises while ``fail_steps`` > 0; ``abort()`` raises too when ``broken``;
    ``add_request()`` raises a TypeError (an engine bug) while ``fail_adds`` > 0; with
    ``hold`` set, every step signals ``stepping`` and then waits for ``hold`` (an engine step
    that lasts until the test releases it)."""

    fail_steps = 0
    fail_adds = 0
    broken = False
    hold: threading.Event | None = None
    stepping: threading.Event | None = None

    def add_request(self, prompt, params=None, request_id=None):
        if self.fail_adds > 0:
            self.fail_adds -= 1
            raise TypeError("injected failure inside add_request()")
        return super().add_request(prompt, params, request_id)

    def step(self):
        if self.hold is not None and self.stepping is not None:
            self.stepping.set()
            self.hold.wait(TIMEOUT_S)
        if self.fail_steps > 0:
            self.fail_steps -= 1
            raise OverflowError("injected failure inside step()")
        return super().step()

    def abort(self, request_id):
        if self.broken:
            raise RuntimeError("injected: abort cannot clean up")
        return super().abort(request_id)


def _post(url: str, body: dict, timeout: float = TIMEOUT_S) -> httpx.Response:
    return httpx.post(url + "/v1/completions", json=body, timeout=timeout)


def test_an_engine_exception_fails_that_request_and_the_loop_keeps_serving(tmp_path):
    engine = tiny_engine(tmp_path, engine_cls=FlakyEngine)
    with live_server(engine) as live:
        engine.fail_steps = 1
        r = _post(live.url, {"prompt": [1, 2], "max_tokens": 4}, timeout=10)
        assert r.status_code == 500 and "injected failure" in r.json()["error"]["message"]
        assert httpx.get(live.url + "/health", timeout=10).status_code == 200
        ok = _post(live.url, {"prompt": [1, 2], "max_tokens": 4}, timeout=10)
        assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] == "length"
        assert live.runner.alive and live.exits == []


def test_an_engine_bug_in_add_request_fails_that_request_only(tmp_path):
    engine = tiny_engine(tmp_path, engine_cls=FlakyEngine)
    with live_server(engine) as live:
        engine.fail_adds = 1
        r = _post(live.url, {"prompt": [1, 2], "max_tokens": 4}, timeout=10)
        assert r.status_code == 500 and "TypeError" in r.json()["error"]["message"]
        assert _post(live.url, {"prompt": [1, 2], "max_tokens": 4}, timeout=10).status_code == 200
        assert live.runner.alive and live.runner.num_live == 0


def test_a_stream_gets_the_engine_error_as_an_event(tmp_path):
    engine = tiny_engine(tmp_path, engine_cls=FlakyEngine)
    with live_server(engine) as live:
        engine.fail_steps = 1
        body = {"prompt": [1, 2], "max_tokens": 4, "stream": True}
        with httpx.stream("POST", live.url + "/v1/completions", json=body, timeout=10) as r:
            events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]" and "error" in json.loads(events[-2])


def test_when_the_loop_dies_health_fails_and_the_server_is_told_to_exit(tmp_path):
    engine = tiny_engine(tmp_path, engine_cls=FlakyEngine)
    with live_server(engine) as live:
        engine.fail_steps, engine.broken = 1, True
        r = _post(live.url, {"prompt": [1, 2], "max_tokens": 4}, timeout=10)
        assert r.status_code == 500  # the waiting client is answered, not left hanging
        assert wait_until(lambda: live.exits == [1], timeout_s=10)
        assert httpx.get(live.url + "/health", timeout=10).status_code == 503
        assert _post(live.url, {"prompt": [1], "max_tokens": 1}, timeout=10).status_code == 503


def test_the_event_loop_never_waits_for_an_engine_step(tmp_path):
    """An engine step that does not end until the test says so: meanwhile the server
    answers /health and takes new requests. A loop that waited for the step would hang
    here until the step's hold times out (TIMEOUT_S), and the checks would fail."""
    engine = tiny_engine(tmp_path, engine_cls=FlakyEngine)
    engine.hold, engine.stepping = threading.Event(), threading.Event()
    replies: list = []
    body = {"prompt": [1, 2], "max_tokens": 6}
    with live_server(engine) as live:
        workers = [threading.Thread(target=lambda: replies.append(_post(live.url, body))) for _ in range(3)]
        workers[0].start()
        assert engine.stepping.wait(TIMEOUT_S), "no engine step started"  # a step now holds the engine
        for w in workers[1:]:  # submissions land while the step is held
            w.start()
        for _ in range(6):
            assert httpx.get(live.url + "/health", timeout=TIMEOUT_S).status_code == 200
        assert wait_until(lambda: live.runner.num_live == 3), "the requests were not taken during the step"
        assert replies == []  # nothing finished: the step is still held
        engine.hold.set()
        for w in workers:
            w.join(TIMEOUT_S)
    assert [r.status_code for r in replies] == [200] * 3


def test_requests_that_can_never_fit_are_400_and_cache_pressure_never_spins(tmp_path):
    engine = tiny_engine(tmp_path, EngineConfig(block_size=16, num_blocks=8))  # 128 KV tokens
    with live_server(engine, ServeConfig(model_name="tiny", max_tokens_limit=1000)) as live:
        r = _post(live.url, {"prompt": [7] * 100, "max_tokens": 500})
        assert r.status_code == 400 and "KV cache" in r.json()["error"]["message"]
        results: list = []
        body = {
            "prompt": [7] * 40,
            "max_tokens": 60,
            "temperature": 0,
        }  # 100 tokens: fits alone, not 3 together

        def one():
            results.append(_post(live.url, body))

        threads = [threading.Thread(target=one) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT_S)
        assert [r.status_code for r in results] == [200] * 3
        assert all(r.json()["usage"]["completion_tokens"] == 60 for r in results)
        assert wait_until(lambda: live.runner.snapshot.kv_blocks_used == 0, timeout_s=5)


def _serve_process(tmp_path, code: str, drain_timeout_s: float = 2) -> tuple[subprocess.Popen, str]:
    model = make_tiny_checkpoint(tmp_path / "m")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["serve", "--model", str(model), "--port", str(port), "--num-blocks", "1024", "--block-size", "4",
            "--drain-timeout-s", str(drain_timeout_s)]  # fmt: skip
    script = code + f"\nfrom reasonserve.cli import main\nsys.exit(main({argv!r}))\n"
    proc = subprocess.Popen([sys.executable, "-c", "import sys\n" + script], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    assert wait_until(lambda: _health(url) is not None, timeout_s=60), "server did not come up"
    return proc, url


def _health(url: str) -> int | None:
    try:
        return httpx.get(url + "/health", timeout=2).status_code
    except httpx.HTTPError:
        return None


def _queued(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=TIMEOUT_S).text
    return float(
        next(x for x in text.splitlines() if x.startswith("reasonserve:num_requests_queued ")).split()[-1]
    )


DRAIN_TIMEOUT_S = 6
# SIGTERM to exit: the drain (at most DRAIN_TIMEOUT_S) plus process shutdown, with room for a
# loaded CI machine. A server that ignored the drain timeout would run its 2,000-token stream out.
DRAIN_BUDGET_S = DRAIN_TIMEOUT_S + 9


@pytest.mark.slow  # a server process and a 6 s drain
def test_sigterm_drains_and_exits_zero_in_bounded_time(tmp_path):
    proc, url = _serve_process(tmp_path, "", drain_timeout_s=DRAIN_TIMEOUT_S)
    try:
        short: list = []
        body = {"prompt": [1, 2], "max_tokens": 2000 - 3, "stream": True}
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=TIMEOUT_S) as r:
            assert r.status_code == 200
            lines = r.iter_lines()  # kept: a dropped iterator would close the response
            next(lines)  # a long stream is in flight
            worker = threading.Thread(
                target=lambda: short.append(_post(url, {"prompt": [3], "max_tokens": 100}))
            )
            worker.start()
            assert wait_until(lambda: _queued(url) == 2, timeout_s=10)
            start = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
        took = time.monotonic() - start
        assert took < DRAIN_BUDGET_S, f"SIGTERM to exit took {took:.1f} s, budget {DRAIN_BUDGET_S} s"
        worker.join(TIMEOUT_S)
        assert short[0].status_code == 200  # a request in flight at SIGTERM finished during the drain
        assert short[0].json()["usage"]["completion_tokens"] == 100
    finally:
        proc.kill()


@pytest.mark.slow  # a server process
def test_a_dead_engine_loop_makes_the_process_exit_nonzero(tmp_path):
    patch = ("import reasonserve.engine.engine as e\n"
             "def boom(self, *a, **k):\n    raise RuntimeError('injected')\n"
             "e.Engine.step = boom\ne.Engine.abort = boom\n")  # fmt: skip
    proc, url = _serve_process(tmp_path, patch)
    try:
        r = _post(url, {"prompt": [1, 2], "max_tokens": 4}, timeout=10)
        assert r.status_code == 500
        assert proc.wait(timeout=20) == 1
    finally:
        proc.kill()


def test_the_queue_cap_answers_429_with_retry_after(tmp_path):
    engine = tiny_engine(tmp_path, engine_cls=FlakyEngine)
    engine.hold, engine.stepping = threading.Event(), threading.Event()  # no step ends until released
    with live_server(engine, ServeConfig(model_name="tiny", max_queued_requests=2)) as live:
        body = {"prompt": [1, 2], "max_tokens": 20}
        results: list = []
        workers = [threading.Thread(target=lambda: results.append(_post(live.url, body))) for _ in range(2)]
        for w in workers:
            w.start()
        try:
            assert wait_until(lambda: live.runner.num_live == 2, timeout_s=10)
            r = _post(live.url, body, timeout=10)
        finally:
            engine.hold.set()
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["type"] == "RateLimitError"
        for w in workers:
            w.join(TIMEOUT_S)
        assert [x.status_code for x in results] == [200, 200]  # accepted work is not lost


def test_streams_of_deterministic_requests_carry_only_verified_tokens(tmp_path):
    path = make_tiny_checkpoint(tmp_path / "m")
    config = EngineConfig(block_size=4, num_blocks=128, dvr_window=4)
    params = SamplingParams(max_tokens=24, seed=7, deterministic=True)
    reference = Engine.from_pretrained(path, config).generate([[1, 2, 3]], params)[0].token_ids
    noise = random.Random(0)

    def flip(_rid, _pos, token):  # the fast path gets a wrong token a third of the time
        return (token + 1) % 256 if noise.random() < 0.3 else token

    engine = Engine.from_pretrained(path, config, fast_path_fault=flip)
    with live_server(engine) as live:
        body = {"prompt": [1, 2, 3], "max_tokens": 24, "seed": 7, "deterministic": True, "stream": True,
                "return_token_ids": True}  # fmt: skip
        with httpx.stream("POST", live.url + "/v1/completions", json=body, timeout=TIMEOUT_S) as r:
            chunks = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: {")]
        streamed = [t for c in chunks for t in c["choices"][0]["token_ids"]]
        assert engine.metrics().rollbacks > 0  # tokens were rolled back inside the engine...
        assert streamed == reference  # ...and none of them reached the stream
