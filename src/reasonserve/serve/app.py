"""An OpenAI-compatible HTTP server over the embedded engine (FastAPI).

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (both with SSE
streaming), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text).
Extensions in the request body: ``seed``, ``deterministic``, ``priority`` (and
``top_k``, ``min_p``). Limits: request bodies over ``max_request_bytes`` get 413,
``max_tokens`` over ``max_tokens_limit`` gets 400. Bad requests get a 4xx with an
OpenAI-style error body; the engine keeps serving. A client that disconnects while
streaming has its request aborted.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel, Field, ValidationError

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine import RequestOutput, SamplingParams
from reasonserve.serve.runner import EngineRunner

__all__ = ["create_app"]


class _Common(BaseModel):
    model: str | None = None
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    deterministic: bool = False
    priority: int = 0
    stream: bool = False


class CompletionRequest(_Common):
    prompt: str | list[int]


class ChatMessage(BaseModel):
    role: str
    content: str


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": status}},
                        status_code=status)  # fmt: skip


def _chat_prompt(messages: list[ChatMessage]) -> str:
    """A plain template for models without a chat template of their own."""
    return "".join(f"<|{m.role}|>\n{m.content}\n" for m in messages) + "<|assistant|>\n"


def create_app(runner: EngineRunner, *, model_name: str, max_tokens_limit: int = 4096,
               max_request_bytes: int = 1_000_000) -> FastAPI:  # fmt: skip
    app = FastAPI(title="reasonserve")

    @app.middleware("http")
    async def limit_size(request: Request, call_next):
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > max_request_bytes):
            return _error(413, f"request body larger than {max_request_bytes} bytes")
        return await call_next(request)

    def params(body: _Common) -> SamplingParams:
        if body.max_tokens > max_tokens_limit:
            raise InvalidArgumentError(f"max_tokens must be <= {max_tokens_limit}")
        return SamplingParams(max_tokens=body.max_tokens, temperature=body.temperature, top_p=body.top_p,
                              top_k=body.top_k, min_p=body.min_p, seed=body.seed,
                              deterministic=body.deterministic, priority=body.priority)  # fmt: skip

    async def parse(request: Request, model: type[BaseModel]):
        try:
            return model.model_validate(json.loads(await request.body()))
        except (ValidationError, json.JSONDecodeError, UnicodeDecodeError) as err:
            raise InvalidArgumentError(f"malformed request: {str(err)[:500]}") from err

    @app.exception_handler(InvalidArgumentError)
    async def bad_request(_request: Request, err: InvalidArgumentError):
        return _error(400, str(err))

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "reasonserve"}]}

    @app.get("/metrics")
    async def metrics():
        s = runner.stats()
        lines = [f"# TYPE reasonserve_{k} {'gauge' if k in ('running', 'waiting') else 'counter'}\n"
                 f"reasonserve_{k} {v}" for k, v in s.items()]  # fmt: skip
        return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await parse(request, CompletionRequest)
        return await _serve(request, body.prompt, body, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await parse(request, ChatRequest)
        return await _serve(request, _chat_prompt(body.messages), body, chat=True)

    async def _serve(request: Request, prompt, body: _Common, *, chat: bool):
        rid, queue = runner.submit(prompt, params(body))
        if body.stream:
            return StreamingResponse(_stream(request, rid, queue, chat), media_type="text/event-stream")
        try:
            tokens, out = await _collect(queue)
        except BaseException:
            runner.abort(rid)
            raise
        return _full(rid, tokens, out, chat, len(out.prompt_token_ids))

    def _text(tokens: list[int]) -> str:
        tok = runner.engine.tokenizer
        return tok.decode(tokens) if tok is not None else ""

    def _full(rid: str, tokens, out, chat: bool, n_prompt: int) -> dict:
        text = _text(tokens)
        reason = out.finish_reason
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
        n_out = len(tokens)
        usage = {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}
        kind = "chat.completion" if chat else "text_completion"
        return {"id": rid, "object": kind, "created": int(time.time()), "model": model_name,
                "choices": [choice], "usage": usage}  # fmt: skip

    async def _stream(request: Request, rid: str, queue, chat: bool) -> AsyncIterator[str]:
        try:
            while True:
                event = await queue.get()
                if await request.is_disconnected():
                    runner.abort(rid)
                    return
                finish = event.finished.finish_reason if event.finished else None
                if event.tokens or finish:
                    yield "data: " + json.dumps(_chunk(rid, event.tokens, finish, chat)) + "\n\n"
                if event.finished is not None:
                    yield "data: [DONE]\n\n"
                    return
        finally:
            runner.abort(rid)  # no-op once finished; aborts when the client went away

    def _chunk(rid: str, tokens: list[int], finish, chat: bool) -> dict:
        text = _text(tokens)
        choice = ({"index": 0, "delta": {"content": text}, "finish_reason": finish} if chat
                  else {"index": 0, "text": text, "finish_reason": finish})  # fmt: skip
        return {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": model_name, "choices": [choice]}  # fmt: skip

    return app


async def _collect(queue) -> tuple[list[int], RequestOutput]:
    tokens: list[int] = []
    while True:
        event = await queue.get()
        tokens += event.tokens
        if event.finished is not None:
            return event.finished.token_ids, event.finished
