"""Dynasor-CoT: chunked reasoning with a probe after every chunk (Dynasor §3.1, SPEC 1.1).

The reasoning is decoded in chunks of ``chunk_tokens``. After each chunk the program
starts the next chunk *and* a probe at once (asyncio, so the probe overlaps the next
chunk on the host): the probe continues the current prefix with ``probe_suffix`` for
``probe_tokens`` greedy tokens; the answer is the text up to the first unmatched ``}``.
Each probe becomes a :class:`~reasonserve.certainindex.stopping.ProbeObservation`
handed to the stopping rule's state; the offline replay
(:func:`reasonserve.replay.probe_rules.online_first_stop`) feeds recorded probes through
the same ``observe`` calls, so both take the same decisions.

On an early exit the running chunk is aborted, the thinking block is closed
(``think_end`` appended when absent) and the agreed answer is emitted as
``**Final Answer** \\boxed{answer}``. Without an exit the reasoning runs until the host
stops it (eos, stop string) or ``max_tokens``; the answer is then extracted from it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

from reasonserve.certainindex.answers import extract_answer, extract_probe_answer
from reasonserve.certainindex.stopping import (
    AgreeSpanRule,
    ProbeObservation,
    StopDecision,
    StoppingRule,
    default_rule,
)
from reasonserve.clients.errors import MalformedResponseError
from reasonserve.clients.protocol import EngineClient, GenerateRequest, GenerateResult
from reasonserve.core.checks import check_int
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.programs._inflight import InFlight, run_guarded
from reasonserve.programs.trace import ProgramResult, Trace

__all__ = ["DEFAULT_PROBE_SUFFIX", "CoTWithProbe", "host_default_rule"]

#: The reference code's probe suffix (SPEC 1.1).
DEFAULT_PROBE_SUFFIX = (
    "... Oh, I suddenly got the answer to the whole problem, **Final Answer**\n\n\\[ \\boxed{"
)
_HOST_SIGNALS = frozenset({"answers", "probe_text", "reasoning_text", "budget"})


def host_default_rule() -> StoppingRule:
    """``default_rule()`` when the program can give every signal it requires (answers,
    probe text, reasoning text, the budget ``max_tokens``: the hosts here return no
    log-probabilities); otherwise
    the agree-span rule ``AgreeSpanRule(2432, 2048)``, which needs answers and probe text."""
    rule = default_rule()
    return rule if set(rule.requires) <= _HOST_SIGNALS else cast(StoppingRule, AgreeSpanRule(2432, 2048))


@dataclass(frozen=True)
class CoTWithProbe:
    """See the module docstring. ``rule``: default :func:`host_default_rule`. ``seed``:
    every chunk uses it (on reasonserve the token at position p depends on (seed, p) and
    the logits, so chunked decoding samples like one request)."""

    chunk_tokens: int = 64
    max_tokens: int = 4096
    probe_tokens: int = 20
    probe_suffix: str = DEFAULT_PROBE_SUFFIX
    think_end: str = "</think>"
    rule: StoppingRule = field(default_factory=host_default_rule)
    temperature: float = 0.6
    top_p: float = 0.95
    seed: int | None = None
    priority: int = 0
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("chunk_tokens", "max_tokens", "probe_tokens"):
            check_int(name, getattr(self, name), 1)
        if not isinstance(self.probe_suffix, str) or not self.probe_suffix:
            raise InvalidArgumentError("probe_suffix must be a non-empty str")
        missing = set(getattr(self.rule, "requires", {"?"})) - _HOST_SIGNALS
        if missing:
            raise InvalidArgumentError(f"rule {self.rule!r} needs signals this host cannot give: {missing}")
        self._request("x", 1)  # the sampling settings: checked here, not at the first request

    def _request(self, prompt, max_tokens: int) -> GenerateRequest:
        return GenerateRequest(prompt, max_tokens=max_tokens, temperature=self.temperature, top_p=self.top_p,
                               seed=self.seed, priority=self.priority, stop=self.stop)  # fmt: skip

    async def run(self, client: EngineClient, prompt: str | Sequence[int], *, trace: Trace | None = None,
                  on_chunk: Callable[[GenerateResult], None] | None = None) -> ProgramResult:  # fmt: skip
        """Reason on ``prompt`` (text, or token ids for clients with token ids).
        ``on_chunk``: called with each chunk the reasoning takes, when it takes it (a
        chunk dropped by an early exit is never passed), e.g. to stream the reasoning."""
        trace = trace if trace is not None else Trace("cot")
        flight = InFlight(client, trace, "cot")
        run = _Run(self, client, flight, trace, on_chunk)
        return await run_guarded("CoTWithProbe", lambda: run.go(prompt), trace, flight)


class _Run:
    """One run's state: the prefix (ids or text), the reasoning so far, the rule state."""

    def __init__(self, cfg: CoTWithProbe, client: EngineClient, flight: InFlight, trace: Trace,
                 on_chunk: Callable[[GenerateResult], None] | None = None) -> None:  # fmt: skip
        self.cfg, self.flight, self.trace, self.on_chunk = cfg, flight, trace, on_chunk
        self.use_ids = client.capabilities.token_ids
        self.state = cfg.rule.start()
        self.reasoning, self.text_prefix = "", ""
        self.ids: list[int] = []

    def _prefix(self):
        return tuple(self.ids) if self.use_ids else self.text_prefix + self.reasoning

    async def go(self, prompt) -> ProgramResult:
        cfg, trace = self.cfg, self.trace
        self.text_prefix = prompt if isinstance(prompt, str) else ""
        if not isinstance(prompt, str) and not self.use_ids:
            raise InvalidArgumentError("token-id prompts need a client with token ids")
        if not isinstance(prompt, str):
            self.ids = list(prompt)  # hosts that return no prompt ids (SGLang) need not
        chunk = self.flight.generate(cfg._request(prompt, min(cfg.chunk_tokens, cfg.max_tokens)))
        certainty = 0.0
        while True:
            res = await chunk
            self._take(res)
            budget = cfg.max_tokens - trace.tokens_generated
            if res.finish_reason != "length" or budget <= 0:
                trace.exit = "finished" if res.finish_reason != "length" else "budget"
                return ProgramResult(extract_answer(self.reasoning), self.reasoning, certainty, trace)
            chunk = self.flight.generate(cfg._request(self._prefix(), min(cfg.chunk_tokens, budget)))
            decision = await self._probe(res.text)
            certainty = decision.certainty
            if decision.stop:
                await self.flight.cancel(chunk)
                trace.exit = "early"
                trace.event("exit", position=trace.tokens_generated, answer=decision.answer)
                return ProgramResult(decision.answer, self._closed(decision.answer), certainty, trace)

    def _take(self, res: GenerateResult) -> None:
        if self.use_ids:
            if not self.ids:
                if res.prompt_token_ids is None:
                    raise InvalidArgumentError("the host returned no prompt token ids; use text mode")
                self.ids = list(res.prompt_token_ids)
            if res.token_ids is None:
                raise InvalidArgumentError("the host returned no token ids; use a text-mode client")
            self.ids += res.token_ids
        if res.finish_reason == "length" and not (res.token_ids if res.token_ids is not None else res.text):
            # the budget would never shrink: chunk after chunk, without end
            raise MalformedResponseError("the host ended a chunk at its length limit without a token")
        n = len(res.token_ids) if res.token_ids is not None else max(1, len(res.text.split()))
        self.reasoning += res.text
        self.trace.tokens_generated += n
        self.trace.num_chunks += 1
        self.trace.event("chunk", tokens=n, finish_reason=res.finish_reason)
        if self.on_chunk is not None:
            self.on_chunk(res)

    async def _probe(self, tail: str) -> StopDecision:
        cfg, trace = self.cfg, self.trace
        out = await self.flight.probe(self._prefix(), cfg.probe_suffix, cfg.probe_tokens)
        trace.num_probes += 1
        trace.probe_tokens += len(out.token_ids) if out.token_ids is not None else 0
        trace.add_probe_computed(out.num_computed_tokens)
        obs = ProbeObservation(trace.tokens_generated, extract_probe_answer(out.text), out.text, tail,
                               budget_tokens=cfg.max_tokens)  # fmt: skip
        decision = self.state.observe(obs)
        trace.event("probe", position=obs.position, answer=obs.answer, computed=out.num_computed_tokens,
                    certainty=decision.certainty, stop=decision.stop)  # fmt: skip
        return decision

    def _closed(self, answer: str | None) -> str:
        end = "" if self.cfg.think_end in self.reasoning else f"\n{self.cfg.think_end}"
        return f"{self.reasoning}{end}\n\n**Final Answer**\n\\boxed{{{answer or ''}}}"
