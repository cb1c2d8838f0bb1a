"""One program's view of the upstream: an :class:`~reasonserve.clients.EngineClient` whose
every request carries the program's current priority and is timed into the metrics.

The programs run on it unchanged; aborts (early exit, client gone, errors) go straight
to the shared :class:`~reasonserve.clients.http.HTTPClient`, which closes the request's
connection (the upstream aborts it) and calls the host's abort endpoint where it has one.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

from reasonserve.clients.errors import UnsupportedError
from reasonserve.clients.http import HTTPClient
from reasonserve.clients.protocol import Capabilities, Chunk, GenerateRequest, GenerateResult, ProbeResult
from reasonserve.gateway.metrics import GatewayMetrics
from reasonserve.gateway.scheduling import ProgramScheduler, ProgramTicket

__all__ = ["ProgramClient"]


class ProgramClient:
    def __init__(
        self, http: HTTPClient, scheduler: ProgramScheduler, ticket: ProgramTicket, metrics: GatewayMetrics
    ) -> None:
        self._http, self._scheduler, self._ticket, self._metrics = http, scheduler, ticket, metrics

    @property
    def capabilities(self) -> Capabilities:
        return self._http.capabilities

    def _priority(self) -> int:
        return self._scheduler.priority(self._ticket)

    async def generate(self, req: GenerateRequest) -> GenerateResult:
        start = time.perf_counter()
        try:
            return await self._http.generate(replace(req, priority=self._priority()))
        finally:
            self._metrics.upstream.observe(time.perf_counter() - start)

    async def stream(self, req: GenerateRequest) -> AsyncIterator[Chunk]:
        start = time.perf_counter()
        try:
            async for chunk in self._http.stream(replace(req, priority=self._priority())):
                yield chunk
        finally:
            self._metrics.upstream.observe(time.perf_counter() - start)

    async def probe(
        self, prefix: str | Sequence[int], suffix: str, max_tokens: int, *, request_id: str | None = None
    ) -> ProbeResult:
        start = time.perf_counter()
        try:
            return await self._http.probe(
                prefix, suffix, max_tokens, request_id=request_id, priority=self._priority()
            )
        finally:
            self._metrics.upstream.observe(time.perf_counter() - start)

    async def encode(self, text: str) -> tuple[int, ...]:
        return await self._http.encode(text)

    async def abort(self, request_id: str) -> None:
        await self._http.abort(request_id)

    async def score(self, prompt: str, responses: Sequence[str]) -> list[float]:
        raise UnsupportedError("the gateway's programs use no reward model")
