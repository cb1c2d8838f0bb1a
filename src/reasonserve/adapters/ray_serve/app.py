"""Build and run the Ray Serve application: ``num_replicas`` :class:`EngineReplica`
deployments routed by :class:`PascalRequestRouter` (or Ray Serve's default
power-of-two-choices router) behind the OpenAI-compatible :class:`OpenAIIngress`."""

from __future__ import annotations

from ray import serve
from ray.serve.config import RequestRouterConfig

from reasonserve.adapters.ray_serve.config import RayServeConfig
from reasonserve.adapters.ray_serve.ingress import OpenAIIngress
from reasonserve.adapters.ray_serve.replica import EngineReplica
from reasonserve.adapters.ray_serve.request_router import PascalRequestRouter

__all__ = ["build_app", "replica_deployment", "router_config"]


def router_config(config: RayServeConfig) -> RequestRouterConfig:
    """Stats every ``stats_period_s``; a replica that does not answer within three periods
    is skipped for that round (Ray Serve keeps its last stats, which then turn stale)."""
    common = {
        "request_routing_stats_period_s": config.stats_period_s,
        "request_routing_stats_timeout_s": 3 * config.stats_period_s,
    }
    if config.router == "pow2":
        return RequestRouterConfig(**common)
    kwargs = {
        "migrate": config.migrate,
        "adaptive": config.adaptive,
        "block_size": config.engine.block_size,
        "max_stats_age_s": config.max_stats_age_s,
    }
    return RequestRouterConfig(
        request_router_class=PascalRequestRouter, request_router_kwargs=kwargs, **common
    )


def replica_deployment(config: RayServeConfig):
    """The :class:`EngineReplica` deployment bound to ``config`` (an Application)."""
    deployment = serve.deployment(
        EngineReplica,
        name="EngineReplica",
        num_replicas=config.num_replicas,
        ray_actor_options={"num_cpus": config.num_cpus_per_replica},
        max_ongoing_requests=config.max_ongoing_requests,
        request_router_config=router_config(config),
        health_check_period_s=1.0,
        health_check_timeout_s=10.0,
        graceful_shutdown_timeout_s=5.0,
    )
    return deployment.bind(config)


def build_app(config: RayServeConfig):
    """The whole app: ingress -> replicas. ``serve.run(build_app(cfg))`` starts it."""
    ingress = serve.deployment(OpenAIIngress, name="OpenAIIngress", ray_actor_options={"num_cpus": 0})
    return ingress.bind(replica_deployment(config), config)
