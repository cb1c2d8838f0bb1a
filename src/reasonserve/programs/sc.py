"""Self-consistency with certainindex allocation (Dynasor §3 and §5.2.1, SPEC 1.2 and 2.2).

Samples are issued in rounds: ``first_step`` of them at the start (None:
``samples_per_step``), then ``samples_per_step`` more each time no sample is live. After
*each* finished sample (in the order they finish) the knob (samples finished) goes up by
one, its answer joins the others (grouped by equivalence) and the semantic-entropy
certainty is read; the allocation ``policy`` (:mod:`reasonserve.certainindex.allocation`:
threshold, Pareto cap, even, length) then grants more compute or denies it. Denied, the
program aborts its live samples (their KV is freed at once), issues no more, and returns
the majority answer (ties: the answer seen first). So ``first_step=5`` with
``ThresholdPolicy(0.7, detect_at=5)`` and ``samples_per_step=8, max_samples=8`` is the
paper's two rounds (detect@5, then the rest), and ``samples_per_step=max_samples`` with a
policy stops live samples as soon as the certainty passes.

``program_id`` (optional, per run) names the program's requests ``{program_id}/s{i}``,
so a host sees them as one program and a simulated run is the same run every time; a
host that schedules by programs' progress (``Capabilities.progress``, e.g. a
:class:`~reasonserve.clients.sim.SimClient` on a cluster under Dynasor) is told the knob,
the certainty and when the program is done, after each change.

With ``scorer`` (``async scorer(prompt, [text]) -> [score]``, e.g. a reward model or
recorded rewards) each finished sample is scored (a sample that did not finish scores
NaN, missing) and the certainty is ``reward``'s aggregate of the scores so far
(:class:`~reasonserve.certainindex.RewardCertainty`: MCTS rollouts' mean, ...) instead
of the semantic entropy; the answer is still the majority.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from reasonserve.certainindex.allocation import EvenPolicy, ProgramStatus
from reasonserve.certainindex.answers import extract_answer
from reasonserve.certainindex.answers.equivalence import AnswerClasses
from reasonserve.certainindex.estimators.reward import RewardCertainty
from reasonserve.certainindex.estimators.semantic_entropy import SemanticEntropy
from reasonserve.clients.protocol import EngineClient, GenerateRequest, ProgramProgress
from reasonserve.core.checks import check_int
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.programs._inflight import InFlight, run_guarded
from reasonserve.programs.trace import ProgramResult, Trace

__all__ = ["SelfConsistency"]

Scorer = Callable[[str | Sequence[int], list[str]], Awaitable[Sequence[float]]]


@dataclass(frozen=True)
class SelfConsistency:
    """``policy``: any object with ``grant(ProgramStatus) -> bool``; ``knob`` = samples
    so far. ``seed``: sample i uses ``seed + i`` (None: unseeded). ``max_samples``: a hard
    cap whatever the policy grants (a policy that always grants still ends)."""

    samples_per_step: int = 4
    first_step: int | None = None  # samples of the first round (None: samples_per_step)
    max_tokens: int = 1024
    max_samples: int = 256
    policy: object = field(default_factory=lambda: EvenPolicy(8))
    temperature: float = 0.7
    top_p: float = 0.95
    seed: int | None = None
    priority: int = 0
    stop: tuple[str, ...] = ()
    scorer: Scorer | None = None  # with it, the certainty is ``reward`` over the samples' scores
    reward: RewardCertainty = field(default_factory=RewardCertainty)

    def __post_init__(self) -> None:
        for name in ("samples_per_step", "max_tokens", "max_samples", "first_step"):
            value = getattr(self, name)
            if name == "first_step" and value is None:
                continue
            check_int(name, value, 1)
        if not callable(getattr(self.policy, "grant", None)):
            raise InvalidArgumentError("policy must have grant(ProgramStatus) -> bool")
        if self.scorer is not None and not callable(self.scorer):
            raise InvalidArgumentError(f"scorer must be an async callable or None, got {self.scorer!r}")
        if not isinstance(self.reward, RewardCertainty):
            raise InvalidArgumentError(f"reward must be a RewardCertainty, got {self.reward!r}")
        # The sampling settings: checked here, not at the first request.
        GenerateRequest("x", max_tokens=self.max_tokens, temperature=self.temperature, top_p=self.top_p,
                        seed=self.seed, priority=self.priority, stop=self.stop)  # fmt: skip

    async def run(self, client: EngineClient, prompt: str | Sequence[int], *, trace: Trace | None = None,
                  program_id: str | None = None) -> ProgramResult:  # fmt: skip
        if program_id is not None and (not isinstance(program_id, str) or not program_id):
            raise InvalidArgumentError(f"program_id must be a non-empty str or None, got {program_id!r}")
        trace = trace if trace is not None else Trace("sc")
        flight = InFlight(client, trace, "sc")
        return await run_guarded("SelfConsistency", lambda: self._loop(flight, prompt, program_id), trace,
                                 flight)  # fmt: skip

    async def _loop(self, flight: InFlight, prompt, program_id: str | None) -> ProgramResult:
        trace, vote, rewards = flight.trace, _Vote(), []
        finished: asyncio.Queue[asyncio.Task] = asyncio.Queue()  # in the order they finish
        live: dict[asyncio.Task, None] = {}  # in the order they were issued
        issued = knob = 0
        grant = self.policy.grant  # type: ignore[attr-defined]
        report = _reporter(flight.client, program_id, self.max_samples)
        granted = grant(ProgramStatus(0, 0.0, 0))
        report(0, None, not granted)
        while granted and knob < self.max_samples:
            if not live:  # the next round
                size = self.samples_per_step if issued or self.first_step is None else self.first_step
                for i in range(issued, min(self.max_samples, issued + size)):
                    rid = None if program_id is None else f"{program_id}/s{i}"
                    task = flight.generate(self._request(prompt, i, rid))
                    task.add_done_callback(finished.put_nowait)
                    live[task] = None
                issued = max(issued, min(self.max_samples, issued + size))
            try:
                task = await finished.get()
            except asyncio.CancelledError:  # as gather: the samples are cancelled, and awaited
                for live_task in live:
                    live_task.cancel()
                if live:
                    await asyncio.wait(live)
                raise
            live.pop(task, None)
            res = task.result()
            n = len(res.token_ids) if res.token_ids is not None else len(res.text.split())
            trace.tokens_generated += n
            answered = res.finish_reason in _ANSWERED
            answer = extract_answer(res.text) if answered else None
            certainty = vote.add(answer, res.text)
            if self.scorer is not None:
                rewards.append(await self._score(prompt, res.text) if answered else math.nan)
                certainty = vote.certainty = self.reward.score(rewards)
            trace.event("sample", tokens=n, answer=answer, certainty=certainty)
            knob += 1
            granted = grant(ProgramStatus(knob, certainty, trace.tokens_generated))
            report(knob, certainty, not granted or knob >= self.max_samples)
        for task in live:  # denied (or at the cap): the live samples stop now
            await flight.cancel(task)
        trace.exit = "denied" if knob < self.max_samples else "budget"
        return vote.result(trace)

    async def _score(self, prompt, text: str) -> float:
        scores = list(await self.scorer(prompt, [text]))  # type: ignore[misc]
        if len(scores) != 1:
            raise InvalidArgumentError(f"the scorer returned {len(scores)} scores for 1 sample")
        s = scores[0]
        return float(s) if isinstance(s, (int, float)) and not isinstance(s, bool) else math.nan

    def _request(self, prompt, i: int, request_id: str | None = None) -> GenerateRequest:
        seed = None if self.seed is None else (self.seed + i) % 2**63  # as the engines' seeds
        return GenerateRequest(prompt, max_tokens=self.max_tokens, temperature=self.temperature,
                               top_p=self.top_p, seed=seed, priority=self.priority, stop=self.stop,
                               request_id=request_id)  # fmt: skip


_ANSWERED = ("stop", "length")  # a sample aborted or failed on the host has no answer


def _reporter(client: EngineClient, program_id: str | None, max_knob: int) -> Callable[..., None]:
    """Tells a host that schedules by progress the program's (a no-op for other hosts)."""
    if program_id is None or not client.capabilities.progress:
        return lambda knob, certainty, done: None

    def report(knob: int, certainty: float | None, done: bool) -> None:
        client.report_progress(program_id, ProgramProgress(knob, max_knob, certainty, done))  # type: ignore[attr-defined]

    return report


class _Vote:
    """The answers so far: their classes, the semantic-entropy certainty, the majority."""

    def __init__(self) -> None:
        self.classes, self.entropy = AnswerClasses(), SemanticEntropy()
        self.state, self.certainty = self.entropy.start(), 0.0
        self.votes: Counter[int] = Counter()
        self.texts: dict[int, str] = {}

    def add(self, answer: str | None, text: str) -> float:
        cid = self.classes.add(answer) if answer else -1
        self.certainty = self.entropy.update(self.state, cid)
        if cid >= 0:
            self.votes[cid] += 1
            self.texts.setdefault(cid, text)
        return self.certainty

    def result(self, trace: Trace) -> ProgramResult:
        if not self.votes:
            return ProgramResult(None, "", self.certainty, trace)
        best = max(self.votes, key=lambda c: (self.votes[c], -c))  # class ids count up as first seen
        return ProgramResult(self.classes.representative(best), self.texts[best], self.certainty, trace)
