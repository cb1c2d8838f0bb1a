"""Run the app under uvicorn with the limits of a :class:`ServeConfig`.

SIGTERM/SIGINT: uvicorn stops accepting and waits for in-flight requests; after
``drain_timeout_s`` the runner fails what is left with a 503 "the server is shutting
down" (non-streamed) or an ``error`` event followed by ``[DONE]`` (streamed), and the
server waits up to :data:`FLUSH_S` more for those replies to go out before it closes
connections. If the engine loop dies, the server shuts down the same way and
:func:`serve` returns 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Awaitable, Callable

from reasonserve.serve.app import create_app
from reasonserve.serve.config import ServeConfig
from reasonserve.serve.limits import timed_h11_protocol
from reasonserve.serve.runner import EngineRunner

__all__ = ["FLUSH_S", "draining_server", "run_server", "serve", "signals_end_the_drain", "uvicorn_config"]

FLUSH_S = 5.0  # after the drain deadline: time for the failed requests' replies to go out


def uvicorn_config(app, cfg: ServeConfig, *, host: str, port: int, log_level: str = "info"):
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=timed_h11_protocol(cfg.header_timeout_s, cfg.send_timeout_s),
        # uvicorn annotates these int; it passes them to loop.call_later / asyncio.wait_for (float s)
        timeout_keep_alive=cfg.keep_alive_s,  # type: ignore[arg-type]
        timeout_graceful_shutdown=cfg.drain_timeout_s + FLUSH_S,  # type: ignore[arg-type]
        h11_max_incomplete_event_size=16 * 1024,
        lifespan="off",
    )


def serve(
    engine, cfg: ServeConfig, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info"
) -> int:
    """Serve until SIGTERM/SIGINT (0) or until the engine loop dies (1)."""
    import uvicorn

    holder: list[uvicorn.Server] = []
    runner = EngineRunner(
        engine,
        max_queued_requests=cfg.max_queued_requests,
        on_exit=lambda: setattr(holder[0], "should_exit", True),
    )
    config = uvicorn_config(create_app(runner, cfg), cfg, host=host, port=port, log_level=log_level)
    server = draining_server(config, runner, cfg.drain_timeout_s)
    holder.append(server)
    try:
        with signals_end_the_drain():
            server.run()
    finally:
        runner.close(cfg.drain_timeout_s)
    return 1 if runner.error is not None else 0


def run_server(server, cleanup: Callable[[], Awaitable[None]] | None = None) -> None:
    """``server.serve()`` on the event loop uvicorn's config names (uvloop where installed,
    as ``server.run()`` would), then ``await cleanup()`` on that same loop (e.g. closing
    the app's HTTP clients)."""

    async def main() -> None:
        try:
            await server.serve()
        finally:
            if cleanup is not None:
                await cleanup()

    if not hasattr(asyncio, "Runner"):  # Python 3.10: the default loop
        asyncio.run(main())
        return
    with asyncio.Runner(loop_factory=server.config.get_loop_factory()) as runner:
        runner.run(main())


def draining_server(config, runner: EngineRunner, drain_timeout_s: float):
    """A uvicorn ``Server`` whose shutdown fails the runner's live requests at the drain
    deadline, so streams end with an error event and ``[DONE]`` instead of being cut off."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        async def shutdown(self, sockets=None) -> None:
            deadline = asyncio.get_running_loop().call_later(drain_timeout_s, runner.stop)
            try:
                await super().shutdown(sockets)
            finally:
                deadline.cancel()

    return DrainingServer(config)


@contextlib.contextmanager
def signals_end_the_drain():
    """uvicorn re-raises SIGTERM/SIGINT after its graceful shutdown, into the handler that
    was there before it; make that handler a no-op so the runner is closed and the exit
    status says whether the engine was healthy."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
