"""Programs against scripted hosts: a misbehaving host ends a run with a typed error, never
a loop; a failed run aborts what it started while the client is still in use; the branches
the docstrings name (ties, a thinking block already closed) are taken."""

from __future__ import annotations

import asyncio

import pytest

from reasonserve.certainindex.allocation import EvenPolicy
from reasonserve.certainindex.stopping import StopDecision
from reasonserve.clients.errors import HostRejectedError, MalformedResponseError
from reasonserve.clients.protocol import Capabilities, GenerateResult, ProbeResult
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.programs import MCTS, CoTWithProbe, SelfConsistency
from reasonserve.programs._search import StepConfig
from reasonserve.programs.trace import ProgramError


class EmptyLengthHost:
    """Every chunk 'hits its length limit' without producing a token."""

    def __init__(self, token_ids: bool) -> None:
        self.capabilities = Capabilities(token_ids=token_ids)
        self.token_ids = token_ids
        self.generated = 0

    async def generate(self, req):
        self.generated += 1
        await asyncio.sleep(0)
        ids = () if self.token_ids else None
        return GenerateResult(req.request_id, "", ids, "length", prompt_token_ids=(1, 2))

    async def probe(self, prefix, suffix, max_tokens, *, request_id=None):
        await asyncio.sleep(0)
        return ProbeResult("", (), "length")

    async def abort(self, request_id):
        return None


@pytest.mark.parametrize("token_ids", [True, False])
def test_cot_stops_on_a_host_that_returns_length_without_tokens(token_ids):
    host = EmptyLengthHost(token_ids)
    program = CoTWithProbe(max_tokens=10_000, chunk_tokens=16)
    with pytest.raises(ProgramError) as err:
        asyncio.run(asyncio.wait_for(program.run(host, "hi"), 5.0))
    assert isinstance(err.value.__cause__, MalformedResponseError)
    assert host.generated <= 2  # the first empty chunk is the last one asked for (the next may be started)


class FailingProbeHost:
    """Chunk 1 returns; chunk 2 runs until aborted; every probe is rejected (a 400)."""

    capabilities = Capabilities(token_ids=False)

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.aborted: list[str] = []
        self.cancelled: list[str] = []
        self.second_chunk = asyncio.Event()

    async def generate(self, req):
        self.ids.append(req.request_id)
        if len(self.ids) == 1:
            return GenerateResult(req.request_id, "one two", None, "length")
        self.second_chunk.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(req.request_id)
            raise

    async def probe(self, prefix, suffix, max_tokens, *, request_id=None):
        await self.second_chunk.wait()  # the probe fails while chunk 2 runs
        raise HostRejectedError("probe too long", status=400)

    async def abort(self, request_id):
        self.aborted.append(request_id)


def test_a_failed_run_aborts_its_running_chunk_before_it_returns():
    host = FailingProbeHost()

    async def go():
        with pytest.raises(ProgramError) as err:
            await CoTWithProbe(chunk_tokens=8, max_tokens=64).run(host, "hi")
        # Still inside the loop, the client still open: nothing may be left running.
        return err.value

    err = asyncio.run(asyncio.wait_for(go(), 5.0))
    assert isinstance(err.__cause__, HostRejectedError) and err.trace.num_aborted == 1
    assert len(host.ids) == 2 and host.aborted == [host.ids[1]] and host.cancelled == [host.ids[1]]


class VotingHost:
    """Sample i (seed i) answers ``answers[i]``."""

    capabilities = Capabilities()

    def __init__(self, answers: str) -> None:
        self.answers = answers

    async def generate(self, req):
        return GenerateResult(req.request_id, f"so \\boxed{{{self.answers[req.seed]}}}", None, "stop")


def test_self_consistency_breaks_a_tie_by_the_answer_seen_first():
    program = SelfConsistency(samples_per_step=4, policy=EvenPolicy(4), seed=0)
    for answers, first in (("BAAB", "B"), ("ABBA", "A")):
        out = asyncio.run(program.run(VotingHost(answers), "q"))
        assert out.answer == first, answers


class StopAtOnce:
    name, requires = "stop-at-once", frozenset({"answers"})

    def start(self):
        return self

    def observe(self, obs):
        return StopDecision(True, obs.answer, 1.0)


class ScriptedHost:
    """Text-mode host: every chunk returns ``chunk`` at its length limit; probes answer 42."""

    capabilities = Capabilities()

    def __init__(self, chunk: str) -> None:
        self.chunk = chunk

    async def generate(self, req):
        return GenerateResult(req.request_id, self.chunk, None, "length")

    async def probe(self, prefix, suffix, max_tokens, *, request_id=None):
        return ProbeResult("42} done", None, "stop")

    async def abort(self, request_id):
        return None


@pytest.mark.parametrize(("chunk", "closes"), [("a b ", 1), ("a </think> b ", 1)])
def test_an_early_exit_closes_the_thinking_block_once(chunk, closes):
    out = asyncio.run(
        CoTWithProbe(chunk_tokens=4, max_tokens=64, rule=StopAtOnce()).run(ScriptedHost(chunk), "q")
    )
    assert out.trace.exit == "early" and out.answer == "42"
    assert out.text.count("</think>") == closes
    assert out.text.endswith("**Final Answer**\n\\boxed{42}")


class AlwaysGrant:
    """An allocation policy that never says stop."""

    def grant(self, status) -> bool:
        return True


class NeverEndingHost:
    """Answers every request at once with a step that never ends a path."""

    capabilities = Capabilities()

    def __init__(self) -> None:
        self.generated = 0

    async def generate(self, req):
        self.generated += 1
        await asyncio.sleep(0)
        return GenerateResult(req.request_id, "more thinking", None, "length")

    async def abort(self, request_id):
        return None


async def _length_scorer(prompt, texts):
    return [float(len(t)) for t in texts]


def test_a_policy_that_always_grants_still_ends_at_the_program_cap():
    host = NeverEndingHost()
    sc = asyncio.run(asyncio.wait_for(SelfConsistency(samples_per_step=3, max_samples=10, policy=AlwaysGrant())
                                      .run(host, "q"), 30))  # fmt: skip
    assert host.generated == 10 and sc.trace.exit == "budget"
    host = NeverEndingHost()
    steps = StepConfig(step_tokens=4, max_depth=10_000)
    mcts = MCTS(expansions=2, steps=steps, policy=AlwaysGrant(), scorer=_length_scorer, max_iterations=7)
    result = asyncio.run(asyncio.wait_for(mcts.run(host, "q"), 30))
    assert host.generated == 14 and result.trace.exit == "budget"


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
def test_program_caps_must_be_positive_ints(bad):
    with pytest.raises(InvalidArgumentError):
        SelfConsistency(max_samples=bad)
    with pytest.raises(InvalidArgumentError):
        MCTS(max_iterations=bad)
