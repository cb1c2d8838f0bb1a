"""A reasoning gateway: certainindex early exit and self-consistency in front of any vLLM,
SGLang or OpenAI-compatible server (``reasonserve gateway --upstream URL``).

Every request is served by a reasoning program (:mod:`reasonserve.programs`) over the
upstream (:mod:`reasonserve.clients`), controlled per request by OpenAI extra-body fields
(``early_exit``, ``thinking_token_budget``, ``self_consistency``) with per-gateway
defaults. See ``docs/gateway.md``.
"""

from reasonserve.gateway.app import create_gateway_app, upstream_client
from reasonserve.gateway.config import UPSTREAM_KINDS, GatewayConfig
from reasonserve.gateway.protocol import EarlyExitSpec, SelfConsistencySpec
from reasonserve.gateway.server import serve_gateway

__all__ = [
    "UPSTREAM_KINDS",
    "EarlyExitSpec",
    "GatewayConfig",
    "SelfConsistencySpec",
    "create_gateway_app",
    "serve_gateway",
    "upstream_client",
]
