"""Drives an :class:`Engine` from one supervised background thread.

Only the engine thread touches the engine. The asyncio side hands it commands through
an inbox (a deque under a lock held for microseconds, never during a step): ``add``
(answered through a future: accepted, or a 400 with the engine's message) and
``abort``. After every step the thread sends each live request's newly *verified*
tokens, and its end, to that request's asyncio queue, one ``call_soon_threadsafe``
per step.

Supervision: an exception from ``engine.step()`` fails the live requests (each client
gets the error) and aborts them; the loop goes on. If the engine cannot be brought back
to an empty state, or anything else escapes, the thread records the error, fails every
waiting client, and calls ``on_exit`` so the server stops (and exits non-zero);
``alive`` turns False at once, so ``/health`` fails.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from reasonserve.core.errors import UnknownRequestError
from reasonserve.engine import Engine, RequestOutput, SamplingParams
from reasonserve.engine.logprobs import TokenLogprobs
from reasonserve.serve.errors import ApiError

__all__ = ["EngineRunner", "Event"]

_log = logging.getLogger("reasonserve.serve")


@dataclass(frozen=True)
class Event:
    request_id: str
    tokens: list[int]  # new verified tokens
    finished: RequestOutput | None = None
    error: str | None = None  # the request failed (engine error, shutdown)
    # of ``tokens``, when the request asked (None: a token committed elsewhere, of a request
    # resumed from committed tokens; those tokens were reported where they were sampled)
    logprobs: Sequence[TokenLogprobs | None] | None = None
    status: int = 500  # HTTP status of ``error``: 503 when the server is shutting down


@dataclass
class _Live:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue
    sent: int = 0
    logprobs: bool = False


@dataclass
class _Add:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    live: _Live
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


class EngineRunner:
    def __init__(
        self, engine: Engine, *, max_queued_requests: int = 256, on_exit: Callable[[], None] | None = None
    ) -> None:
        self.engine = engine
        self.max_queued_requests = max_queued_requests
        self.error: BaseException | None = None  # why the engine thread died
        self.snapshot = engine.metrics()  # a frozen EngineMetrics, replaced after each step
        self._on_exit = on_exit
        self._cv = threading.Condition()
        self._inbox: deque = deque()
        self._num_live = 0  # accepted and not yet finished/aborted; under _cv
        self._closing = False
        self._live: dict[str, _Live] = {}  # engine thread only
        self._thread = threading.Thread(target=self._run, name="reasonserve-engine", daemon=True)
        self._thread.start()

    # asyncio side -------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.error is None and not self._closing and self._thread.is_alive()

    @property
    def num_live(self) -> int:
        return self._num_live

    async def submit(
        self, prompt_ids: list[int], params: SamplingParams, request_id: str, queue: asyncio.Queue
    ) -> None:
        """:meth:`submit_all` of one request."""
        await self.submit_all([(prompt_ids, params, request_id)], queue)

    async def submit_all(
        self, requests: list[tuple[list[int], SamplingParams, str]], queue: asyncio.Queue
    ) -> None:
        """Queue requests whose events go to ``queue``, room for all of them or none.
        Raises :class:`ApiError`: 400 when they could never fit the queue or the engine
        rejects one, 429 when the queue is full now, 503 when the engine is not running.
        If one is rejected, or the caller is cancelled while waiting, all are aborted."""
        loop = asyncio.get_running_loop()
        adds = [
            _Add(rid, ids, p, _Live(loop, queue, logprobs=p.logprobs is not None)) for ids, p, rid in requests
        ]
        with self._cv:
            if not self.alive:
                raise ApiError(503, "the engine is not running")
            if len(adds) > self.max_queued_requests:
                raise ApiError(
                    400,
                    f"this request needs {len(adds)} engine requests (prompts x n) but the server "
                    f"queues at most {self.max_queued_requests}",
                    param="n",
                )
            if self._num_live + len(adds) > self.max_queued_requests:
                raise ApiError(
                    429,
                    f"too many queued requests (limit {self.max_queued_requests}); retry later",
                    headers={"Retry-After": "1"},
                )
            self._num_live += len(adds)
            self._inbox.extend(adds)
            self._cv.notify()
        try:
            for add in adds:
                await asyncio.wrap_future(add.future)
        except BaseException:
            for add in adds:  # after the adds in the inbox; a no-op for a rejected one
                self.abort(add.request_id)
            raise

    def abort(self, request_id: str) -> None:
        """Abort a request (no-op once it finished); never blocks on the engine."""
        with self._cv:
            self._inbox.append(request_id)
            self._cv.notify()

    def stop(self) -> None:
        """Fail what is still running (503 "the server is shutting down": streams get an
        error event) and let the thread end; returns at once."""
        with self._cv:
            self._closing = True
            self._cv.notify()

    def close(self, timeout_s: float = 10.0) -> None:
        """:meth:`stop`, then wait for the thread."""
        self.stop()
        self._thread.join(timeout=timeout_s)

    # engine thread --------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while self._serve_once():
                pass
        except BaseException as err:  # supervision: record, fail clients, stop the server
            self.error = err
            _log.exception("the engine loop died")
        finally:
            self._fail_live(
                "the engine stopped" if self.error else "the server is shutting down",
                abort=False,
                status=500 if self.error else 503,
            )
            self._fail_inbox()
            if self.error is not None and self._on_exit is not None:
                self._on_exit()

    def _serve_once(self) -> bool:
        with self._cv:
            while not self._inbox and not self._closing and not self.engine.has_unfinished():
                self._cv.wait()
            commands = list(self._inbox)
            self._inbox.clear()
            closing = self._closing
        for command in commands:
            self._add(command) if isinstance(command, _Add) else self._abort(command)
        if closing:
            self._fail_live("the server is shutting down", status=503)
            return False
        if self.engine.has_unfinished():
            self._step()
        self.snapshot = self.engine.metrics()
        return True

    def _add(self, add: _Add) -> None:
        try:
            self.engine.add_request(add.prompt_ids, add.params, request_id=add.request_id)
        except ValueError as err:  # InvalidArgumentError: a 400 for this request only
            self._forget(None)
            add.future.set_exception(ApiError(400, str(err)))
            return
        except Exception as err:  # an engine bug: this request fails, the loop goes on
            _log.exception("engine.add_request() raised")
            self._forget(None)
            add.future.set_exception(
                ApiError(500, f"the engine failed to accept the request: {type(err).__name__}")
            )
            return
        self._live[add.request_id] = add.live
        add.future.set_result(None)

    def _abort(self, request_id: str) -> None:
        if request_id in self._live:
            self._engine_abort(request_id)
            self._forget(request_id)

    def _step(self) -> None:
        try:
            finished = self.engine.step()
        except Exception as err:  # fail the affected requests, keep serving
            _log.exception("engine.step() raised; failing the live requests")
            self._fail_live(f"the engine failed while serving this request: {type(err).__name__}: {err}")
            if self.engine.has_unfinished():
                raise RuntimeError("the engine could not be brought back to an empty state") from err
            return
        self._publish(finished)

    def _publish(self, finished: list[RequestOutput]) -> None:
        done = {out.request_id: out for out in finished}
        batches: dict[asyncio.AbstractEventLoop, list] = defaultdict(list)
        for rid, live in list(self._live.items()):
            out = done.pop(rid, None)
            tokens = out.token_ids if out is not None else self._verified(rid)
            new = list(tokens[live.sent :])
            logprobs = self._logprobs(rid, live, out) if new and live.logprobs else None
            live.sent += len(new)
            if out is not None:
                error = (
                    (getattr(out, "error", None) or "the engine failed")
                    if out.finish_reason == "error"
                    else None
                )
                batches[live.loop].append((live.queue, Event(rid, new, out, error, logprobs)))
                self._forget(rid)
            elif new:
                batches[live.loop].append((live.queue, Event(rid, new, logprobs=logprobs)))
        for loop, batch in batches.items():
            _send(loop, batch)

    def _fail_live(self, message: str, *, abort: bool = True, status: int = 500) -> None:
        batches: dict[asyncio.AbstractEventLoop, list] = defaultdict(list)
        for rid, live in list(self._live.items()):
            if abort:
                self._engine_abort(rid)
            batches[live.loop].append((live.queue, Event(rid, [], None, message, status=status)))
            self._forget(rid)
        for loop, batch in batches.items():
            _send(loop, batch)

    def _fail_inbox(self) -> None:
        with self._cv:
            commands = list(self._inbox)
            self._inbox.clear()
        for command in commands:
            if isinstance(command, _Add):
                self._forget(None)
                command.future.set_exception(ApiError(503, "the engine is not running"))

    def _engine_abort(self, request_id: str) -> None:
        with contextlib.suppress(UnknownRequestError):  # it finished in the meantime
            self.engine.abort(request_id)

    def _logprobs(
        self, request_id: str, live: _Live, out: RequestOutput | None
    ) -> list[TokenLogprobs | None]:
        if out is not None:
            return list((out.logprobs or [])[live.sent :])
        try:
            return self.engine.verified_logprobs(request_id, live.sent)
        except UnknownRequestError:
            return []

    def _verified(self, request_id: str) -> list[int]:
        try:
            return self.engine.verified_tokens(request_id)
        except UnknownRequestError:
            return []

    def _forget(self, request_id: str | None) -> None:
        if request_id is not None:
            self._live.pop(request_id, None)
        with self._cv:
            self._num_live -= 1


def _send(loop: asyncio.AbstractEventLoop, batch: list) -> None:
    with contextlib.suppress(RuntimeError):  # a closed event loop: nobody is listening
        loop.call_soon_threadsafe(_deliver, batch)


def _deliver(batch: list) -> None:
    for queue, event in batch:
        queue.put_nowait(event)
