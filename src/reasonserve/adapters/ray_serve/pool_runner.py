"""The server's runner interface over a pool of Ray Serve replicas, so the OpenAI app of
:mod:`reasonserve.serve` (request models, validation, SSE streaming, stop strings,
errors) runs unchanged in the ingress.

``submit_all``/``abort``/``alive``/``num_live``/``snapshot``/``engine`` are what
:func:`reasonserve.serve.app.create_app` uses of an :class:`EngineRunner`; here each
request is a task running :meth:`PhaseAwareClient.run`, whose committed tokens become
the server's events. ``engine`` describes one replica (its tokenizer and limits: a
request must fit in one replica).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass, replace

from reasonserve.adapters.ray_serve.client import PhaseAwareClient, RequestFailedError
from reasonserve.adapters.ray_serve.job import Job
from reasonserve.core.phase import Phase
from reasonserve.engine import EngineConfig, RequestOutput, SamplingParams
from reasonserve.engine.metrics import EngineMetrics
from reasonserve.engine.sequence import RequestMetrics
from reasonserve.serve.errors import ApiError
from reasonserve.serve.runner import Event

__all__ = ["EngineInfo", "PoolRunner"]


@dataclass(frozen=True)
class EngineInfo:
    """What the app reads of ``runner.engine``: one replica's tokenizer and limits."""

    tokenizer: object | None
    max_model_len: int
    config: EngineConfig
    vocab_size: int | None = None


class PoolRunner:
    def __init__(self, client: PhaseAwareClient, engine: EngineInfo, *, max_queued_requests: int = 256,
                 seed: int = 0) -> None:  # fmt: skip
        self.client, self.engine = client, engine
        self.max_queued_requests = max_queued_requests
        self.error: BaseException | None = None
        self._tasks: dict[str, asyncio.Task] = {}
        self._seeds = random.Random(seed)  # seeds for requests that bring none: fixed before placement
        self._finished = 0

    @property
    def alive(self) -> bool:
        return True

    @property
    def num_live(self) -> int:
        return len(self._tasks)

    @property
    def snapshot(self) -> EngineMetrics:
        cfg = self.engine.config
        return EngineMetrics(len(self._tasks), 0, 0, cfg.num_blocks, 0, 0, self._finished, 0, 0, 0)

    async def submit_all(self, requests: list[tuple[list[int], SamplingParams, str]],
                         queue: asyncio.Queue) -> None:  # fmt: skip
        """Start every request or none (the queue cap as :meth:`EngineRunner.submit_all`)."""
        if len(requests) > self.max_queued_requests:
            raise ApiError(400, f"this request needs {len(requests)} engine requests but the server queues "
                                f"at most {self.max_queued_requests}", param="n")  # fmt: skip
        if len(self._tasks) + len(requests) > self.max_queued_requests:
            raise ApiError(429, f"too many queued requests (limit {self.max_queued_requests}); retry later",
                           headers={"Retry-After": "1"})  # fmt: skip
        for prompt_ids, params, request_id in requests:
            await self.submit(prompt_ids, params, request_id, queue)

    async def submit(self, prompt_ids: list[int], params: SamplingParams, request_id: str,
                     queue: asyncio.Queue) -> None:  # fmt: skip
        if len(self._tasks) >= self.max_queued_requests:
            raise ApiError(429, f"too many queued requests (limit {self.max_queued_requests}); retry later",
                           headers={"Retry-After": "1"})  # fmt: skip
        if params.seed is None:
            params = replace(params, seed=self._seeds.getrandbits(63))
        job = Job(request_id, tuple(prompt_ids), params, arrival_s=time.time())
        task = asyncio.get_running_loop().create_task(self._run(job, queue))
        self._tasks[request_id] = task

    def abort(self, request_id: str) -> None:
        task = self._tasks.get(request_id)
        if task is not None:
            task.cancel()

    async def _run(self, job: Job, queue: asyncio.Queue) -> None:
        rid, sent = job.request_id, [0]

        wants = job.params.logprobs is not None

        def send(tokens: list[int], logprobs: list) -> None:
            sent[0] += len(tokens)
            queue.put_nowait(Event(rid, tokens, logprobs=logprobs if wants else None))

        try:
            out = await self.client.run(job, send)
            metrics = RequestMetrics(out.arrival_s, out.token_times[0] if out.token_times else None,
                                     *_answer_times(out), finished_s=time.monotonic(),
                                     num_output_tokens=len(out.token_ids))  # fmt: skip
            done = RequestOutput(rid, list(job.prompt_ids), out.token_ids, out.finish_reason, Phase.FINISHED,
                                 metrics, None, None, None)  # fmt: skip
            last = out.logprobs[sent[0] :] if wants else None
            queue.put_nowait(Event(rid, out.token_ids[sent[0] :], done, logprobs=last))
        except asyncio.CancelledError:
            pass  # aborted: the client stopped listening
        except RequestFailedError as err:
            queue.put_nowait(Event(rid, [], None, str(err)))
        except Exception as err:  # a replica failure beyond retries, or a routing failure
            queue.put_nowait(Event(rid, [], None, f"{type(err).__name__}: {err}"))
        finally:
            self._finished += 1
            with contextlib.suppress(KeyError):
                del self._tasks[rid]


def _answer_times(out) -> tuple[float | None, float | None]:
    i = out.eot_index
    if i is None:
        return None, None
    after = out.token_times[i + 1] if i + 1 < len(out.token_times) else None
    return out.token_times[i], after
