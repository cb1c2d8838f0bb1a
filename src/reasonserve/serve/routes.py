"""The generation endpoints: parse and plan off the event loop, then stream or collect.

A non-streaming request races its generation against the client's disconnect; a
streaming one is cancelled by Starlette when the client leaves. Either way
``Generation.close()`` aborts the engine requests that had not finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import StreamingResponse

from reasonserve.serve.config import ServeConfig
from reasonserve.serve.errors import ApiError, error_body
from reasonserve.serve.generation import Generation
from reasonserve.serve.metrics import ServerMetrics
from reasonserve.serve.parsing import parse_body
from reasonserve.serve.responses import final_body, sse, stream_chunk
from reasonserve.serve.runner import EngineRunner
from reasonserve.serve.sampling import Capacity, Plan

__all__ = ["Generator", "race_disconnect"]


@dataclass(frozen=True)
class Generator:
    runner: EngineRunner
    cap: Capacity
    cfg: ServeConfig
    metrics: ServerMetrics

    async def handle(self, request: Request, model: type, planner: Callable):
        raw = await request.body()
        plan: Plan = await asyncio.to_thread(self._plan, raw, model, planner)
        gen = Generation(self.runner, plan, self.cap, self.metrics)
        await gen.start()
        if plan.stream:
            return StreamingResponse(self._stream(gen), media_type="text/event-stream")
        try:
            await race_disconnect(request, _drain(gen))
        finally:
            gen.close()
        failed = [c.error for c in gen.choices.values() if c.error is not None]
        if failed:
            raise ApiError(500, failed[0])
        return final_body(gen, self.cfg.model_name, self._echo(plan))

    def _plan(self, raw: bytes, model: type, planner: Callable) -> Plan:
        return planner(parse_body(raw, model), self.cap, self.cfg)

    def _echo(self, plan: Plan) -> dict[int, str]:
        if not plan.echo or self.cap.tokenizer is None:
            return {}
        return {job.index: self.cap.tokenizer.decode(job.prompt_ids) for job in plan.jobs}  # type: ignore[attr-defined]

    async def _stream(self, gen: Generation) -> AsyncIterator[str]:
        model, plan = self.cfg.model_name, gen.plan
        try:
            echo = self._echo(plan)
            if plan.chat or plan.echo or plan.return_token_ids:
                for c in sorted(gen.choices.values(), key=lambda c: c.index):
                    yield sse(stream_chunk(gen, model, c, echo.get(c.index, ""), first=True))
            async for choice, piece, new_ids in gen.updates():
                if choice.error is not None:
                    yield sse(error_body(500, choice.error))
                elif piece or (new_ids and plan.return_token_ids) or choice.finish_reason is not None:
                    yield sse(stream_chunk(gen, model, choice, piece, new_ids=new_ids))
            if plan.include_usage:
                yield sse(stream_chunk(gen, model, None, ""))
            yield sse("[DONE]")
        finally:
            gen.close()


async def _drain(gen: Generation) -> None:
    async for _ in gen.updates():
        pass


async def race_disconnect(request: Request, work) -> None:
    """Run ``work``; cancel it if the client disconnects first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
    if task not in done:  # the client left: this reply reaches nobody
        raise ApiError(408, "the client disconnected before the reply")
    task.result()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
