"""Self-consistency with certainindex allocation (Dynasor §3, SPEC 1.2 and 2.2).

Samples are drawn ``samples_per_step`` at a time (concurrently); after each step the
answers are grouped by equivalence and the semantic-entropy certainty is read; the
allocation ``policy`` (:mod:`reasonserve.certainindex.allocation`: threshold, Pareto
cap, even, length) grants another step or denies, and the program returns the
majority answer (ties: the answer seen first).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from reasonserve.certainindex.allocation import EvenPolicy, ProgramStatus
from reasonserve.certainindex.answers import extract_answer
from reasonserve.certainindex.answers.equivalence import AnswerClasses
from reasonserve.certainindex.estimators.semantic_entropy import SemanticEntropy
from reasonserve.clients.protocol import EngineClient, GenerateRequest
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.programs._inflight import InFlight, run_guarded
from reasonserve.programs.trace import ProgramResult, Trace

__all__ = ["SelfConsistency"]


@dataclass(frozen=True)
class SelfConsistency:
    """``policy``: any object with ``grant(ProgramStatus) -> bool``; ``knob`` = samples
    so far. ``seed``: sample i uses ``seed + i`` (None: unseeded). ``max_samples``: a hard
    cap whatever the policy grants (a policy that always grants still ends)."""

    samples_per_step: int = 4
    max_tokens: int = 1024
    max_samples: int = 256
    policy: object = field(default_factory=lambda: EvenPolicy(8))
    temperature: float = 0.7
    top_p: float = 0.95
    seed: int | None = None
    priority: int = 0
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("samples_per_step", "max_tokens", "max_samples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")
        if not callable(getattr(self.policy, "grant", None)):
            raise InvalidArgumentError("policy must have grant(ProgramStatus) -> bool")
        # The sampling settings: checked here, not at the first request.
        GenerateRequest("x", max_tokens=self.max_tokens, temperature=self.temperature, top_p=self.top_p,
                        seed=self.seed, priority=self.priority, stop=self.stop)  # fmt: skip

    async def run(self, client: EngineClient, prompt: str | Sequence[int], *, trace: Trace | None = None
                  ) -> ProgramResult:  # fmt: skip
        trace = trace if trace is not None else Trace("sc")
        flight = InFlight(client, trace, "sc")
        return await run_guarded("SelfConsistency", lambda: self._loop(flight, prompt), trace, flight)

    async def _loop(self, flight: InFlight, prompt) -> ProgramResult:
        trace = flight.trace
        classes, entropy = AnswerClasses(), SemanticEntropy()
        state, certainty = entropy.start(), 0.0
        votes: Counter[int] = Counter()
        texts: dict[int, str] = {}
        knob = 0
        grant = self.policy.grant  # type: ignore[attr-defined]
        while knob < self.max_samples and grant(ProgramStatus(knob, certainty, trace.tokens_generated)):
            step = min(self.samples_per_step, self.max_samples - knob)
            tasks = [flight.generate(self._request(prompt, knob + i)) for i in range(step)]
            for res in await asyncio.gather(*tasks):
                n = len(res.token_ids) if res.token_ids is not None else len(res.text.split())
                trace.tokens_generated += n
                answer = extract_answer(res.text)
                cid = classes.add(answer) if answer else -1
                certainty = entropy.update(state, cid)
                if cid >= 0:
                    votes[cid] += 1
                    texts.setdefault(cid, res.text)
                trace.event("sample", tokens=n, answer=answer, certainty=certainty)
            knob += step
        trace.exit = "denied" if knob < self.max_samples else "budget"
        if not votes:
            return ProgramResult(None, "", certainty, trace)
        best = max(votes, key=lambda c: (votes[c], -c))
        return ProgramResult(classes.representative(best), texts[best], certainty, trace)

    def _request(self, prompt, i: int) -> GenerateRequest:
        seed = None if self.seed is None else (self.seed + i) % 2**63  # as the engines' seeds
        return GenerateRequest(prompt, max_tokens=self.max_tokens, temperature=self.temperature,
                               top_p=self.top_p, seed=seed, priority=self.priority,
                               stop=self.stop)  # fmt: skip
