"""An OpenAI-compatible HTTP server over the embedded engine (FastAPI).

Endpoints: ``POST /v1/completions`` and ``POST /v1/chat/completions`` (SSE streaming
with ``stream: true``), ``GET /v1/models``, ``GET /health`` (503 once the engine loop
is gone), ``GET /metrics`` (Prometheus), ``POST /tokenize`` and ``POST /detokenize``
(vLLM's shapes, ``serve/tokens.py``). Request schemas are published in
``/openapi.json``; every error is in the OpenAI shape. See ``docs/serve.md`` for the
parameter table, limits and behaviour on disconnects and shutdown.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import PlainTextResponse
from pydantic.json_schema import models_json_schema

from reasonserve.serve.config import ServeConfig
from reasonserve.serve.errors import ApiError, AsciiJSONResponse, install_error_handlers
from reasonserve.serve.limits import BodyLimitMiddleware, RequestLimitMiddleware
from reasonserve.serve.metrics import ServerMetrics
from reasonserve.serve.parsing import json_body, parse_body
from reasonserve.serve.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
)
from reasonserve.serve.routes import Generator
from reasonserve.serve.runner import EngineRunner
from reasonserve.serve.sampling import Capacity, plan_chat, plan_completion
from reasonserve.serve.tokens import detokenize, tokenize

__all__ = ["AsciiJSONResponse", "capacity_of", "create_app"]


def capacity_of(engine) -> Capacity:
    cfg = engine.config
    kv_tokens = cfg.num_blocks * cfg.block_size
    eot = cfg.thinking_end_ids
    model = getattr(engine, "model", None)  # an Engine; a replica pool's EngineInfo has vocab_size
    vocab = model.cfg.vocab_size if model is not None else getattr(engine, "vocab_size", None)
    return Capacity(engine.tokenizer, engine.max_model_len, kv_tokens, cfg.all_eos_token_ids, eot, vocab)


def create_app(runner: EngineRunner, config: ServeConfig | None = None) -> FastAPI:
    """The FastAPI app serving ``runner``'s engine under ``config``'s limits. Body limits
    and read timeouts need the app to run under :func:`reasonserve.serve.serve` (or
    :func:`reasonserve.serve.server.uvicorn_config`) for the header timeout."""
    cfg = config or ServeConfig()
    app = FastAPI(title="reasonserve", default_response_class=AsciiJSONResponse)
    install_error_handlers(app)
    metrics = ServerMetrics()
    planning = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reasonserve-plan")
    gen = Generator(runner, capacity_of(runner.engine), cfg, metrics, planning)
    started = int(time.time())

    @app.get("/health")
    async def health():
        if not runner.alive:
            raise ApiError(503, "the engine loop is not running")
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        card = {
            "id": cfg.model_name,
            "object": "model",
            "created": started,
            "owned_by": "reasonserve",
            "root": cfg.model_name,
            "parent": None,
            "max_model_len": runner.engine.max_model_len,
        }
        return {"object": "list", "data": [card]}

    @app.get("/metrics")
    async def prometheus():
        text = metrics.render(runner.snapshot, runner.num_live)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/v1/completions", openapi_extra=_body_schema("CompletionRequest"))
    async def completions(request: Request):
        return await gen.handle(request, CompletionRequest, plan_completion)

    @app.post("/v1/chat/completions", openapi_extra=_body_schema("ChatCompletionRequest"))
    async def chat_completions(request: Request):
        return await gen.handle(request, ChatCompletionRequest, plan_chat)

    @app.post("/tokenize")
    async def tokenize_route(request: Request):
        raw = await json_body(request)
        return await gen.work(lambda: tokenize(parse_body(raw, TokenizeRequest), gen.cap, cfg))

    @app.post("/detokenize")
    async def detokenize_route(request: Request):
        raw = await json_body(request)
        return await gen.work(lambda: detokenize(parse_body(raw, DetokenizeRequest), gen.cap, cfg))

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    app.add_middleware(
        BodyLimitMiddleware, max_bytes=cfg.max_request_bytes, body_timeout_s=cfg.body_timeout_s
    )
    app.add_middleware(RequestLimitMiddleware, max_requests=cfg.max_connections)  # outermost
    return app


def _body_schema(name: str) -> dict:
    ref = {"$ref": f"#/components/schemas/{name}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def _openapi(app: FastAPI) -> dict:
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        _, defs = models_json_schema(
            [(CompletionRequest, "validation"), (ChatCompletionRequest, "validation")],
            ref_template="#/components/schemas/{model}",
        )
        schema.setdefault("components", {}).setdefault("schemas", {}).update(defs["$defs"])
        app.openapi_schema = schema
    return app.openapi_schema
