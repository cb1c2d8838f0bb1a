"""The reasoning programs end to end: over real HTTP against ``reasonserve serve`` (tiny
random model on loopback) and on the embedded engine. Early exit is forced with a
scripted stopping rule so the exit branch is really taken."""

from __future__ import annotations

import asyncio
import time

import pytest

from _live_server import live_server, tiny_engine, wait_until
from _waits import until
from reasonserve.certainindex.allocation import EvenPolicy
from reasonserve.certainindex.stopping import AgreeSpanRule, StopDecision
from reasonserve.clients import HostRejectedError, OpenAIShim
from reasonserve.clients.embedded import EmbeddedClient
from reasonserve.clients.http import HTTPClient
from reasonserve.engine import EngineConfig
from reasonserve.programs import (
    MCTS,
    BeamSearchPRM,
    CoTWithProbe,
    ProgramError,
    Rebase,
    SelfConsistency,
    StepConfig,
    Trace,
)
from reasonserve.serve.config import ServeConfig

pytest.importorskip("uvicorn")

BLOCK = 4
CFG = ServeConfig(model_name="tiny", max_tokens_limit=1800, max_request_bytes=100_000)
SUFFIX = " **Final Answer** \\boxed{"


class StopAfter:
    """A scripted stopping rule: stop at the n-th probe with that probe's text as answer."""

    name, requires = "stop-after", frozenset({"answers"})

    def __init__(self, n: int) -> None:
        self.n, self.seen = n, []

    def start(self):
        rule = self

        class State:
            def observe(self, obs):
                rule.seen.append(obs)
                return StopDecision(len(rule.seen) >= rule.n, f"probe{len(rule.seen)}", len(rule.seen) / rule.n)

        return State()


class Timed:
    """A real client wrapped to record when each request ran (for the overlap check)."""

    def __init__(self, inner) -> None:
        self.inner, self.spans = inner, []
        self.capabilities = inner.capabilities

    async def _timed(self, kind, coro):
        start = time.perf_counter()
        out = await coro
        self.spans.append((kind, start, time.perf_counter()))
        return out

    async def generate(self, req):
        return await self._timed("chunk", self.inner.generate(req))

    async def probe(self, prefix, suffix, max_tokens, *, request_id=None):
        return await self._timed("probe", self.inner.probe(prefix, suffix, max_tokens, request_id=request_id))

    def stream(self, req):
        return self.inner.stream(req)

    async def abort(self, request_id):
        await self.inner.abort(request_id)

    async def score(self, prompt, responses):
        return await self.inner.score(prompt, responses)


async def length_scorer(prompt: str, texts: list[str]) -> list[float]:
    """A pluggable scorer (stands in for a reward model): deterministic in the text."""
    return [(sum(map(ord, t)) % 97) / 97 for t in texts]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    engine = tiny_engine(tmp_path_factory.mktemp("ckpt"), EngineConfig(block_size=BLOCK, num_blocks=1024))
    with live_server(engine, CFG) as server:
        yield server


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    return tiny_engine(tmp_path_factory.mktemp("ckpt-embedded"), EngineConfig(block_size=BLOCK, num_blocks=1024))


def run(coro, timeout_s: float = 60.0):
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


async def _http(live, fn):
    async with HTTPClient(live.url, OpenAIShim()) as client:
        return await fn(client)


def test_cot_early_exit_over_http_aborts_the_running_chunk(live):
    rule = StopAfter(2)
    cot = CoTWithProbe(chunk_tokens=120, max_tokens=1500, probe_tokens=4, probe_suffix=SUFFIX, rule=rule, seed=5)
    before = live.runner.snapshot.num_aborted
    holder = {}

    async def go(client):
        holder["timed"] = Timed(client)
        return await cot.run(holder["timed"], "Question: 1+1? <think>")

    out = run(_http(live, go))
    t = out.trace
    assert t.exit == "early" and out.answer == "probe2"  # the exit branch, with the rule's answer
    assert (t.num_chunks, t.num_probes, t.tokens_generated) == (2, 2, 240)
    assert [o.position for o in rule.seen] == [120, 240]
    assert out.text.endswith("\n</think>\n\n**Final Answer**\n\\boxed{probe2}")
    assert t.num_aborted == 1  # the third chunk was running when the rule stopped
    assert wait_until(lambda: live.runner.snapshot.num_aborted == before + 1)
    assert wait_until(lambda: live.runner.num_live == 0)
    # Each probe ran while the next chunk was decoding (overlap), and reused the prefix cache.
    spans = holder["timed"].spans
    probes = [s for s in spans if s[0] == "probe"]
    second_chunk = [s for s in spans if s[0] == "chunk"][1]
    assert probes[0][1] < second_chunk[2] and probes[0][2] > second_chunk[1]
    suffix_len = len(SUFFIX.encode())
    assert t.probe_prompt_tokens_computed is not None
    assert t.probe_prompt_tokens_computed <= t.num_probes * (BLOCK + suffix_len)


