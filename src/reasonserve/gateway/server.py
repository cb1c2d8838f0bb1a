"""Run a gateway under uvicorn with ``reasonserve serve``'s connection limits.

SIGTERM/SIGINT: uvicorn stops accepting and waits up to ``drain_timeout_s`` for the
requests in flight; then the upstream client is closed (its connections, with them any
upstream request still running, are dropped: the upstream aborts them).
"""

from __future__ import annotations

from reasonserve.gateway.app import create_gateway_app, upstream_client
from reasonserve.gateway.config import GatewayConfig
from reasonserve.serve.server import run_server, signals_end_the_drain, uvicorn_config

__all__ = ["serve_gateway"]


def serve_gateway(
    cfg: GatewayConfig, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info"
) -> int:
    """Serve until SIGTERM/SIGINT (drained as ``reasonserve serve`` drains); returns 0."""
    import uvicorn

    http = upstream_client(cfg)
    app = create_gateway_app(cfg, http)
    server = uvicorn.Server(uvicorn_config(app, cfg.limits, host=host, port=port, log_level=log_level))

    with signals_end_the_drain():
        run_server(server, http.aclose)
    return 0
