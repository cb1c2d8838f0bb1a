"""Drives an :class:`Engine` from a background thread for the HTTP server.

Requests are submitted from the asyncio side; the thread steps the engine while work
is pending and pushes each request's newly *verified* tokens (and its end) to that
request's asyncio queue. The engine is touched only under one lock.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import dataclass

from reasonserve.engine import Engine, RequestOutput, SamplingParams

__all__ = ["EngineRunner", "Event"]


@dataclass(frozen=True)
class Event:
    tokens: list[int]  # new verified tokens
    finished: RequestOutput | None = None


class EngineRunner:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue, list[int]]] = {}
        self._ids = itertools.count()
        self._stop = False
        self.completed = 0
        self._thread = threading.Thread(target=self._loop, name="reasonserve-engine", daemon=True)
        self._thread.start()

    def submit(self, prompt, params: SamplingParams) -> tuple[str, asyncio.Queue]:
        """Queue a request (ValueError for bad ones); returns its id and event queue."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        with self._work:
            rid = self.engine.add_request(prompt, params, request_id=f"cmpl-{next(self._ids)}")
            self._streams[rid] = (loop, queue, [])
            self._work.notify()
        return rid, queue

    def abort(self, request_id: str) -> None:
        with self._lock:
            if request_id in self._streams:
                self._streams.pop(request_id)
                self.engine.abort(request_id)

    def stats(self) -> dict:
        with self._lock:
            return {"running": len(self.engine.running), "waiting": len(self.engine.waiting),
                    "completed": self.completed, **self.engine.stats}  # fmt: skip

    def close(self) -> None:
        with self._work:
            self._stop = True
            self._work.notify()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while True:
            with self._work:
                while not self._stop and not self.engine.has_unfinished():
                    self._work.wait()
                if self._stop:
                    return
                finished = self.engine.step()
                self._publish(finished)

    def _publish(self, finished: list[RequestOutput]) -> None:
        for seq in self.engine.running:
            stream = self._streams.get(seq.request_id)
            if stream is not None:
                self._push(stream, seq.verified_output)
        for out in finished:
            stream = self._streams.pop(out.request_id, None)
            if stream is not None:
                self._push(stream, out.token_ids, out)
                self.completed += 1

    @staticmethod
    def _push(stream, tokens: list[int], finished: RequestOutput | None = None) -> None:
        loop, queue, sent = stream
        new = tokens[len(sent) :]
        sent.extend(new)
        if new or finished is not None:
            loop.call_soon_threadsafe(queue.put_nowait, Event(new, finished))
