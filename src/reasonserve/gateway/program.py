"""One request's program on the upstream, producing the output text as a model would.

Thinking, then answering:

1. **Thinking** (``think``: one streamed request; ``cot``: chunks with probes). The
   upstream stops at the end-of-thinking tag (a stop string) or at the thinking budget.
   An early exit closes the thinking and answers with the agreed answer (the CoT
   program's ``**Final Answer** \\boxed{...}`` text): the output ends there.
2. **Answering**, when the thinking ended or hit its budget (vLLM's
   ``thinking_token_budget``): one streamed request continues the prompt, the reasoning
   and the tag (added unless the upstream returned its ids), for what is left of
   ``max_tokens``, with the client's stop strings. A thinking pass that ended on its own
   counts as closed whether the tag or an end-of-sequence stopped it: hosts differ in
   whether a stop string's token ids are returned, so they cannot tell the two apart;
   either way the model is asked for its answer.

Self-consistency (``sc``) runs its samples (each a whole output) and returns the
majority sample's text. The text arrives in order through :meth:`ProgramRun.pieces`,
ahead of :class:`Outcome`, the counts the response reports.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from reasonserve.certainindex import extract_answer
from reasonserve.clients.errors import HostError
from reasonserve.clients.protocol import GenerateRequest, GenerateResult
from reasonserve.gateway.options import ProgramPlan
from reasonserve.gateway.upstream import ProgramClient
from reasonserve.programs import Trace

__all__ = ["Outcome", "ProgramRun", "ProgramTimeoutError"]

_DONE = object()
_EXITS = {"denied": "early"}  # the self-consistency program's word for a certainty stop


class ProgramTimeoutError(TimeoutError):
    """The program did not end within the gateway's ``program_timeout_s``."""


@dataclass
class Outcome:
    """What the program did. Token counts are token ids where the upstream returns them,
    else words (text-only upstreams). ``completion_tokens``: the model's tokens in the
    returned output (an early exit's closing text is the gateway's); ``reasoning_tokens``:
    those before the end-of-thinking tag (None where unknown: a self-consistency
    sample's split)."""

    program: str
    exit: str = "finished"
    answer: str | None = None
    certainty: float | None = None
    finish_reason: str = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int | None = 0
    program_tokens: int = 0
    probe_tokens: int = 0
    num_probes: int = 0
    probe_prompt_tokens_computed: int | None = None
    tokens_saved: int = 0
    samples: list[dict] = field(default_factory=list)


