"""SimClient: programs on the simulator's cost model (virtual time, synthetic tokens)."""

from __future__ import annotations

import asyncio

import pytest

from reasonserve.certainindex.allocation import ThresholdPolicy
from reasonserve.certainindex.stopping import AgreeSpanRule
from reasonserve.clients import GenerateRequest, UnsupportedError
from reasonserve.clients.sim import SimClient
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.programs import CoTWithProbe, Rebase, SelfConsistency
from reasonserve.sim import HARDWARE, MODELS, RooflineCostModel

COST = RooflineCostModel(HARDWARE["h100"], MODELS["qwen3-8b"])
SUFFIX = "\n**Final Answer** \\boxed{"


def settles(position: int) -> str:
    """A scripted answer curve: no answer until 300 prompt+reasoning tokens, then 42."""
    return "" if position < 300 else "42"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_cot_exits_on_the_scripted_answer_and_probes_overlap_in_virtual_time():
    client = SimClient(COST, block_size=16, probe_answer=settles, seed=1)
    rule = AgreeSpanRule(tokens=64, min_tokens=0, interval_tokens=32, hesitation=False)
    cot = CoTWithProbe(chunk_tokens=32, max_tokens=4096, probe_tokens=4, probe_suffix=SUFFIX, rule=rule, seed=3)
    prompt = tuple(range(100))
    out = run(cot.run(client, prompt))
    t = out.trace
    assert t.exit == "early" and out.answer == "42"
    # Probes see 100 + 32k tokens: 42 first at k = 7 (324 tokens), agreed at the next probe.
    assert t.tokens_generated == 8 * 32 and t.num_probes == 8
    # Every probe (4 steps) ran inside the next chunk's steps: 8 chunks of 32 steps, plus
    # the last probe's 4 beside the ninth chunk, aborted at the exit (sequential: 256 + 32).
    assert client.num_steps == t.tokens_generated + 4 and t.num_aborted == 1
    assert t.probe_prompt_tokens_computed <= t.num_probes * (16 + len(SUFFIX.encode()))
    assert 0 < client.now_s < 10.0


def test_virtual_time_grows_with_the_work():
    async def cost(n: int) -> float:
        client = SimClient(COST)
        out = await client.generate(GenerateRequest(tuple(range(64)), max_tokens=n, seed=1))
        assert out.finish_reason == "length" and len(out.token_ids) == n
        return out.elapsed_s

    short, long = run(cost(8)), run(cost(64))
    assert 0 < short < long
    again = SimClient(COST)
    a = run(again.generate(GenerateRequest((1, 2, 3), max_tokens=9, seed=5)))
    b = run(SimClient(COST).generate(GenerateRequest((1, 2, 3), max_tokens=9, seed=5)))
    assert a.token_ids == b.token_ids  # seeded


def test_abort_and_missing_reward_model():
    async def go():
        client = SimClient(COST)
        task = asyncio.ensure_future(client.generate(GenerateRequest((1, 2), max_tokens=10_000, request_id="s")))
        while client.num_steps < 3:
            await asyncio.sleep(0)
        await client.abort("s")
        return await task

    out = run(go())
    assert out.finish_reason == "abort" and len(out.token_ids) < 10_000
    with pytest.raises(UnsupportedError, match="reward model"):
        run(Rebase(width=2).run(SimClient(COST), "Q"))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"block_size": "16"},
        {"block_size": True},
        {"vocab_size": 2.5},
        {"vocab_size": 2**40},
        {"eos_probability": "0.1"},
        {"eos_probability": float("nan")},
        {"eos_token_id": -5},
        {"eos_token_id": 256},
        {"seed": "s"},
        {"outputs": 5},
    ],
)
def test_bad_configs_are_typed_errors(kwargs):
    with pytest.raises(InvalidArgumentError):
        SimClient(COST, **kwargs)


def recorded(answers: str, lengths: list[int]):
    """Sample i (its seed: the programs below start at seed 0) answers ``answers[i]`` after
    ``lengths[i]`` tokens, as a recorded self-consistency question would."""

    def outputs(req):
        return lengths[req.seed], f"so \\boxed{{{answers[req.seed]}}}"

    return outputs


def test_self_consistency_reads_the_allocation_after_each_sample_and_stops_live_ones():
    lengths = [20, 25, 600, 600, 600, 600, 600, 600]
    eager = ThresholdPolicy(0.7, detect_at=2, max_knob=8)
    sc = SelfConsistency(samples_per_step=8, max_samples=8, max_tokens=1000, policy=eager, seed=0)
    client = SimClient(COST, outputs=recorded("11111111", lengths))
    out = run(sc.run(client, "question 7", program_id="p7"))
    t = out.trace
    # Denied at knob 2 (two agreeing answers): the six live samples are aborted, not run out.
    assert out.answer == "1" and t.exit == "denied" and out.certainty == 1.0
    assert t.num_requests == 8 and t.num_aborted == 6 and t.tokens_generated == 20 + 25
    assert client.num_steps < 40 and not client._live  # the 25 steps of the second sample, the abort lands
    full = SimClient(COST, outputs=recorded("11111111", lengths))
    every = SelfConsistency(samples_per_step=8, max_samples=8, max_tokens=1000, policy=ThresholdPolicy(1.0, detect_at=8),
                           seed=0)
    run(every.run(full, "question 7"))
    assert full.now_s > 10 * client.now_s  # the stopped samples' compute was really not spent


@pytest.mark.parametrize(("answers", "issued"), [("11111222", 5), ("12345111", 8)])
def test_self_consistency_rounds_detect_at_the_first_and_issue_the_rest(answers, issued):
    """The paper's two rounds: 5 samples, the certainty read at detect@5, then the other 3
    unless certain; the requests carry the program's id and their sample index."""
    seen: list[str] = []

    def outputs(req):
        seen.append(req.request_id)
        return recorded(answers, [30, 40, 50, 60, 70, 80, 90, 100])(req)

    policy = ThresholdPolicy(0.7, detect_at=5, recheck_every=8, max_knob=8)
    sc = SelfConsistency(samples_per_step=8, first_step=5, max_samples=8, max_tokens=200, policy=policy, seed=0)
    out = run(sc.run(SimClient(COST, outputs=outputs), "q", program_id="p"))
    assert seen == [f"p/s{i}" for i in range(issued)]
    assert out.trace.num_requests == issued and out.trace.num_aborted == 0
    assert out.trace.tokens_generated == sum([30, 40, 50, 60, 70, 80, 90, 100][:issued])
    assert out.answer == "1" and out.trace.exit == ("denied" if issued == 5 else "budget")


def test_self_consistency_rejects_bad_rounds_and_program_ids():
    with pytest.raises(InvalidArgumentError):
        SelfConsistency(first_step=0)
    with pytest.raises(InvalidArgumentError):
        run(SelfConsistency().run(SimClient(COST), "q", program_id=""))
