"""Replicas of the embedded engine on Ray Serve, routed by PASCAL's instance policy
(Algorithm 1 placement, Algorithm 2 + adaptive migration at the phase boundary).
See ``docs/ray_serve.md``.

The deployments, the router and the client need the ``ray`` extra (``pip install
'reasonserve[ray]'``); the pure parts (:mod:`.config`, :mod:`.job`, :mod:`.ranking`,
:mod:`.stats`) do not. Names are imported on first use, so importing this package
never imports Ray by itself.
"""

from __future__ import annotations

from reasonserve.adapters._lazy import load_attr

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
    return load_attr(__name__, _HOME, name, runtime="ray", hint="Ray Serve: pip install 'reasonserve[ray]'")