class ProgramRun:
    """Runs ``plan`` for ``prompt`` (text, or token ids) on ``client``. ``think_end``: the
    end-of-thinking tag, ``think_end_ids`` its token ids (token-id prompts);
    ``in_answer``: the prompt already closed the thinking (no thinking phase).
    ``on_done(run)``: called once the program has ended, its upstream requests aborted
    (whoever ended it). :meth:`start`, then read :meth:`pieces`; :meth:`cancel` ends it."""

    def __init__(
        self,
        plan: ProgramPlan,
        prompt: str | tuple[int, ...],
        client: ProgramClient,
        trace: Trace,
        *,
        think_end: str,
        think_end_ids: tuple[int, ...] = (),
        in_answer: bool = False,
        timeout_s: float = 3600.0,
        on_done: Callable[[ProgramRun], None] | None = None,
    ) -> None:
        self.plan, self.prompt, self.client, self.trace = plan, prompt, client, trace
        self.think_end, self.think_end_ids = think_end, tuple(think_end_ids)
        self.in_answer, self.timeout_s, self.on_done = in_answer, timeout_s, on_done
        self.use_ids = not isinstance(prompt, str)
        self.outcome = Outcome(plan.kind, prompt_tokens=len(prompt) if self.use_ids else 0)
        self.started_s = time.perf_counter()
        self._queue: asyncio.Queue = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self._text: list[str] = []  # the reasoning, as taken
        self._ids: list[int] = []

    # driving ------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.ensure_future(self._main())

    async def pieces(self) -> AsyncIterator[str]:
        """The output text in order; raises the program's error (ProgramError, ClientError,
        ProgramTimeoutError) where it failed. Pieces that queued up while the reader was
        busy come as one (a loaded gateway sends fewer, larger stream chunks)."""
        item = None
        while True:
            if item is None:
                item = await self._queue.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            texts, item = [item], None
            while item is None and not self._queue.empty():
                item = self._queue.get_nowait()
                if isinstance(item, str):
                    texts.append(item)
                    item = None
            yield "".join(texts)

    def cancel(self) -> None:
        """End the program if it still runs (its upstream requests are aborted as it ends)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def wait(self) -> None:
        """Until the program has ended (after :meth:`cancel`: its aborts done)."""
        if self._task is not None:
            await asyncio.wait({self._task})

    async def _main(self) -> None:
        try:
            await asyncio.wait_for(self._run(), self.timeout_s)
        except asyncio.TimeoutError:
            self._fail(ProgramTimeoutError(f"the program did not end within {self.timeout_s:g} s"))
        except asyncio.CancelledError:
            self.outcome.exit = "cancelled"
            raise
        except Exception as err:
            self._fail(err)
        else:
            self._queue.put_nowait(_DONE)
        finally:
            if self.on_done is not None:
                self.on_done(self)

    def _fail(self, err: BaseException) -> None:
        self.outcome.exit = "timeout" if isinstance(err, ProgramTimeoutError) else "error"
        self._queue.put_nowait(err)

    def _emit(self, text: str) -> None:
        if text:
            self._queue.put_nowait(text)

    # the program ---------------------------------------------------------------------
    async def _run(self) -> None:
        if self.plan.kind == "sc":
            await self._self_consistency()
            return
        answer_next = True
        if not self.in_answer and self.plan.thinking_budget == 0:
            self.outcome.exit = "budget"  # thinking_token_budget 0: closed at once
        elif not self.in_answer:
            answer_next = await (self._cot() if self.plan.kind == "cot" else self._think())
        o = self.outcome
        if answer_next:
            await self._answer()
        o.program_tokens = o.completion_tokens + o.probe_tokens

    async def _think(self) -> bool:
        """One streamed thinking pass; True when the answer should follow."""
        plan = self.plan
        req = GenerateRequest(
            self.prompt,
            max_tokens=plan.thinking_budget,
            temperature=plan.temperature,
            top_p=plan.top_p,
            seed=plan.seed,
            stop=(self.think_end,),
        )
        finish = None
        async for chunk in self.client.stream(req):
            self._take(chunk.text, chunk.token_ids)
            finish = chunk.finish_reason or finish
        self._count()
        self._thinking_ended(finish or "stop")
        return True

    async def _cot(self) -> bool:
        """Chunks with probes (CoTWithProbe); True when the answer should follow."""
        plan, o, trace = self.plan, self.outcome, self.trace
        assert plan.cot is not None

        def taken(res: GenerateResult) -> None:
            self._take(res.text, res.token_ids)
            if not o.prompt_tokens and res.num_prompt_tokens:
                o.prompt_tokens = res.num_prompt_tokens

        result = await plan.cot.run(self.client, self.prompt, trace=trace, on_chunk=taken)
        self._count()
        o.certainty, o.num_probes, o.probe_tokens = result.certainty, trace.num_probes, trace.probe_tokens
        o.probe_prompt_tokens_computed = trace.probe_prompt_tokens_computed
        if trace.exit == "early":
            o.exit, o.answer = "early", result.answer
            assert o.reasoning_tokens is not None  # counted above
            o.tokens_saved = max(0, plan.thinking_budget - o.reasoning_tokens)
            self._emit(result.text[len("".join(self._text)) :])  # the thinking closed, the answer
            return False
        last = next(e for e in reversed(trace.events) if e["kind"] == "chunk")
        self._thinking_ended(last["finish_reason"] if trace.exit != "budget" else "length")
        return True

    def _thinking_ended(self, finish: str) -> None:
        """The thinking ended with ``finish``: at its budget, or closed (module docstring)."""
        if finish in ("abort", "error"):
            raise HostError(f"the upstream ended a request with finish_reason {finish!r}")
        self.outcome.exit = "budget" if finish == "length" else "finished"

    async def _answer(self) -> None:
        plan, o = self.plan, self.outcome
        if not self.in_answer:
            self._emit(self.think_end)
        room = plan.max_tokens - o.completion_tokens
        if room < 1:
            o.finish_reason = "length"
            return
        req = GenerateRequest(
            await self._answer_prefix(),
            max_tokens=room,
            temperature=plan.temperature,
            top_p=plan.top_p,
            seed=plan.seed,
            stop=plan.stop,
        )
        pieces, count, finish = [], 0, None
        async for chunk in self.client.stream(req):
            self._emit(chunk.text)
            pieces.append(chunk.text)
            count += len(chunk.token_ids or ())
            finish = chunk.finish_reason or finish
        text = "".join(pieces)
        o.completion_tokens += count if self.use_ids else len(text.split())
        o.finish_reason = finish if finish in ("stop", "length") else "stop"
        o.answer = extract_answer(text)

    async def _answer_prefix(self) -> str | tuple[int, ...]:
        if self.in_answer:
            return self.prompt
        if not self.use_ids:
            return f"{self.prompt}{''.join(self._text)}{self.think_end}"
        tag = () if self._ends_with_tag() else self.think_end_ids
        return (*self.prompt, *self._ids, *tag)

    async def _self_consistency(self) -> None:
        plan, o, trace = self.plan, self.outcome, self.trace
        assert plan.sc is not None
        result = await plan.sc.run(self.client, self.prompt, trace=trace)
        o.samples = [
            {"answer": e["answer"], "tokens": e["tokens"], "certainty": e["certainty"]}
            for e in trace.events
            if e["kind"] == "sample"
        ]
        o.exit = _EXITS.get(trace.exit or "", trace.exit or "finished")
        o.answer, o.certainty = result.answer, result.certainty
        o.program_tokens, o.reasoning_tokens = trace.tokens_generated, None
        chosen = next(
            (s for s in o.samples if result.answer is not None and s["answer"] == result.answer), None
        )
        o.completion_tokens = chosen["tokens"] if chosen else 0
        if o.exit == "early" and o.samples:
            o.tokens_saved = round(
                (plan.sc_samples - len(o.samples)) * trace.tokens_generated / len(o.samples)
            )
        self._emit(result.text)

    # bookkeeping -------------------------------------------------------------------------
    def _take(self, text: str, ids) -> None:
        self._emit(text)
        self._text.append(text)
        self._ids.extend(ids or ())

    def _count(self) -> None:
        """The thinking's token counts (the tag's ids, when the model wrote it, are no reasoning)."""
        o = self.outcome
        o.completion_tokens = len(self._ids) if self.use_ids else len("".join(self._text).split())
        o.reasoning_tokens = o.completion_tokens - (len(self.think_end_ids) if self._ends_with_tag() else 0)

    def _ends_with_tag(self) -> bool:
        """Token-id mode: whether the reasoning ids end with the end-of-thinking tag's ids
        (the stop string was reached; hosts return the ids that completed it)."""
        tag = self.think_end_ids
        return bool(tag) and tuple(self._ids[-len(tag) :]) == tag