def test_cot_runs_to_the_budget_without_an_exit_and_is_reproducible(live):
    never = AgreeSpanRule(tokens=10_000, min_tokens=10_000)
    cot = CoTWithProbe(chunk_tokens=16, max_tokens=40, probe_tokens=3, probe_suffix=SUFFIX, rule=never, seed=11)
    a = run(_http(live, lambda c: cot.run(c, "Q: 2+2? <think>")))
    b = run(_http(live, lambda c: cot.run(c, "Q: 2+2? <think>")))
    assert a.trace.exit == "budget" and a.trace.tokens_generated == 40
    assert a.trace.num_chunks == 3 and a.trace.num_probes == 2  # 16 + 16 + 8, no probe after the last
    assert a.text == b.text  # same seed, same reasoning


def test_cancelling_a_program_aborts_everything_it_started(live):
    cot = CoTWithProbe(chunk_tokens=1500, max_tokens=1500, probe_suffix=SUFFIX, rule=StopAfter(99), seed=1)
    trace = Trace("cot")
    before = live.runner.snapshot.num_aborted

    async def go(client):
        task = asyncio.ensure_future(cot.run(client, "Long question <think>", trace=trace))
        await until(lambda: live.runner.snapshot.num_running, "the chunk to run")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(_http(live, go))
    assert trace.exit == "cancelled" and trace.num_aborted == 1
    assert wait_until(lambda: live.runner.snapshot.num_aborted == before + 1)
    assert wait_until(lambda: live.runner.num_live == 0)


def test_a_failure_keeps_the_partial_trace_and_aborts_the_next_chunk(live):
    # The probe asks for more tokens than the server allows: a 400 after the first chunk.
    cot = CoTWithProbe(chunk_tokens=200, max_tokens=1000, probe_tokens=1801, probe_suffix=SUFFIX,
                       rule=StopAfter(99), seed=2)  # fmt: skip
    before = live.runner.snapshot.num_aborted
    with pytest.raises(ProgramError) as info:
        run(_http(live, lambda c: cot.run(c, "Q <think>")))
    assert isinstance(info.value.__cause__, HostRejectedError)
    trace = info.value.trace
    assert trace.exit == "error" and trace.num_chunks == 1 and trace.tokens_generated == 200
    assert trace.num_aborted == 1  # chunk 2 was running: aborted
    assert wait_until(lambda: live.runner.snapshot.num_aborted == before + 1)


@pytest.mark.parametrize("where", ["http", "embedded"])
def test_every_program_runs(live, embedded, where):
    steps = StepConfig(step_tokens=6, max_depth=3, seed=5)
    programs = {
        "cot": CoTWithProbe(chunk_tokens=8, max_tokens=32, probe_tokens=3, probe_suffix=SUFFIX,
                            rule=StopAfter(2), seed=1),
        "sc": SelfConsistency(samples_per_step=2, max_tokens=8, policy=EvenPolicy(4), seed=3),
        "rebase": Rebase(width=3, steps=steps, scorer=length_scorer),
        "mcts": MCTS(expansions=2, steps=steps, policy=EvenPolicy(3), scorer=length_scorer),
        "beam": BeamSearchPRM(beam_width=2, expansions=2, steps=steps, scorer=length_scorer),
    }

    async def all_of(client):
        return {name: await p.run(client, "Q: 3*3? ") for name, p in programs.items()}

    outs = run(_http(live, all_of)) if where == "http" else run(all_of(EmbeddedClient(embedded)))
    assert outs["cot"].trace.exit == "early" and outs["cot"].trace.num_probes == 2
    sc = outs["sc"].trace
    assert sc.num_requests == 4 and sc.tokens_generated == 32 and sc.exit == "denied"
    assert 0.0 <= outs["sc"].certainty <= 1.0
    assert outs["mcts"].trace.exit == "denied"
    assert len([e for e in outs["mcts"].trace.events if e["kind"] == "iteration"]) == 3
    assert outs["mcts"].trace.num_requests == 3 * 2  # iterations x expansions
    # Rebase keeps at most `width` paths open per depth; beam search scores at most
    # beam_width x expansions candidates per round.
    assert all(e["n"] <= 3 for e in outs["rebase"].trace.events if e["kind"] == "score")
    assert all(e["n"] <= 2 * 2 for e in outs["beam"].trace.events if e["kind"] == "score")
    for name in ("rebase", "mcts", "beam"):
        t = outs[name].trace
        assert t.tokens_generated > 0 and t.num_requests >= 2 and t.num_aborted == 0, name
        assert any(e["kind"] == "score" for e in t.events), name
    assert embedded.has_unfinished() is False


def test_search_programs_need_a_reward_model(live):
    with pytest.raises(Exception, match="reward model"):
        run(_http(live, lambda c: Rebase(width=2).run(c, "Q")))


def test_cancelling_self_consistency_aborts_its_samples_on_the_embedded_engine(embedded):
    sc = SelfConsistency(samples_per_step=3, max_tokens=1500, policy=EvenPolicy(3), seed=1)
    trace = Trace("sc")

    async def go():
        before = embedded.num_aborted
        task = asyncio.ensure_future(sc.run(EmbeddedClient(embedded), "Q ", trace=trace))
        await until(lambda: len(embedded.running) >= 3, "the 3 samples to run")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until(lambda: not embedded.has_unfinished(), "the aborted samples to leave")
        return before

    before = run(go())
    assert trace.exit == "cancelled" and trace.num_aborted == 3
    assert embedded.num_aborted == before + 3
