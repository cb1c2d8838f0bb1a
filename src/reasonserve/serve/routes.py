"""The generation endpoints: parse and plan off the event loop, then stream or collect.

Parsing, validation and tokenization run on the app's one planning thread
(``Generator.work``): a burst of large bodies (say forty 700 KB token-id prompts that
are all rejected) then costs the event loop at most one parse at a time, instead of a
pool of threads taking turns with it for the GIL, so ``/health`` and live streams stay
responsive.

A non-streaming request races its generation against the client's disconnect; a
streaming one is cancelled by Starlette when the client leaves. Either way
``Generation.close()`` aborts the engine requests that had not finished.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TypeVar

from fastapi import Request
from fastapi.responses import StreamingResponse

from reasonserve.serve.config import ServeConfig
from reasonserve.serve.errors import ApiError, error_body
from reasonserve.serve.generation import ChoiceDelta, Generation
from reasonserve.serve.metrics import ServerMetrics
from reasonserve.serve.parsing import json_body, parse_body
from reasonserve.serve.responses import final_body, sse, stream_chunk
from reasonserve.serve.runner import EngineRunner
from reasonserve.serve.sampling import Capacity, Plan

__all__ = ["Generator", "race_disconnect"]

T = TypeVar("T")


@dataclass(frozen=True)
class Generator:
    runner: EngineRunner
    cap: Capacity
    cfg: ServeConfig
    metrics: ServerMetrics
    planning: Executor
    _ids: Iterator[int] = field(default_factory=itertools.count)

    async def work(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the planning thread."""
        return await asyncio.get_running_loop().run_in_executor(self.planning, fn)

    async def handle(self, request: Request, model: type, planner: Callable):
        raw = await json_body(request)
        plan: Plan = await self.work(lambda: self._plan(raw, model, planner))
        gen = Generation(self.runner, plan, self.cap, self.metrics, serial=next(self._ids))
        await gen.start()
        if plan.stream:
            return StreamingResponse(self._stream(gen), media_type="text/event-stream")
        try:
            await race_disconnect(request, _drain(gen))
        finally:
            gen.close()
        failed = [c for c in gen.choices.values() if c.error is not None]
        if failed:
            raise ApiError(failed[0].error_status, failed[0].error or "")
        return final_body(gen, self.cfg.model_name, self._echo(plan), self.cap.tokenizer)

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
                    opening = ChoiceDelta(text=echo.get(c.index, ""), content=echo.get(c.index, ""))
                    yield sse(stream_chunk(gen, model, c, opening, first=True))
            wants_ids = plan.return_token_ids or plan.logprobs is not None
            async for choice, delta in gen.updates():
                if choice.error is not None:
                    yield sse(error_body(choice.error_status, choice.error))
                elif (
                    delta.reasoning
                    or delta.content
                    or (delta.token_ids and wants_ids)
                    or choice.finish_reason
                ):
                    yield sse(stream_chunk(gen, model, choice, delta, tokenizer=self.cap.tokenizer))
            if plan.include_usage:
                yield sse(stream_chunk(gen, model, None))
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
