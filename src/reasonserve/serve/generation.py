"""One HTTP request's engine requests (its choices), from submission to the last event.

:class:`Generation` submits a :class:`Plan`'s jobs to the runner, all reporting to one
queue, and turns engine events into per-choice deltas (:class:`ChoiceState`). Tokens
are taken one at a time, so a choice that hits a stop string keeps exactly the tokens
up to the one that completed it (its count, ``token_ids`` and logprobs agree with its
text even when a verified window brings several tokens at once); the choice is
finished here and its engine request aborted. With a reasoning parser the visible
text is split into reasoning and content as it streams (``reasoning_parser.py``), and
reasoning tokens are counted by the tags' token ids. ``close()`` aborts whatever has
not finished (client gone, error, shutdown).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from reasonserve.engine.choice_text import ChoiceText
from reasonserve.engine.logprobs import TokenLogprobs
from reasonserve.serve.metrics import ServerMetrics
from reasonserve.serve.reasoning_parser import ReasoningStream, ReasoningTokenCounter
from reasonserve.serve.runner import EngineRunner, Event
from reasonserve.serve.sampling import Capacity, Job, Plan

__all__ = ["ChoiceDelta", "ChoiceState", "Generation"]


@dataclass
class ChoiceDelta:
    """What one update adds to a choice: visible text (split into reasoning and content
    when a parser runs; otherwise ``content`` is the text), token ids and logprobs."""

    text: str = ""
    reasoning: str = ""
    content: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprobs] = field(default_factory=list)

    def add(self, other: ChoiceDelta) -> None:
        self.text += other.text
        self.reasoning += other.reasoning
        self.content += other.content
        self.token_ids += other.token_ids
        self.logprobs += other.logprobs


class ChoiceState:
    def __init__(self, job: Job, plan: Plan, cap: Capacity, engine_id: str) -> None:
        self.index, self.engine_id, self.prompt_ids = job.index, engine_id, job.prompt_ids
        self.text = ChoiceText(cap.tokenizer, plan.stop, include_stop=plan.include_stop)
        self._hidden, self._eos = plan.hidden_ids, cap.eos_token_ids
        setup = plan.reasoning
        self._split: ReasoningStream | None = (
            None if setup is None else setup.parser.stream(in_answer=setup.in_answer)
        )
        self._counter = None
        if setup is not None and setup.tag_ids is not None:
            self._counter = ReasoningTokenCounter(*setup.tag_ids, in_answer=setup.in_answer)
        self.token_ids: list[int] = []
        self.logprobs: list[TokenLogprobs] = []
        self.reasoning_parts: list[str] = []
        self.content_parts: list[str] = []
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None
        self.error: str | None = None
        self.error_status = 500
        self.first_token_s: float | None = None
        self.ttfat_s: float | None = None
        self.num_cached_tokens = 0  # prompt tokens the engine's prefix cache served

    @property
    def reasoning_tokens(self) -> int:
        return 0 if self._counter is None else self._counter.reasoning_tokens

    def apply(self, event: Event) -> ChoiceDelta:
        """Take one engine event; return what is now safe to send."""
        if event.tokens and self.first_token_s is None:
            self.first_token_s = time.monotonic()
        if event.error is not None:
            self.token_ids += event.tokens
            self.finish_reason, self.error, self.error_status = "error", event.error, event.status
            return ChoiceDelta(token_ids=list(event.tokens))
        out = event.finished
        hidden_last = out is not None and self._ended_by_hidden_token(out)
        delta = ChoiceDelta()
        for i, token in enumerate(event.tokens):
            visible = not (hidden_last and i == len(event.tokens) - 1)
            delta.text += self.text.push([token] if visible else [])
            delta.token_ids.append(token)
            if event.logprobs is not None and i < len(event.logprobs):
                entry = event.logprobs[i]
                assert entry is not None  # only a request resumed from committed tokens has None
                delta.logprobs.append(entry)
            if self.text.stop_hit is not None:
                break  # tokens after the one that completed the stop string are not output
        if out is not None or self.text.stop_hit is not None:
            delta.text += self.text.finish()
            self._finish(out)
        self.token_ids += delta.token_ids
        self.logprobs += delta.logprobs
        if self._counter is not None:
            self._counter.push(delta.token_ids)
        self._split_text(delta, final=self.finish_reason is not None)
        return delta

    def _ended_by_hidden_token(self, out) -> bool:
        last = out.token_ids[-1] if out.token_ids else None
        return out.finish_reason == "stop" and last is not None and last in self._hidden

    def _finish(self, out) -> None:
        if self.text.stop_hit is not None:  # also when the flushed tail held the stop string
            self.finish_reason, self.stop_reason = "stop", self.text.stop_hit
        else:
            last = out.token_ids[-1] if out.token_ids else None
            ended_by_token = out.finish_reason == "stop" and last is not None
            self.finish_reason = out.finish_reason
            self.stop_reason = last if ended_by_token and last not in self._eos else None
        if out is not None:
            self.ttfat_s = out.metrics.ttfat_s
            self.num_cached_tokens = out.metrics.num_cached_tokens

    def _split_text(self, delta: ChoiceDelta, *, final: bool) -> None:
        if self._split is None:
            delta.content = delta.text
        else:
            delta.reasoning, delta.content = self._split.push(delta.text)
            if final:
                tail_reasoning, tail_content = self._split.finish()
                delta.reasoning += tail_reasoning
                delta.content += tail_content
        self.reasoning_parts.append(delta.reasoning)
        self.content_parts.append(delta.content)


class Generation:
    """``serial``: a number unique in this server, so engine ids never collide even when
    clients reuse a ``request_id`` (the response id is theirs; the engine's are ours)."""

    def __init__(
        self, runner: EngineRunner, plan: Plan, cap: Capacity, metrics: ServerMetrics, *, serial: int = 0
    ) -> None:
        self.runner, self.plan, self.metrics = runner, plan, metrics
        self.arrival_s = time.monotonic()
        self.created = int(time.time())
        states = [
            ChoiceState(job, plan, cap, f"{plan.response_id}-{serial}-{job.index}") for job in plan.jobs
        ]
        self.choices = {c.engine_id: c for c in states}
        self._jobs = [(c.engine_id, job) for c, job in zip(states, plan.jobs, strict=True)]
        self._queue: asyncio.Queue = asyncio.Queue()
        self._submitted: list[str] = []

    async def start(self) -> None:
        """Submit every choice at once (all or none; the runner aborts what it queued if
        one is refused or this task is cancelled). The ids are this server's own, so an
        abort can never reach another client's request."""
        await self.runner.submit_all(
            [(job.prompt_ids, job.params, rid) for rid, job in self._jobs], self._queue
        )
        self._submitted = [engine_id for engine_id, _ in self._jobs]

    async def updates(self) -> AsyncIterator[tuple[ChoiceState, ChoiceDelta]]:
        """(choice, delta) until every choice has finished. Events that queued up while
        the consumer was busy are merged: one update per choice."""
        pending = sum(c.finish_reason is None for c in self.choices.values())
        while pending:
            events = [await self._queue.get()]
            while not self._queue.empty():
                events.append(self._queue.get_nowait())
            merged: dict[str, ChoiceDelta] = {}
            for event in events:
                choice = self.choices.get(event.request_id)
                if choice is None or choice.finish_reason is not None:
                    continue  # events after a stop-string abort
                merged.setdefault(event.request_id, ChoiceDelta()).add(choice.apply(event))
                if choice.finish_reason is not None:
                    pending -= 1
                    self._ended(choice, aborted=event.finished is None and event.error is None)
            for engine_id, delta in merged.items():
                yield self.choices[engine_id], delta

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
