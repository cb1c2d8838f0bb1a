"""Started requests of one program run: every one not finished is aborted on exit."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import replace

from reasonserve.clients.protocol import EngineClient, GenerateRequest, GenerateResult, ProbeResult
from reasonserve.programs.trace import ProgramError, ProgramResult, Trace

__all__ = ["InFlight", "run_guarded"]


class InFlight:
    def __init__(self, client: EngineClient, trace: Trace, prefix: str) -> None:
        self.client, self.trace = client, trace
        self._prefix = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self._n = 0
        self._tasks: dict[str, asyncio.Task] = {}

    def _id(self) -> str:
        self._n += 1
        return f"{self._prefix}-{self._n}"

    def generate(self, req: GenerateRequest) -> asyncio.Task[GenerateResult]:
        rid = req.request_id or self._id()
        self.trace.num_requests += 1
        return self._track(rid, self.client.generate(replace(req, request_id=rid)))

    def probe(self, prefix: str | Sequence[int], suffix: str, max_tokens: int) -> asyncio.Task[ProbeResult]:
        rid = self._id()
        self.trace.num_requests += 1
        return self._track(rid, self.client.probe(prefix, suffix, max_tokens, request_id=rid))

    def _track(self, rid: str, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks[rid] = task
        task.add_done_callback(lambda t: self._done(rid, t))
        return task

    def _done(self, rid: str, task: asyncio.Task) -> None:
        self._tasks.pop(rid, None)
        if task.cancelled():  # by us, or by the cancellation of the program awaiting it
            self.trace.num_aborted += 1

    async def cancel(self, task: asyncio.Task) -> None:
        """Abort one started request (no-op once it finished)."""
        for rid, t in list(self._tasks.items()):
            if t is task:
                await self._abort(rid, t)

    async def close(self) -> None:
        """Abort every request still running; wait until their tasks are done."""
        for rid, task in list(self._tasks.items()):
            await self._abort(rid, task)

    async def _abort(self, rid: str, task: asyncio.Task) -> None:
        if task.done():
            return
        task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.client.abort(rid), timeout=5.0)
        await asyncio.wait({task}, timeout=5.0)


async def run_guarded(name: str, body, trace: Trace, flight: InFlight | None) -> ProgramResult:
    """Run ``body()``; a failure raises ProgramError with the partial trace; every started
    request still running is aborted on the way out (cancellation included). ``flight``
    None: the program tracks no requests of its own (user programs, ``programs.base``)."""
    try:
        result = await body()
    except asyncio.CancelledError:
        trace.finish("cancelled")
        raise
    except Exception as err:
        trace.finish("error")
        raise ProgramError(f"{name} failed: {type(err).__name__}: {err}", trace) from err
    finally:
        if flight is not None:
            await flight.close()
    trace.finish(trace.exit or "finished")
    return result
