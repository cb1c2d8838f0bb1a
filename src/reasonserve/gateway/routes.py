"""The generation endpoints: a request in, its program run, the response out.

Parse (strict, 400 naming the field) -> plan -> prompt -> admission (429) -> program.
Parsing runs on the app's one planning thread, as in ``reasonserve serve``: a burst of
large bodies costs the event loop at most one parse at a time, so ``/health`` and live
streams stay responsive.
A streamed response opens only once the program has produced its first text (or
ended), so an upstream that fails before that gets a clean 502/504; a failure later
ends the stream with an error event in the OpenAI shape. A non-streamed request races
its program against the client's disconnect, and a streamed one its first text.
Whenever a request ends -- finished, failed, or the client gone -- its program is
cancelled (:meth:`ProgramRun.cancel`), which aborts every upstream request it still has
running.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import StreamingResponse

from reasonserve.clients.http import HTTPClient
from reasonserve.gateway.config import GatewayConfig
from reasonserve.gateway.errors import upstream_error
from reasonserve.gateway.metrics import GatewayMetrics
from reasonserve.gateway.options import ProgramPlan, plan_program
from reasonserve.gateway.program import ProgramRun
from reasonserve.gateway.prompts import ChatTemplate, Prompt, chat_prompt, completion_prompt
from reasonserve.gateway.protocol import GatewayChatRequest, GatewayCompletionRequest
from reasonserve.gateway.responses import ResponseShape
from reasonserve.gateway.scheduling import ProgramScheduler
from reasonserve.gateway.upstream import ProgramClient
from reasonserve.programs import Trace
from reasonserve.serve.errors import ApiError, error_body
from reasonserve.serve.parsing import json_body, parse_body
from reasonserve.serve.reasoning_parser import ReasoningParser
from reasonserve.serve.responses import sse
from reasonserve.serve.routes import race_disconnect

__all__ = ["Gateway"]

_Body = GatewayChatRequest | GatewayCompletionRequest  # a generation endpoint's request


@dataclass
class Gateway:
    """Everything one gateway shares between requests."""

    cfg: GatewayConfig
    http: HTTPClient
    parser: ReasoningParser
    scheduler: ProgramScheduler
    metrics: GatewayMetrics
    probe_suffix: str
    planning: Executor
    template: ChatTemplate | None = None

    async def handle(self, request: Request, model: type[_Body], endpoint: str):
        status = 500
        try:
            response = await self._handle(request, model)
            status = 200
            return response
        except ApiError as err:
            status = err.status
            raise
        finally:
            self.metrics.observe_request(endpoint, status)

    async def _handle(self, request: Request, model: type[_Body]):
        raw = await json_body(request)
        body = await asyncio.get_running_loop().run_in_executor(self.planning, parse_body, raw, model)
        chat = model is GatewayChatRequest
        plan = plan_program(body, self.cfg, self.parser.end_tag, self.probe_suffix)
        prompt = await self._prompt(body, chat)
        shape = ResponseShape(
            chat=chat,
            response_id=("chatcmpl-" if chat else "cmpl-") + (body.request_id or uuid.uuid4().hex),
            model=self.cfg.served_model_name,
            created=int(time.time()),
            show_reasoning=getattr(body, "include_reasoning", True),
        )
        run = await self._start(plan, prompt, body)
        if plan.stream:
            return await self._streamed(request, run, shape)
        try:
            pieces: list[str] = []
            await race_disconnect(request, _collect(run, pieces))
        except ApiError:
            raise
        except Exception as err:
            raise upstream_error(err) from None
        finally:
            run.cancel()
            await run.wait()
        reasoning, content = self.parser.split("".join(pieces), in_answer=run.in_answer)
        return shape.final(reasoning, content, plan, run.outcome)

    async def _prompt(self, body, chat: bool) -> Prompt:
        model = self.cfg.upstream_model
        try:
            if chat:
                return await chat_prompt(body, self.http, self.template, model)
            return await completion_prompt(
                body.prompt, self.http, model, special_tokens=body.add_special_tokens
            )
        except ApiError:
            raise
        except Exception as err:
            raise upstream_error(err) from None

    async def _start(self, plan: ProgramPlan, prompt: Prompt, body) -> ProgramRun:
        in_answer = self.parser.starts_in_answer(prompt.text, getattr(body, "chat_template_kwargs", None))
        tag_ids: tuple[int, ...] = ()
        if not isinstance(prompt.payload, str):
            try:
                tag_ids = await self.http.encode(self.parser.end_tag)
            except Exception as err:
                raise upstream_error(err) from None
        trace = Trace(plan.kind)
        ticket = self.scheduler.admit(trace)
        client = ProgramClient(self.http, self.scheduler, ticket, self.metrics)

        def ended(run: ProgramRun) -> None:
            self.scheduler.release(ticket)
            self._count(run)

        run = ProgramRun(
            plan,
            prompt.payload,
            client,
            trace,
            think_end=self.parser.end_tag,
            think_end_ids=tag_ids,
            in_answer=in_answer,
            timeout_s=self.cfg.program_timeout_s,
            on_done=ended,
        )
        run.start()
        return run

    def _count(self, run: ProgramRun) -> None:
        o = run.outcome
        tokens = {
            "probes_total": o.num_probes,
            "probe_tokens_total": o.probe_tokens,
            "probe_prompt_tokens_computed_total": o.probe_prompt_tokens_computed or 0,
            "reasoning_tokens_total": o.reasoning_tokens or 0,
            "completion_tokens_total": o.completion_tokens,
            "program_tokens_total": o.program_tokens,
            "tokens_saved_total": o.tokens_saved,
        }
        self.metrics.observe_exit(o.program, o.exit, time.perf_counter() - run.started_s, tokens)

    async def _streamed(self, request: Request, run: ProgramRun, shape: ResponseShape) -> StreamingResponse:
        """The stream, once the program has its first text (or has ended). A client that
        leaves before then has its program cancelled at once."""
        pieces = run.pieces()
        first: list[str | None] = []

        async def take_first() -> None:
            first.append(await anext(pieces, None))

        try:
            await race_disconnect(request, take_first())
        except ApiError:  # the client left
            run.cancel()
            raise
        except Exception as err:  # the program failed before any text: a clean error status
            raise upstream_error(err) from None
        except BaseException:  # the request itself was cancelled
            run.cancel()
            raise
        return StreamingResponse(self._events(run, shape, first[0], pieces), media_type="text/event-stream")

    async def _events(
        self, run: ProgramRun, shape: ResponseShape, first: str | None, pieces: AsyncIterator[str]
    ) -> AsyncIterator[str]:
        split = self.parser.stream(in_answer=run.in_answer)
        try:
            if shape.chat:
                yield sse(shape.chunk(first=True))
            async for text in _after(first, pieces):
                if piece := _piece(shape, *split.push(text)):
                    yield piece
            if piece := _piece(shape, *split.finish()):
                yield piece
            yield sse(shape.last_chunk(run.plan, run.outcome))
            if run.plan.include_usage:
                yield sse(shape.usage_chunk(run.outcome))
        except Exception as err:
            failure = upstream_error(err)
            yield sse(error_body(failure.status, failure.message))
        finally:
            run.cancel()  # no-op once it ended; the client gone: aborts its upstream requests
        yield sse("[DONE]")


def _piece(shape: ResponseShape, reasoning: str, content: str) -> str:
    """The SSE event of a piece of output ("" when nothing of it is shown)."""
    reasoning = reasoning if shape.show_reasoning else ""
    return sse(shape.chunk(reasoning=reasoning, content=content)) if reasoning or content else ""


async def _after(first: str | None, rest: AsyncIterator[str]) -> AsyncIterator[str]:
    if first is not None:
        yield first
        async for text in rest:
            yield text


async def _collect(run: ProgramRun, into: list[str]) -> None:
    async for text in run.pieces():
        into.append(text)
