"""A reasoning gateway: certainindex early exit and self-consistency in front of any vLLM,
SGLang or OpenAI-compatible server (``reasonserve gateway --upstream URL``).

Every request is served by a reasoning program (:mod:`reasonserve.programs`) over the
upstream (:mod:`reasonserve.clients`), controlled per request by OpenAI extra-body fields
(``early_exit``, ``thinking_token_budget``, ``self_consistency``) with per-gateway
defaults. See ``docs/gateway.md``. Names are imported on first use, so that the command
line's parser does not import the HTTP stack (``pip install reasonserve[serve,client]``).
"""

from __future__ import annotations

import importlib

__all__ = [
    "UPSTREAM_KINDS",
    "EarlyExitSpec",
    "GatewayConfig",
    "SelfConsistencySpec",
    "create_gateway_app",
    "serve_gateway",
    "upstream_client",
]

_HOME = {
    "UPSTREAM_KINDS": "config",
    "GatewayConfig": "config",
    "EarlyExitSpec": "protocol",
    "SelfConsistencySpec": "protocol",
    "create_gateway_app": "app",
    "upstream_client": "app",
    "serve_gateway": "server",
}


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
