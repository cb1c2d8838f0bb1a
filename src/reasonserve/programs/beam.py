"""Beam search guided by a process reward model (PRM; SPEC 2.1, FlashTTS §3).

Each round expands every live beam with ``expansions`` sampled next steps, scores the
candidates with the PRM (the score of a partial path is its latest step's score),
moves finished candidates aside and keeps the ``beam_width`` best live ones. It ends
when ``beam_width`` paths have finished, at ``max_depth``, or when the allocation
``policy`` denies (knob = rounds; certainty = the PRM aggregate of the best finished
path, :class:`~reasonserve.certainindex.estimators.reward.RewardCertainty`). The answer is the
finished path with the best aggregate score.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reasonserve.certainindex.allocation import EvenPolicy, ProgramStatus
from reasonserve.certainindex.answers import extract_answer
from reasonserve.certainindex.estimators.reward import RewardCertainty
from reasonserve.clients.protocol import EngineClient
from reasonserve.core.checks import check_int
from reasonserve.programs._inflight import InFlight, run_guarded
from reasonserve.programs._search import Node, Scorer, StepConfig, expand, resolve_scorer, score_nodes
from reasonserve.programs.trace import ProgramResult, Trace

__all__ = ["BeamSearchPRM"]


@dataclass(frozen=True)
class BeamSearchPRM:
    beam_width: int = 4
    expansions: int = 2
    steps: StepConfig = field(default_factory=StepConfig)
    aggregate: RewardCertainty = field(default_factory=lambda: RewardCertainty("min"))
    policy: object = field(default_factory=lambda: EvenPolicy(2**31 - 1))
    scorer: Scorer | None = None

    def __post_init__(self) -> None:
        for name in ("beam_width", "expansions"):
            check_int(name, getattr(self, name), 1)

    async def run(self, client: EngineClient, prompt: str, *, trace: Trace | None = None) -> ProgramResult:
        trace = trace if trace is not None else Trace("beam_prm")
        flight = InFlight(client, trace, "beam")
        scorer = resolve_scorer(client, self.scorer)
        return await run_guarded("BeamSearchPRM", lambda: self._loop(flight, prompt, scorer), trace, flight)

    async def _loop(self, flight: InFlight, prompt: str, scorer: Scorer) -> ProgramResult:
        trace = flight.trace
        beams, certainty, rounds = [Node("", 0)], 0.0, 0
        done: list[Node] = []
        while beams and len(done) < self.beam_width:
            if not self.policy.grant(ProgramStatus(rounds, certainty, trace.tokens_generated)):  # type: ignore[attr-defined]
                break
            candidates = []
            for i, beam in enumerate(beams):
                salt = rounds * 1000 + i
                candidates += await expand(flight, prompt, beam, self.expansions, self.steps, salt)
            await score_nodes(scorer, prompt, candidates, flight)
            done += [c for c in candidates if c.terminal]
            live = sorted((c for c in candidates if not c.terminal), key=lambda c: -c.score)
            beams = live[: self.beam_width]
            rounds += 1
            if done:
                certainty = max(self.aggregate.score(n.scores) for n in done)
            trace.event("round", n=rounds, live=len(beams), finished=len(done), certainty=certainty)
        trace.exit = "finished" if len(done) >= self.beam_width or not beams else "denied"
        pool = done or beams
        best = max(pool, key=lambda n: self.aggregate.score(n.scores), default=None)
        answer = extract_answer(best.text) if best is not None else None
        return ProgramResult(answer, best.text if best else "", certainty, trace)
