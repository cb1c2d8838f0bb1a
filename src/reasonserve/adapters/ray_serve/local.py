"""``reasonserve serve --replicas N``: the Ray Serve app on a local Ray instance (or the
cluster ``RAY_ADDRESS`` names), serving HTTP on ``host:port`` until SIGINT/SIGTERM."""

from __future__ import annotations

import signal
import threading

import ray
from ray import serve

from reasonserve.adapters.ray_serve.app import build_app
from reasonserve.adapters.ray_serve.config import RayServeConfig

__all__ = ["run_local"]


def run_local(config: RayServeConfig, *, host: str, port: int) -> int:
    """Start Ray (unless already started), the app at ``/``, and block until a signal."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(include_dashboard=False)
    try:
        serve.start(http_options={"host": host, "port": port})
        serve.run(build_app(config), name=config.app_name, route_prefix="/")
        print(f"reasonserve: {config.num_replicas} replicas ({config.router} router) on http://{host}:{port}",
              flush=True)  # fmt: skip
        stop.wait()
    finally:
        serve.shutdown()
        if started_ray:
            ray.shutdown()
    return 0
