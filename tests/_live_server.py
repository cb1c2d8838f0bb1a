"""A live server on an ephemeral loopback port over a tiny random checkpoint (server tests)."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field

from reasonserve.engine import Engine, EngineConfig, make_tiny_checkpoint
from reasonserve.serve.app import create_app
from reasonserve.serve.config import ServeConfig
from reasonserve.serve.runner import EngineRunner
from reasonserve.serve.server import run_server, uvicorn_config

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
    cfg = cfg or ServeConfig(model_name="tiny", max_tokens_limit=64, max_request_bytes=20_000)
    exits: list = []
    runner = EngineRunner(
        engine, max_queued_requests=cfg.max_queued_requests, on_exit=lambda: exits.append(1)
    )
    try:
        with live_app(create_app(runner, cfg), cfg) as (server, port):
            yield Live(f"http://127.0.0.1:{port}", port, runner, server, exits)
    finally:
        runner.close()


@contextlib.contextmanager
def live_app(app, cfg: ServeConfig, cleanup=None):
    """Any ASGI app under uvicorn (``cfg``'s limits) on an ephemeral loopback port, in a
    thread: yields ``(server, port)``; stops it on exit, then awaits ``cleanup()`` (when
    given) on the server's event loop."""
    import uvicorn

    server = uvicorn.Server(uvicorn_config(app, cfg, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=run_server, args=(server, cleanup), daemon=True)
    thread.start()
    deadline = time.monotonic() + TIMEOUT_S
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "the server did not start"
    try:
        yield server, server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=TIMEOUT_S)


def wait_until(predicate, timeout_s: float = TIMEOUT_S, interval_s: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


def assert_error(r, status: int, param=...) -> dict:
    """``r`` (an httpx response) is a ``status`` error in the OpenAI shape (naming ``param``
    when given); returns the error object."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == status and err["message"]
    if param is not ...:
        assert err["param"] == param, err
    return err


@dataclass
class Held:
    """``fn`` whose every call waits for :meth:`release` (at most TIMEOUT_S) first, counting
    the calls in progress (``active``) and the most at once (``peak``)."""

    fn: object
    active: int = 0
    peak: int = 0
    _released: threading.Event = field(default_factory=threading.Event)

    def __call__(self, *args):
        self.active += 1
        self.peak = max(self.peak, self.active)
        self._released.wait(TIMEOUT_S)
        self.active -= 1
        return self.fn(*args)

    def release(self) -> None:
        self._released.set()
