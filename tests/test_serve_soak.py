"""A bounded soak on loopback: mixed load for a few seconds, then everything returns to baseline."""

from __future__ import annotations

import gc
import os
import random
import threading
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from _live_server import TIMEOUT_S, live_server, tiny_engine, wait_until  # noqa: E402
from reasonserve.engine import EngineConfig  # noqa: E402

SOAK_S = 3.0


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _client_loop(url: str, seed: int, stop_at: float, statuses: list) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=TIMEOUT_S) as client:
        while time.monotonic() < stop_at:
            kind = rng.choice(["full", "stream", "leave", "bad", "chat"])
            body = {"prompt": [rng.randrange(256) for _ in range(rng.randint(1, 40))],
                    "max_tokens": rng.randint(1, 48), "seed": rng.randrange(2**31)}  # fmt: skip
            if kind == "bad":
                statuses.append(client.post("/v1/completions", json={**body, "top_k": 2**63}).status_code)
            elif kind == "chat":
                chat = {"messages": [{"role": "user", "content": "hé"}], "max_tokens": body["max_tokens"]}
                statuses.append(client.post("/v1/chat/completions", json=chat).status_code)
            elif kind == "full":
                statuses.append(client.post("/v1/completions", json=body).status_code)
            else:
                with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
                    statuses.append(r.status_code)
                    for line in r.iter_lines():
                        if kind == "leave" and line.startswith("data:"):
                            break  # disconnect mid-stream


@pytest.mark.slow  # 3 s of traffic from a server process, then the return to baseline
def test_soak_returns_to_baseline(tmp_path):
    engine = tiny_engine(tmp_path, EngineConfig(block_size=4, num_blocks=128))  # small: preemption happens
    with live_server(engine) as live:
        _client_loop(live.url, 0, time.monotonic() + 0.5, [])  # warm up allocators and caches
        gc.collect()
        baseline = _rss_mib()
        statuses: list = []
        stop_at = time.monotonic() + SOAK_S
        threads = [
            threading.Thread(target=_client_loop, args=(live.url, i, stop_at, statuses)) for i in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(SOAK_S + TIMEOUT_S)
        assert not any(t.is_alive() for t in threads)
        assert len(statuses) > 20 and set(statuses) <= {200, 400}
        assert wait_until(lambda: live.runner.num_live == 0, timeout_s=10)
        assert wait_until(lambda: live.runner.snapshot.kv_blocks_used == 0, timeout_s=5)
        m = engine.metrics()
        assert m.num_running == 0 and m.num_waiting == 0 and not engine.has_unfinished()
        gc.collect()
        assert _rss_mib() - baseline < 64, (baseline, _rss_mib())
        assert httpx.get(live.url + "/health", timeout=TIMEOUT_S).status_code == 200
