"""One HTTP request's engine requests (its choices), from submission to the last event.

:class:`Generation` submits a :class:`Plan`'s jobs to the runner, all reporting to one
queue, and turns engine events into per-choice text pieces (:class:`ChoiceState`). A
choice that hits a stop string is finished here and its engine request aborted;
``close()`` aborts whatever has not finished (client gone, error, shutdown).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from reasonserve.serve.metrics import ServerMetrics
from reasonserve.serve.runner import EngineRunner, Event
from reasonserve.serve.sampling import Capacity, Job, Plan
from reasonserve.serve.text import ChoiceText

__all__ = ["ChoiceState", "Generation"]


class ChoiceState:
    def __init__(self, job: Job, plan: Plan, cap: Capacity) -> None:
        self.index, self.engine_id, self.prompt_ids = (
            job.index,
            f"{plan.response_id}-{job.index}",
            job.prompt_ids,
        )
        self.text = ChoiceText(cap.tokenizer, plan.stop, include_stop=plan.include_stop)
        self._hidden, self._eos = plan.hidden_ids, cap.eos_token_ids
        self.token_ids: list[int] = []
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None
        self.error: str | None = None
        self.first_token_s: float | None = None
        self.ttfat_s: float | None = None
        self.num_cached_tokens = 0  # prompt tokens the engine's prefix cache served

    def apply(self, event: Event) -> str:
        """Take one engine event; return the text now safe to send."""
        if event.tokens and self.first_token_s is None:
            self.first_token_s = time.monotonic()
        self.token_ids += event.tokens
        if event.error is not None:
            self.finish_reason, self.error = "error", event.error
            return ""
        out = event.finished
        if out is None:
            piece = self.text.push(event.tokens)
            if self.text.stop_hit is not None:
                self.finish_reason, self.stop_reason = "stop", self.text.stop_hit
            return piece
        visible = event.tokens
        last = out.token_ids[-1] if out.token_ids else None
        ended_by_token = out.finish_reason == "stop" and last is not None and visible and visible[-1] == last
        if ended_by_token and last in self._hidden:
            visible = visible[:-1]  # an eos / stop token id is not text
        piece = self.text.push(visible)
        piece += self.text.finish() if self.text.stop_hit is None else ""
        self.ttfat_s = out.metrics.ttfat_s
        self.num_cached_tokens = out.metrics.num_cached_tokens
        if self.text.stop_hit is not None:  # also when the flushed tail held the stop string
            self.finish_reason, self.stop_reason = "stop", self.text.stop_hit
        else:
            self.finish_reason = out.finish_reason
            self.stop_reason = last if ended_by_token and last not in self._eos else None
        return piece


class Generation:
    def __init__(self, runner: EngineRunner, plan: Plan, cap: Capacity, metrics: ServerMetrics) -> None:
        self.runner, self.plan, self.metrics = runner, plan, metrics
        self.arrival_s = time.monotonic()
        self.created = int(time.time())
        self.choices = {c.engine_id: c for c in (ChoiceState(job, plan, cap) for job in plan.jobs)}
        self._jobs = {f"{plan.response_id}-{job.index}": job for job in plan.jobs}
        self._queue: asyncio.Queue = asyncio.Queue()
        self._submitted: list[str] = []

    async def start(self) -> None:
        try:
            for engine_id, job in self._jobs.items():
                self._submitted.append(engine_id)
                await self.runner.submit(job.prompt_ids, job.params, engine_id, self._queue)
        except BaseException:
            self.close()
            raise

    async def updates(self) -> AsyncIterator[tuple[ChoiceState, str, list[int]]]:
        """(choice, new text, new token ids) until every choice has finished. Events that
        queued up while the consumer was busy are merged: one update per choice."""
        pending = sum(c.finish_reason is None for c in self.choices.values())
        while pending:
            events = [await self._queue.get()]
            while not self._queue.empty():
                events.append(self._queue.get_nowait())
            merged: dict[str, tuple[str, list[int]]] = {}
            for event in events:
                choice = self.choices.get(event.request_id)
                if choice is None or choice.finish_reason is not None:
                    continue  # events after a stop-string abort
                piece, ids = merged.get(event.request_id, ("", []))
                merged[event.request_id] = (piece + choice.apply(event), ids + event.tokens)
                if choice.finish_reason is not None:
                    pending -= 1
                    self._ended(choice, aborted=event.finished is None and event.error is None)
            for engine_id, (piece, ids) in merged.items():
                yield self.choices[engine_id], piece, ids

    def close(self) -> None:
        """Abort every choice that has not finished (idempotent)."""
        for engine_id in self._submitted:
            if self.choices[engine_id].finish_reason is None:
                self.runner.abort(engine_id)
                self.choices[engine_id].finish_reason = "abort"
                self._observe(self.choices[engine_id])

    def _ended(self, choice: ChoiceState, *, aborted: bool) -> None:
        if aborted:  # finished here by a stop string: the engine request is still running
            self.runner.abort(choice.engine_id)
        self._observe(choice)

    def _observe(self, c: ChoiceState) -> None:
        now = time.monotonic()
        ttft = None if c.first_token_s is None else c.first_token_s - self.arrival_s
        self.metrics.observe_choice(
            c.finish_reason or "abort",
            len(c.prompt_ids),
            len(c.token_ids),
            ttft,
            now - self.arrival_s,
            c.ttfat_s,
        )
