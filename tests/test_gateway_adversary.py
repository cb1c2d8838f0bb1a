"""An adversary's clients against ``reasonserve gateway`` in front of a live ``reasonserve
serve``: wrong media types, hostile bodies, more requests than ``--max-connections``.
After each the gateway holds no program, the upstream no request, and a normal request
is answered exactly. (Upstream faults -- garbage, cut connections, hangs -- are
``test_gateway_faults.py``'s.)"""

from __future__ import annotations

import json
import threading

import pytest

httpx = pytest.importorskip("httpx", reason="gateway tests need httpx (client extra)")
pytest.importorskip("transformers", reason="the chain checkpoint is written with transformers")

from _gateway import ANSWER, REASONING, chain_upstream, live_gateway  # noqa: E402
from _live_server import TIMEOUT_S, Held, assert_error, wait_until  # noqa: E402
from reasonserve.gateway import GatewayConfig  # noqa: E402
from reasonserve.serve.config import ServeConfig  # noqa: E402

MAX_CONNECTIONS = 2
BUDGET_S = 20.0  # a bound on a failure (the state below settles in milliseconds), not a gate on speed
ENDLESS = {"prompt": "Think forever ~", "early_exit": "off", "max_tokens": 3000, "stream": True}


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    with chain_upstream(tmp_path_factory.mktemp("chain")) as live:
        yield live


@pytest.fixture(scope="module")
def gateway(upstream):
    limits = ServeConfig(max_tokens_limit=4000, max_connections=MAX_CONNECTIONS, max_request_bytes=50_000)
    cfg = GatewayConfig(upstream.url, upstream_kind="reasonserve", served_model_name="gw",
                        tokenizer=str(upstream.folder), limits=limits)  # fmt: skip
    with live_gateway(cfg) as (url, gw):
        yield url, gw


def post(url: str, body, path: str = "/v1/completions", headers=None) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json"} if headers is None else headers
    return httpx.post(url + path, content=raw, headers=headers, timeout=TIMEOUT_S)


def assert_clean(upstream, gateway) -> None:
    url, gw = gateway
    assert wait_until(lambda: gw.scheduler.num_live == 0, BUDGET_S), gw.scheduler.num_live
    assert wait_until(lambda: upstream.runner.num_live == 0, BUDGET_S), upstream.runner.num_live
    assert wait_until(lambda: upstream.runner.snapshot.kv_blocks_used == 0, BUDGET_S)
    r = post(url, {"prompt": "Q:", "early_exit": "off", "max_tokens": 100})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert (choice["reasoning"], choice["text"]) == (REASONING, ANSWER)


BAD = [  # (raw body, path, status, param)
    (b'{"prompt": "Q:"', "/v1/completions", 400, None),
    (b'["prompt"]', "/v1/completions", 400, None),
    (b'{"prompt": "\xff"}', "/v1/completions", 400, None),
    (b'{"prompt": "\\ud800"}', "/v1/completions", 400, "prompt"),
    (b'{"prompt": "Q:", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}", "/v1/completions", 400, None),
    (b'{"prompt": "Q:", "max_tokens": -1}', "/v1/completions", 400, "max_tokens"),
    (b'{"prompt": "Q:", "temperature": NaN}', "/v1/completions", 400, None),
    (b'{"prompt": "Q:", "max_tokens": "9"}', "/v1/completions", 400, "max_tokens"),
    (b'{"prompt": "Q:", "self_consistency": {"n": 100000}}', "/v1/completions", 400, "self_consistency.n"),
    (
        b'{"prompt": "Q:", "early_exit": {"probe_interval_tokens": 0}}',
        "/v1/completions",
        400,
        "early_exit.probe_interval_tokens",
    ),
    (b'{"prompt": "Q:", "frobnicate": 1}', "/v1/completions", 400, "frobnicate"),
    (b'{"prompt": [999999]}', "/v1/completions", 400, None),  # out of the upstream's vocabulary
    (json.dumps({"prompt": [7] * 4500, "max_tokens": 4000}).encode(), "/v1/completions", 400, None),  # past
    # the upstream's context (8192)
    (b'{"messages": []}', "/v1/chat/completions", 400, "messages"),
    (b'{"prompt": "Q:", "max_tokens": 4001}', "/v1/completions", 400, "max_tokens"),
]


@pytest.mark.parametrize(("raw", "path", "status", "param"), BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_a_hostile_body_gets_its_error_and_leaves_nothing_behind(upstream, gateway, raw, path, status, param):
    assert_error(post(gateway[0], raw, path), status, param)
    assert_clean(upstream, gateway)


def test_a_body_over_the_size_limit_is_413(upstream, gateway):
    assert_error(post(gateway[0], {"prompt": "Q" * 60_000}), 413)
    assert_clean(upstream, gateway)


@pytest.mark.parametrize("media", ["text/plain", "application/x-www-form-urlencoded"])
def test_a_body_that_is_not_json_by_its_content_type_is_415(upstream, gateway, media):
    body = {"prompt": "Q:", "early_exit": "off", "max_tokens": 100}
    assert_error(post(gateway[0], body, headers={"content-type": media}), 415)
    assert post(gateway[0], body, headers={}).status_code == 200
    assert_clean(upstream, gateway)


def test_requests_past_max_connections_get_503_and_health_still_answers(upstream, gateway):
    url, gw = gateway
    a, b = httpx.Client(timeout=TIMEOUT_S), httpx.Client(timeout=TIMEOUT_S)
    with a, b, a.stream("POST", url + "/v1/completions", json=ENDLESS) as s1, \
            b.stream("POST", url + "/v1/completions", json=ENDLESS) as s2:  # fmt: skip
        assert s1.status_code == 200 and s2.status_code == 200
        assert gw.scheduler.num_live == MAX_CONNECTIONS
        err = assert_error(post(url, {"prompt": "Q:", "max_tokens": 10}), 503)
        assert f"limit of {MAX_CONNECTIONS}" in err["message"]
        health = httpx.get(url + "/health", timeout=TIMEOUT_S)
        assert health.status_code == 200 and health.json()["programs_running"] == MAX_CONNECTIONS
        assert httpx.get(url + "/metrics", timeout=TIMEOUT_S).status_code == 200
    assert_clean(upstream, gateway)  # leaving the streams aborted their upstream requests


def test_a_parse_in_progress_leaves_health_and_other_parses_waiting_not_the_event_loop(upstream, gateway, monkeypatch):
    """Bodies are parsed on the gateway's one planning thread: while one parse is held
    up, /health answers, and a second body waits its turn instead of starting a second
    parse (a pool of threads would take the GIL from the event loop in turns)."""
    from reasonserve.gateway import routes

    url, _ = gateway
    held = Held(routes.parse_body)
    monkeypatch.setattr(routes, "parse_body", held)
    replies: list = []
    body = {"prompt": [999_999] * 5_000, "early_exit": "off", "max_tokens": 10}  # rejected upstream: 400

    def send() -> None:
        replies.append(post(url, body))

    senders = [threading.Thread(target=send) for _ in range(2)]
    for t in senders:
        t.start()
    try:
        assert wait_until(lambda: held.active == 1)
        # a bound on failure: with the parse on the event loop /health would wait for the release
        assert httpx.get(url + "/health", timeout=TIMEOUT_S / 3).status_code == 200
        assert held.peak == 1
    finally:
        held.release()
        for t in senders:
            t.join(TIMEOUT_S)
    assert [r.status_code for r in replies] == [400, 400] and held.peak == 1
    assert_clean(upstream, gateway)
