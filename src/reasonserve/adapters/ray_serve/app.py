"""Build and run the Ray Serve application: ``num_replicas`` :class:`EngineReplica`
deployments routed by :class:`PascalRequestRouter` (or Ray Serve's default
power-of-two-choices router) behind the OpenAI-compatible :class:`OpenAIIngress`."""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve.config import RequestRouterConfig

from reasonserve.adapters.ray_serve.config import RayServeConfig
from reasonserve.adapters.ray_serve.ingress import OpenAIIngress
from reasonserve.adapters.ray_serve.replica import EngineReplica
from reasonserve.adapters.ray_serve.request_router import PascalRequestRouter
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine import EngineConfig

__all__ = ["build_app", "from_args", "replica_deployment", "router_config"]


def router_config(config: RayServeConfig) -> RequestRouterConfig:
    """Stats every ``stats_period_s``; a replica that does not answer within three periods
    is skipped for that round (Ray Serve keeps its last stats, which then turn stale)."""
    common: dict[str, Any] = {
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
    common.update(request_router_class=PascalRequestRouter, request_router_kwargs=kwargs)
    return RequestRouterConfig(**common)


def replica_deployment(config: RayServeConfig, engine_kwargs: dict | None = None):
    """The :class:`EngineReplica` deployment bound to ``config`` (an Application)."""
    deployment = serve.deployment(
        name="EngineReplica",
        num_replicas=config.num_replicas,
        ray_actor_options={"num_cpus": config.num_cpus_per_replica},
        max_ongoing_requests=config.max_ongoing_requests,
        request_router_config=router_config(config),
        health_check_period_s=1.0,
        health_check_timeout_s=10.0,
        graceful_shutdown_timeout_s=5.0,
    )(EngineReplica)
    return deployment.bind(config, engine_kwargs)


def build_app(config: RayServeConfig):
    """The whole app: ingress -> replicas. ``serve.run(build_app(cfg))`` starts it."""
    ingress = serve.deployment(name="OpenAIIngress", ray_actor_options={"num_cpus": 0})(OpenAIIngress)
    return ingress.bind(replica_deployment(config), config)


_ARGS = ("model", "replicas", "router", "end_of_thinking_token_id", "block_size", "num_blocks")


def from_args(args: dict[str, str]):
    """Application builder for ``serve run`` / a Serve config file:
    ``serve run reasonserve.adapters.ray_serve.app:from_args model=DIR replicas=3
    router=pascal end_of_thinking_token_id=ID`` (only ``model`` is required)."""
    unknown = sorted(set(args) - set(_ARGS))
    if unknown or "model" not in args:
        raise InvalidArgumentError(f"from_args takes {_ARGS} (model required), got unknown {unknown}")
    eot = _int(args, "end_of_thinking_token_id", 0) if "end_of_thinking_token_id" in args else None
    engine = EngineConfig(block_size=_int(args, "block_size", 16), num_blocks=_int(args, "num_blocks", 512),
                          end_of_thinking_token_id=eot)  # fmt: skip
    config = RayServeConfig(model=args["model"], num_replicas=_int(args, "replicas", 2), engine=engine,
                            router=args.get("router", "pascal"))  # fmt: skip
    return build_app(config)


def _int(args: dict[str, str], key: str, default: int) -> int:
    if key not in args:
        return default
    try:
        return int(args[key])
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{key} must be an integer, got {args[key]!r}") from None
