"""REBASE: reward-balanced tree search (Wu et al., "Inference Scaling Laws"; Dynasor's
Rebase program, SPEC 2.1).

At each depth the live paths are scored by the reward model; the ``width`` minus the
paths already finished is split among them by softmax(score / ``temperature``)
(largest remainders first), and each gets that many sampled next steps. The search ends
when ``width`` paths have finished, at ``max_depth``, or when the allocation policy
denies (knob = depth; certainty = semantic entropy of the finished answers). The answer
is the softmax-weighted majority vote over the finished paths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from reasonserve.certainindex.allocation import EvenPolicy, ProgramStatus
from reasonserve.certainindex.answers.equivalence import AnswerClasses
from reasonserve.certainindex.estimators.semantic_entropy import SemanticEntropy
from reasonserve.clients.protocol import EngineClient
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.programs._inflight import InFlight, run_guarded
from reasonserve.programs._search import (
    Node,
    Scorer,
    StepConfig,
    expand,
    resolve_scorer,
    score_nodes,
    weighted_vote,
)
from reasonserve.programs.trace import ProgramResult, Trace

__all__ = ["Rebase", "allocate"]


def allocate(scores: list[float], budget: int, temperature: float) -> list[int]:
    """Children per path: ``budget`` split by softmax(score / temperature), rounded by
    largest remainder (sums to ``budget``)."""
    if not scores or budget <= 0:
        return [0] * len(scores)
    top = max(scores)
    w = [math.exp((s - top) / temperature) for s in scores]
    share = [budget * x / sum(w) for x in w]
    out = [int(s) for s in share]
    order = sorted(range(len(share)), key=lambda i: (-(share[i] - out[i]), i))
    for i in order[: budget - sum(out)]:
        out[i] += 1
    return out


@dataclass(frozen=True)
class Rebase:
    width: int = 8
    temperature: float = 0.2
    steps: StepConfig = field(default_factory=StepConfig)
    policy: object = field(default_factory=lambda: EvenPolicy(2**31 - 1))
    scorer: Scorer | None = None

    def __post_init__(self) -> None:
        if isinstance(self.width, bool) or not isinstance(self.width, int) or self.width < 1:
            raise InvalidArgumentError(f"width must be an int >= 1, got {self.width!r}")
        if not self.temperature > 0:
            raise InvalidArgumentError(f"temperature must be > 0, got {self.temperature!r}")

    async def run(self, client: EngineClient, prompt: str, *, trace: Trace | None = None) -> ProgramResult:
        trace = trace if trace is not None else Trace("rebase")
        flight = InFlight(client, trace, "rebase")
        scorer = resolve_scorer(client, self.scorer)
        return await run_guarded("Rebase", lambda: self._loop(flight, prompt, scorer), trace, flight)

    async def _loop(self, flight: InFlight, prompt: str, scorer: Scorer) -> ProgramResult:
        trace, root = flight.trace, Node("", 0)
        live, done = await expand(flight, prompt, root, self.width, self.steps, 0), []
        certainty, depth = 0.0, 1
        while True:
            await score_nodes(scorer, prompt, live, flight)
            done += [n for n in live if n.terminal]
            live = [n for n in live if not n.terminal]
            certainty = SemanticEntropy().score(_ids(done))
            status = ProgramStatus(depth, certainty, trace.tokens_generated)
            if not live or len(done) >= self.width or not self.policy.grant(status):  # type: ignore[attr-defined]
                break
            counts = allocate([n.score for n in live], self.width - len(done), self.temperature)
            children = []
            for i, (node, k) in enumerate(zip(live, counts, strict=True)):
                children += await expand(flight, prompt, node, k, self.steps, depth * 1000 + i)
            live, depth = children, depth + 1
        trace.exit = "finished" if len(done) >= self.width or not live else "denied"
        pool = done or live
        answer, _share = weighted_vote(pool, AnswerClasses(), self.temperature)
        best = max(pool, key=lambda n: n.score, default=None)
        return ProgramResult(answer, best.text if best else "", certainty, trace)


def _ids(nodes: list[Node]) -> list[int]:
    classes = AnswerClasses()
    return [classes.add(n.answer) for n in nodes]
