"""Reasoning programs in the simulator: self-consistency (SC) programs replayed from
recorded samples, with Dynasor's intra-program allocation (Fu et al., "Efficiently
Serving LLM Reasoning Programs with Certaindex", §5.2.1; SPEC 2.1-2.2).

A program is one question with up to ``cap`` samples (requests, a gang). Sample ``j``
has the ``j``-th recorded sample's output length and answer. The program issues
``first_round`` samples when it arrives; each time one of its samples finishes, its knob
(samples finished) goes up by one and its certainindex is the semantic-entropy
certainty of the answers so far (:class:`~reasonserve.certainindex.SemanticEntropy`,
the estimator the SC replay uses). The allocation (any ``grant(ProgramStatus)`` of
:mod:`reasonserve.certainindex.allocation`) then grants or denies more compute:

* denied: the program is done; its live samples are stopped (their KV freed) and the
  rest never issued; it answers with the majority of the answers so far;
* granted, and no sample of it is live: it issues the next round (``round_size``
  samples, default all the rest up to ``cap``).

With ``reward`` set (a :class:`~reasonserve.certainindex.RewardCertainty`) the
certainindex is instead that aggregate of the finished samples' recorded rewards (MCTS
rollouts' node values, PRM beam scores). So ``first_round=5`` with
``ThresholdPolicy(0.7, detect_at=5)`` is the paper's two rounds (detect@5, then the
rest); ``first_round=1, round_size=1`` runs samples one after another (MCTS
rollouts); ``first_round=cap`` without an allocation is a baseline that always runs
every sample; ``first_round=cap`` with an allocation stops
live samples as soon as the index passes. A sample stopped or aborted by a scheduling
policy counts as finished without an answer.

:class:`ProgramRuntime` is the simulator's :class:`~reasonserve.sim.cluster.simulator.ProgramHost`;
:class:`WithPrograms` hands a policy the programs' progress as
:class:`~reasonserve.core.views.ProgramView` s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from reasonserve.certainindex.allocation import ProgramStatus
from reasonserve.certainindex.estimators import RewardCertainty, SemanticEntropy
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.core.policy import check_policy, policy_name
from reasonserve.core.views import ProgramView, SchedulerView
from reasonserve.recordings.sc import SCQuestion
from reasonserve.sim.cluster.sequence import SimSequence
from reasonserve.sim.workloads.requests import SimRequest

__all__ = ["Allocation", "ProgramPlan", "ProgramRuntime", "SCProgram", "WithPrograms"]


class Allocation(Protocol):
    def grant(self, status: ProgramStatus) -> bool: ...


def _check_int(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidArgumentError(f"{name} must be an int >= {low}, got {value!r}")


@dataclass(frozen=True, slots=True)
class SCProgram:
    """One SC program: a recorded question, its samples' output tokens, when it arrives."""

    program_id: str
    arrival_s: float
    prompt_tokens: int
    question: SCQuestion  # answer classes and their correctness, in recorded order
    sample_tokens: tuple[int, ...]  # output tokens of each recorded sample
    difficulty: int = 2  # 1 always correct, 2 variable, 3 always wrong (SPEC 2.4)
    prefix_hashes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if len(self.sample_tokens) != len(self.question.classes) or not self.sample_tokens:
            raise InvalidArgumentError(f"program {self.program_id}: one length per recorded sample needed")
        if min(self.sample_tokens) < 1 or self.prompt_tokens < 1:
            raise InvalidArgumentError(f"program {self.program_id}: token counts must be >= 1")
        if self.difficulty not in (1, 2, 3):
            raise InvalidArgumentError(f"program {self.program_id}: difficulty must be 1, 2 or 3")


@dataclass(frozen=True, slots=True)
class ProgramPlan:
    """How every program spends its knob: ``cap`` samples at most, ``first_round`` issued
    on arrival (None: ``cap``), later rounds of ``round_size`` (None: the rest), and the
    certainindex ``allocation`` that may deny more (None: always run to ``cap``); the
    certainindex is semantic entropy over answers, or ``reward`` over recorded rewards."""

    cap: int
    first_round: int | None = None
    round_size: int | None = None
    allocation: Allocation | None = None
    reward: RewardCertainty | None = None

    def __post_init__(self) -> None:
        _check_int("cap", self.cap, 1)
        for name in ("first_round", "round_size"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), 1)
        if self.allocation is not None and not callable(getattr(self.allocation, "grant", None)):
            raise InvalidArgumentError(f"allocation needs a grant(status) method, got {self.allocation!r}")
        if self.reward is not None and not isinstance(self.reward, RewardCertainty):
            raise InvalidArgumentError(f"reward must be a RewardCertainty or None, got {self.reward!r}")


@dataclass(slots=True)
class _State:
    program: SCProgram
    cap: int
    issued: int = 0
    classes: list[int] = field(default_factory=list)  # answers of finished samples, in finish order
    rewards: list[float] = field(default_factory=list)  # their recorded rewards (NaN: none)
    tokens: int = 0
    live: set[str] = field(default_factory=set)
    done: bool = False
    finish_s: float | None = None
    certainty: float | None = None


