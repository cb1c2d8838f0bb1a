"""An :class:`EngineClient` over an in-process :class:`~reasonserve.engine.Engine`.

One driver task per client runs ``engine.step()`` in a worker thread while requests
are live; requests are added and aborted on the event loop *between* steps (at once
when no step runs, else right after it), so the engine is never touched by two threads
at once. Use one client per engine; ``aclose()`` aborts what is live and waits.
Stop strings are matched on the decoded text (``ChoiceText``: a piece is sent only once
it cannot start a stop string); the request is aborted at the match.
Probes are ordinary greedy requests over ``prefix + suffix``: the engine's prefix cache
serves the prefix's full blocks (``ProbeResult.num_computed_tokens`` says how many
tokens were computed).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from reasonserve.clients.errors import ClientError, UnsupportedError
from reasonserve.clients.protocol import Capabilities, Chunk, GenerateRequest, GenerateResult, ProbeResult
from reasonserve.core.errors import InvalidArgumentError, UnknownRequestError
from reasonserve.engine import Engine, RequestOutput, SamplingParams
from reasonserve.engine.choice_text import ChoiceText

__all__ = ["EmbeddedClient"]


@dataclass
class _Live:
    queue: asyncio.Queue
    sent: int = 0


@dataclass
class _Add:
    rid: str
    prompt: list[int]
    params: SamplingParams
    live: _Live
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class EmbeddedClient:
    """``EmbeddedClient(engine)``: the engine must have a tokenizer for text prompts."""

    def __init__(self, engine: Engine, *, scorer: Callable | None = None) -> None:
        if not isinstance(engine, Engine):
            raise InvalidArgumentError("EmbeddedClient needs a reasonserve Engine")
        self.engine, self._scorer = engine, scorer
        self._commands: list = []
        self._live: dict[str, _Live] = {}
        self._driver: asyncio.Task | None = None
        self._stepping = False

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(token_ids=True, priority=True, seed=True, abort=True,
                            score=self._scorer is not None, cached_tokens=True)  # fmt: skip

    # generation --------------------------------------------------------------------------
    async def generate(self, req: GenerateRequest) -> GenerateResult:
        start = time.perf_counter()
        text, reason, out = "", "abort", None
        ids: list[int] = []
        rid = req.request_id or f"rs-{uuid.uuid4().hex}"
        async for chunk, final in self._run(req, rid):
            text, ids = text + chunk.text, ids + list(chunk.token_ids or ())
            reason, out = chunk.finish_reason or reason, final or out
        prompt = tuple(out.prompt_token_ids) if out is not None else None
        cached = out.metrics.num_cached_tokens if out is not None else None
        return GenerateResult(rid, text, tuple(ids), reason, prompt, None if prompt is None else len(prompt),
                              cached, time.perf_counter() - start)  # fmt: skip

    async def stream(self, req: GenerateRequest) -> AsyncIterator[Chunk]:
        async for chunk, _ in self._run(req, req.request_id or f"rs-{uuid.uuid4().hex}"):
            yield chunk

    async def _run(self, req: GenerateRequest, rid: str) -> AsyncIterator[tuple[Chunk, RequestOutput | None]]:
        prompt = self._encode(req.prompt)
        params = SamplingParams(max_tokens=req.max_tokens, temperature=float(req.temperature),
                                top_p=float(req.top_p), seed=req.seed, priority=req.priority)  # fmt: skip
        live = _Live(asyncio.Queue())
        text = ChoiceText(self.engine.tokenizer, req.stop)
        finished = False
        try:
            await self._submit(_Add(rid, prompt, params, live))
            while not finished:
                event = await live.queue.get()
                if isinstance(event, Exception):
                    raise ClientError(f"the engine failed request {rid}: {event}")
                tokens, out = event
                piece = text.push(tokens)
                if out is not None or text.stop_hit is not None:
                    piece += text.finish()
                reason = "stop" if text.stop_hit is not None else _finish(out)
                finished = reason is not None
                yield Chunk(rid, piece, tuple(tokens), reason), out
        finally:
            if not finished:  # cancelled or closed early: abort (after the running step)
                self._command(("abort", rid, None))
            elif rid in self._live:  # ended here by a stop string: wait until it is aborted
                aborted = asyncio.get_running_loop().create_future()
                self._command(("abort", rid, aborted))
                await aborted

    def _encode(self, prompt: str | tuple[int, ...]) -> list[int]:
        if not isinstance(prompt, str):
            return list(prompt)
        if self.engine.tokenizer is None:
            raise InvalidArgumentError("text prompts need an engine with a tokenizer; pass token ids")
        return self.engine.tokenizer.encode(prompt)

    async def probe(
        self, prefix: str | Sequence[int], suffix: str, max_tokens: int, *, request_id: str | None = None
    ) -> ProbeResult:
        prompt = prefix + suffix if isinstance(prefix, str) else (*prefix, *self._encode(suffix))
        out = await self.generate(GenerateRequest(prompt, max_tokens=max_tokens, temperature=0.0,
                                                  request_id=request_id))  # fmt: skip
        n = out.num_prompt_tokens
        computed = None if n is None or out.num_cached_tokens is None else n - out.num_cached_tokens
        return ProbeResult(out.text, out.token_ids, out.finish_reason, n, computed, out.elapsed_s)

    async def abort(self, request_id: str) -> None:
        self._command(("abort", request_id, None))

    async def score(self, prompt: str, responses: Sequence[str]) -> list[float]:
        if self._scorer is None:
            raise UnsupportedError("this client has no reward model (pass EmbeddedClient(scorer=...))")
        return list(await self._scorer(prompt, list(responses)))

    # the driver ------------------------------------------------------------------------
    async def _submit(self, add: _Add) -> None:
        self._command(add)
        await add.done

    def _command(self, command) -> None:
        """Apply now when no step is running (the loop thread owns the engine then);
        otherwise queue it for the driver, which applies it right after the step."""
        if self._stepping:
            self._commands.append(command)
        else:
            self._apply(command)
        if self.engine.has_unfinished() and (self._driver is None or self._driver.done()):
            self._driver = asyncio.ensure_future(self._drive())

    async def aclose(self) -> None:
        """Abort every live request and wait for the driver to stop."""
        for rid in list(self._live):
            self._command(("abort", rid, None))
        if self._driver is not None:
            await self._driver

    async def _drive(self) -> None:
        while self.engine.has_unfinished():
            self._stepping = True
            try:
                outs = await asyncio.to_thread(self.engine.step)
            except Exception as err:  # fail every live request; the engine is left to its owner
                for live in self._live.values():
                    live.queue.put_nowait(err)
                self._live.clear()
                for rid in list(self.engine.scheduler.by_id):
                    self._abort(rid)
                outs = []
            finally:
                self._stepping = False
            self._publish(outs)
            commands, self._commands = self._commands, []
            for command in commands:
                self._apply(command)

    def _apply(self, command) -> None:
        if isinstance(command, _Add):
            try:
                self.engine.add_request(command.prompt, command.params, request_id=command.rid)
            except Exception as err:
                if not command.done.done():
                    command.done.set_exception(err)
                return
            self._live[command.rid] = command.live
            if not command.done.done():
                command.done.set_result(None)
        else:
            _, rid, done = command
            self._abort(rid)
            if done is not None and not done.done():
                done.set_result(None)

    def _abort(self, rid: str) -> None:
        live = self._live.pop(rid, None)
        with contextlib.suppress(UnknownRequestError):
            out = self.engine.abort(rid)
            if live is not None:
                live.queue.put_nowait((out.token_ids[live.sent :], out))

    def _publish(self, outs: list[RequestOutput]) -> None:
        done = {o.request_id: o for o in outs}
        for rid, live in list(self._live.items()):
            out = done.get(rid)
            tokens = out.token_ids if out is not None else self.engine.verified_tokens(rid)
            new = tokens[live.sent :]
            live.sent += len(new)
            if out is not None:
                self._live.pop(rid)
            if new or out is not None:
                live.queue.put_nowait((new, out))


def _finish(out: RequestOutput | None) -> str | None:
    return None if out is None else (out.finish_reason or "stop")
