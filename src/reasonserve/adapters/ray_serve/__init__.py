"""Replicas of the embedded engine on Ray Serve, routed by PASCAL's instance policy
(Algorithm 1 placement, Algorithm 2 + adaptive migration at the phase boundary).
Needs the ``ray`` extra: ``pip install 'reasonserve[ray]'``. See ``docs/ray_serve.md``."""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("ray") is None or importlib.util.find_spec("ray.serve") is None:
    raise ImportError("reasonserve.adapters.ray_serve needs Ray Serve: pip install 'reasonserve[ray]'")

from reasonserve.adapters.ray_serve.app import build_app, replica_deployment, router_config
from reasonserve.adapters.ray_serve.client import Outcome, PhaseAwareClient, RequestFailedError
from reasonserve.adapters.ray_serve.config import ROUTERS, RayServeConfig
from reasonserve.adapters.ray_serve.ingress import OpenAIIngress
from reasonserve.adapters.ray_serve.job import Job, ReplicaFailedError
from reasonserve.adapters.ray_serve.pool_runner import EngineInfo, PoolRunner
from reasonserve.adapters.ray_serve.ranking import Decision, Placement, rank
from reasonserve.adapters.ray_serve.replica import EngineReplica, MigratableEngine
from reasonserve.adapters.ray_serve.request_router import PascalRequestRouter
from reasonserve.adapters.ray_serve.stats import ReplicaStats, measure

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
