"""The gateway's HTTP app: an OpenAI-compatible server whose every request is served by a
reasoning program on the upstream (FastAPI).

Endpoints: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (SSE with
``stream: true``), ``GET /v1/models``, ``GET /health`` (the gateway's own liveness: it
answers without calling the upstream), ``GET /metrics`` (Prometheus). Request schemas
are published in ``/openapi.json``; errors are in the OpenAI shape; body size, read
and send limits and the cap on requests served at once (``max_connections``, 503
beyond; ``/health`` and ``/metrics`` exempt) are ``reasonserve serve``'s.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse

from reasonserve.clients import OpenAIShim, SGLangShim, VLLMShim
from reasonserve.clients.http import HTTPClient
from reasonserve.clients.shims import Shim
from reasonserve.gateway.config import GatewayConfig
from reasonserve.gateway.metrics import GatewayMetrics
from reasonserve.gateway.prompts import ChatTemplate
from reasonserve.gateway.protocol import GatewayChatRequest, GatewayCompletionRequest
from reasonserve.gateway.routes import Gateway
from reasonserve.gateway.scheduling import ProgramScheduler
from reasonserve.programs import DEFAULT_PROBE_SUFFIX
from reasonserve.serve.app import AsciiJSONResponse
from reasonserve.serve.errors import install_error_handlers
from reasonserve.serve.limits import BodyLimitMiddleware, RequestLimitMiddleware
from reasonserve.serve.reasoning_parser import get_reasoning_parser

__all__ = ["create_gateway_app", "upstream_client"]


def upstream_client(cfg: GatewayConfig) -> HTTPClient:
    """The HTTP client of ``cfg``'s upstream, with the shim of its kind. Its connection pool
    is unbounded (httpx's default is 100): every running request needs its own connection
    (closing it is how a request is aborted), and ``max_programs`` bounds them. Idle
    connections are dropped after 2 s, before the upstream's keep-alive (uvicorn's 5 s
    under vLLM and SGLang) closes them: a request sent on a connection the server is
    closing fails with no reply, and a POST cannot be retried safely."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256, keepalive_expiry=2.0)
    transport = httpx.AsyncHTTPTransport(limits=limits)
    shims: dict[str, Shim] = {
        "openai": OpenAIShim(model=cfg.upstream_model, extensions=False),
        "reasonserve": OpenAIShim(model=cfg.upstream_model),
        "vllm": VLLMShim(model=cfg.upstream_model),
        "sglang": SGLangShim(),
    }
    return HTTPClient(
        cfg.upstream_url,
        shims[cfg.upstream_kind],
        timeout_s=cfg.upstream_timeout_s,
        connect_timeout_s=cfg.connect_timeout_s,
        transport=transport,
    )


def create_gateway_app(cfg: GatewayConfig, http: HTTPClient | None = None) -> FastAPI:
    """The app of a gateway (``http``: its upstream client; default :func:`upstream_client`).
    The caller closes ``http`` (``await http.aclose()``) when the app is done."""
    gw = Gateway(
        cfg=cfg,
        http=http if http is not None else upstream_client(cfg),
        parser=get_reasoning_parser(cfg.reasoning_parser),
        scheduler=ProgramScheduler(cfg.max_programs, cfg.starvation_bound_s, priorities=cfg.priorities),
        metrics=GatewayMetrics(),
        probe_suffix=cfg.probe_suffix or DEFAULT_PROBE_SUFFIX,
        planning=ThreadPoolExecutor(max_workers=1, thread_name_prefix="reasonserve-gateway-plan"),
        template=ChatTemplate(cfg.tokenizer) if cfg.tokenizer else None,
    )
    app = FastAPI(title="reasonserve gateway", default_response_class=AsciiJSONResponse)
    app.state.gateway = gw
    install_error_handlers(app)
    started = int(time.time())

    @app.get("/health")
    async def health():
        return {"status": "ok", "programs_running": gw.scheduler.num_live}

    @app.get("/v1/models")
    async def models():
        card = {
            "id": cfg.served_model_name,
            "object": "model",
            "created": started,
            "owned_by": "reasonserve",
            "root": cfg.upstream_model or cfg.served_model_name,
            "parent": None,
        }
        return {"object": "list", "data": [card]}

    @app.get("/metrics")
    async def prometheus():
        text = gw.metrics.render(gw.scheduler.num_live)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await gw.handle(request, GatewayCompletionRequest, "completions")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await gw.handle(request, GatewayChatRequest, "chat")

    lim = cfg.limits
    app.add_middleware(
        BodyLimitMiddleware, max_bytes=lim.max_request_bytes, body_timeout_s=lim.body_timeout_s
    )
    app.add_middleware(RequestLimitMiddleware, max_requests=lim.max_connections)  # outermost
    return app
