"""Replicas of the embedded engine on Ray Serve, routed by PASCAL's instance policy
(Algorithm 1 placement, Algorithm 2 + adaptive migration at the phase boundary).
See ``docs/ray_serve.md``.

The deployments, the router and the client need the ``ray`` extra (``pip install
'reasonserve[ray]'``); the pure parts (:mod:`.config`, :mod:`.job`, :mod:`.ranking`,
:mod:`.stats`) do not. Names are imported on first use, so importing this package
never imports Ray by itself.
"""

from __future__ import annotations

import importlib

__all__ = [
    "ROUTERS",
    "Decision",
    "EngineInfo",
    "EngineReplica",
    "Job",
    "MigratableEngine",
    "OpenAIIngress",
    "Outcome",
    "PascalRequestRouter",
    "PhaseAwareClient",
    "Placement",
    "PoolRunner",
    "RayServeConfig",
    "ReplicaFailedError",
    "ReplicaStats",
    "RequestFailedError",
    "build_app",
    "measure",
    "rank",
    "replica_deployment",
    "router_config",
]

_HOME = {
    "build_app": "app",
    "replica_deployment": "app",
    "router_config": "app",
    "Outcome": "client",
    "PhaseAwareClient": "client",
    "RequestFailedError": "client",
    "ROUTERS": "config",
    "RayServeConfig": "config",
    "OpenAIIngress": "ingress",
    "Job": "job",
    "ReplicaFailedError": "job",
    "EngineInfo": "pool_runner",
    "PoolRunner": "pool_runner",
    "Decision": "ranking",
    "Placement": "ranking",
    "rank": "ranking",
    "EngineReplica": "replica",
    "MigratableEngine": "replica",
    "PascalRequestRouter": "request_router",
    "ReplicaStats": "stats",
    "measure": "stats",
}


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(f"{__name__}.{_HOME[name]}")
    except ModuleNotFoundError as err:
        if err.name is not None and err.name.split(".")[0] == "ray":
            raise ImportError(f"{name} needs Ray Serve: pip install 'reasonserve[ray]'") from err
        raise
    return getattr(module, name)