class ProgramRuntime:
    """Issues and stops the programs' samples as the simulation runs; keeps their results."""

    def __init__(self, programs: Sequence[SCProgram], plan: ProgramPlan) -> None:
        ids = [p.program_id for p in programs]
        if len(set(ids)) != len(ids):
            raise InvalidArgumentError("program ids must be unique")
        self.plan = plan
        self.states = {p.program_id: _State(p, min(plan.cap, len(p.sample_tokens))) for p in programs}
        self._owner: dict[str, tuple[str, int]] = {}  # request id -> (program id, sample index)
        self._entropy = SemanticEntropy()

    def initial_requests(self) -> list[SimRequest]:
        """Every program's first round, arriving with the program."""
        out: list[SimRequest] = []
        for st in self.states.values():
            out += self._issue(st, self.plan.first_round or st.cap, st.program.arrival_s)
        return out

    def _issue(self, st: _State, count: int, now_s: float) -> list[SimRequest]:
        p, out = st.program, []
        for j in range(st.issued, min(st.cap, st.issued + count)):
            rid = f"{p.program_id}/s{j}"
            self._owner[rid] = (p.program_id, j)
            st.live.add(rid)
            out.append(SimRequest(rid, now_s, p.prompt_tokens, p.sample_tokens[j], 0, p.program_id,
                                  p.prefix_hashes))  # fmt: skip
        st.issued += len(out)
        return out

    def on_finished(
        self, finished: Sequence[SimSequence], now_s: float
    ) -> tuple[list[SimRequest], list[str]]:
        spawned: list[SimRequest] = []
        stops: list[str] = []
        for seq in finished:
            owner = self._owner.get(seq.request_id)
            if owner is None:
                continue  # not a program's request
            st = self.states[owner[0]]
            if st.done or seq.request_id not in st.live:
                continue  # its program is over (a sample we stopped)
            st.live.discard(seq.request_id)
            answered = seq.finish_reason == "length"
            st.classes.append(st.program.question.classes[owner[1]] if answered else -1)
            st.rewards.append(st.program.question.rewards[owner[1]] if answered else float("nan"))
            st.tokens += seq.num_output
            spawned_now, stops_now = self._advance(st, now_s)
            spawned += spawned_now
            stops += stops_now
        return spawned, stops

    def _advance(self, st: _State, now_s: float) -> tuple[list[SimRequest], list[str]]:
        knob = len(st.classes)
        reward = self.plan.reward
        st.certainty = self._entropy.score(st.classes) if reward is None else reward.score(st.rewards)
        alloc = self.plan.allocation
        denied = alloc is not None and not alloc.grant(ProgramStatus(knob, st.certainty, st.tokens))
        if denied or knob >= st.cap:
            stops = sorted(st.live)
            st.live.clear()
            st.done, st.finish_s = True, now_s
            return [], stops
        if not st.live:
            return self._issue(st, self.plan.round_size or st.cap, now_s), []
        return [], []

    # what policies and reports read -------------------------------------------------------
    def view(self, program_id: str) -> ProgramView:
        st = self.states[program_id]
        return ProgramView(program_id, tuple(sorted(st.live)), st.program.arrival_s, len(st.classes), st.cap,
                           st.certainty, st.done)  # fmt: skip

    def answer_correct(self, program_id: str) -> bool:
        """Majority of the answers so far (ties: the answer seen first) is correct."""
        st = self.states[program_id]
        votes = Counter(c for c in st.classes if c >= 0)
        if not votes:
            return False
        best = max(votes, key=lambda c: (votes[c], -st.classes.index(c)))
        return st.program.question.class_correct[best]

    def results(self) -> list[dict]:
        """Per program: arrival, latency (None if unfinished), samples and tokens used, difficulty."""
        out = []
        for pid, st in self.states.items():
            p = st.program
            out.append({"program_id": pid, "arrival_s": p.arrival_s, "difficulty": p.difficulty,
                        "latency_s": None if st.finish_s is None else st.finish_s - p.arrival_s,
                        "samples": len(st.classes), "issued": st.issued, "tokens": st.tokens,
                        "stopped_early": st.done and len(st.classes) < st.cap,
                        "correct": self.answer_correct(pid)})  # fmt: skip
        return out


@dataclass(slots=True)
class WithPrograms:
    """A policy whose views carry the programs' progress (``SchedulerView.programs``: one
    :class:`ProgramView` per program with a request in the view, by program id)."""

    inner: object
    runtime: ProgramRuntime
    name: str = ""

    def __post_init__(self) -> None:
        check_policy(self.inner)
        self.name = self.name or policy_name(self.inner)

    def decide(self, view: SchedulerView):
        pids = {r.program_id for r in view.waiting}
        pids.update(r.program_id for r in view.running)
        states = self.runtime.states
        programs = tuple(self.runtime.view(pid) for pid in sorted(p for p in pids if p in states))
        return self.inner.decide(replace(view, programs=programs))  # type: ignore[attr-defined]
