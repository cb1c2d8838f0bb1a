"""A live server on an ephemeral loopback port over a tiny random checkpoint (server tests)."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass

from reasonserve.engine import Engine, EngineConfig, make_tiny_checkpoint
from reasonserve.serve.app import create_app
from reasonserve.serve.config import ServeConfig
from reasonserve.serve.runner import EngineRunner
from reasonserve.serve.server import uvicorn_config

TIMEOUT_S = 30.0  # every client call in the server tests uses this (or less)


@dataclass
class Live:
    url: str
    port: int
    runner: EngineRunner
    server: object
    exits: list  # on_exit calls


def tiny_engine(folder, config: EngineConfig | None = None, engine_cls=Engine) -> Engine:
    path = make_tiny_checkpoint(folder)
    return engine_cls.from_pretrained(path, config or EngineConfig(block_size=4, num_blocks=256))


@contextlib.contextmanager
def live_server(engine: Engine, cfg: ServeConfig | None = None):
    import uvicorn

    cfg = cfg or ServeConfig(model_name="tiny", max_tokens_limit=64, max_request_bytes=20_000)
    exits: list = []
    runner = EngineRunner(
        engine, max_queued_requests=cfg.max_queued_requests, on_exit=lambda: exits.append(1)
    )
    server = uvicorn.Server(uvicorn_config(create_app(runner, cfg), cfg, host="127.0.0.1", port=0,
                                           log_level="warning"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + TIMEOUT_S
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "the server did not start"
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Live(f"http://127.0.0.1:{port}", port, runner, server, exits)
    finally:
        server.should_exit = True
        thread.join(timeout=TIMEOUT_S)
        runner.close()


def wait_until(predicate, timeout_s: float = TIMEOUT_S, interval_s: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()
