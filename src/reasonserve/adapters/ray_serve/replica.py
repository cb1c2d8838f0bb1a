"""One Ray Serve replica: one embedded engine, driven by the server's supervised
:class:`EngineRunner`, streaming each request's committed tokens as events.

Events (plain dicts): ``{"replica", "accepted": True}`` once the engine took the
request; ``{"replica", "tokens"}`` newly committed tokens (a migrated or resumed
request's earlier tokens are not sent again), with ``"logprobs"`` (one
:class:`~reasonserve.engine.logprobs.TokenLogprobs` per token) when the request asked
for them; ``"finish_reason"`` on the last one;
``{"replica", "error", "status"}`` when the engine rejected or failed the request (not
retried: the request itself is at fault or the engine said why); ``{"replica", "stay":
True}`` when Algorithm 2 kept the answering phase where it is. Closing a stream early
(the ingress migrated the request, or its client left) aborts the engine request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import torch
from ray import serve

from reasonserve.adapters.ray_serve.config import RayServeConfig
from reasonserve.adapters.ray_serve.job import Job
from reasonserve.adapters.ray_serve.stats import measure
from reasonserve.engine import Engine
from reasonserve.policies.pacer import TokenPacer
from reasonserve.serve.errors import ApiError
from reasonserve.serve.runner import EngineRunner, Event

__all__ = ["EngineReplica", "MigratableEngine"]


class MigratableEngine(Engine):
    """An engine that starts a request from committed tokens left for its id in
    ``committed`` (the runner's ``add_request`` call has no such argument)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.committed: dict[str, list[int]] = {}

    def add_request(self, prompt, params=None, request_id=None, **kwargs) -> str:
        committed = self.committed.pop(request_id, ()) if isinstance(request_id, str) else ()
        return super().add_request(prompt, params, request_id, committed_output=committed, **kwargs)


class EngineReplica:
    def __init__(self, config: RayServeConfig, engine_kwargs: dict | None = None) -> None:
        """``engine_kwargs``: passed to :meth:`Engine.from_pretrained` (e.g. a ``policy``
        object; benchmarks pass ``fast_path_fault`` to script phase lengths)."""
        torch.set_num_threads(config.torch_threads_per_replica)
        engine = MigratableEngine.from_pretrained(config.model, config.engine, **(engine_kwargs or {}))
        assert isinstance(engine, MigratableEngine)
        self.engine = engine
        self.runner = EngineRunner(self.engine, max_queued_requests=config.max_ongoing_requests)
        self.replica_id = serve.get_replica_context().replica_id.unique_id
        self.pacer, self.quantum_tokens = TokenPacer(config.tpot_s), config.quantum_tokens
        self._here: set[str] = set()  # requests streaming from this replica now

    async def generate(self, job: Job) -> AsyncIterator[dict]:
        """A new request (Algorithm 1 placed it here) or one resumed from committed tokens."""
        async for event in self._stream(job):
            yield event

    async def continue_answering(self, job: Job) -> AsyncIterator[dict]:
        """Algorithm 2 placed ``job``'s answering phase here: stay if it runs here, else
        take it over from its committed tokens (migration)."""
        if job.request_id in self._here:
            yield {"replica": self.replica_id, "stay": True}
            return
        async for event in self._stream(job):
            yield event

    def record_routing_stats(self) -> dict:
        return measure(self.engine, self.pacer, self.quantum_tokens).to_dict()

    def check_health(self) -> None:
        if not self.runner.alive:
            raise RuntimeError(f"the engine loop is not running: {self.runner.error!r}")

    async def _stream(self, job: Job) -> AsyncIterator[dict]:
        rid, queue = job.request_id, asyncio.Queue[Event]()
        if job.committed:
            self.engine.committed[rid] = list(job.committed)
        try:
            await self.runner.submit(list(job.prompt_ids), job.params, rid, queue)
        except ApiError as err:
            self.engine.committed.pop(rid, None)
            yield {"replica": self.replica_id, "error": err.message, "status": err.status}
            return
        self._here.add(rid)
        done, skip = False, len(job.committed)
        try:
            yield {"replica": self.replica_id, "accepted": True}
            while not done:
                event = await queue.get()
                cut, skip = skip, max(0, skip - len(event.tokens))  # committed tokens: sent before
                if event.error is not None:
                    done = True
                    yield {"replica": self.replica_id, "error": event.error, "status": 500}
                    return
                out: dict[str, object] = {"replica": self.replica_id, "tokens": event.tokens[cut:]}
                if event.logprobs is not None:
                    out["logprobs"] = list(event.logprobs[cut:])
                if event.finished is not None:
                    done, out["finish_reason"] = True, event.finished.finish_reason
                yield out
        finally:
            self._here.discard(rid)
            if not done:
                self.runner.abort(rid)

    def __del__(self) -> None:
        runner = getattr(self, "runner", None)
        if runner is not None:
            runner.close(timeout_s=1.0)
