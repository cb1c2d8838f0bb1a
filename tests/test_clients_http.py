"""HTTPClient against ``reasonserve serve`` on loopback (real HTTP, tiny random model):
seeded reproducibility, streaming, probes served from the prefix cache, abort and
priority direction."""

from __future__ import annotations

import asyncio

import pytest

from _live_server import live_server, tiny_engine, wait_until
from _waits import until
from reasonserve.clients import GenerateRequest, OpenAIShim
from reasonserve.clients.http import HTTPClient
from reasonserve.core.views import SchedulerView
from reasonserve.engine import Engine, EngineConfig, make_tiny_checkpoint
from reasonserve.policies._ranked import decide_ranked
from reasonserve.serve.config import ServeConfig

pytest.importorskip("uvicorn")

BLOCK = 4
CFG = ServeConfig(model_name="tiny", max_tokens_limit=1800, max_request_bytes=100_000)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    engine = tiny_engine(tmp_path_factory.mktemp("ckpt"), EngineConfig(block_size=BLOCK, num_blocks=1024))
    with live_server(engine, CFG) as server:
        yield server


def run(coro, timeout_s: float = 60.0):
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


def test_same_seed_same_tokens_and_stream_equals_generate(live):
    async def go():
        async with HTTPClient(live.url, OpenAIShim()) as c:
            req = GenerateRequest("Seeds: ", max_tokens=24, temperature=1.0, seed=7)
            a, b = await c.generate(req), await c.generate(req)
            other = await c.generate(GenerateRequest("Seeds: ", max_tokens=24, temperature=1.0, seed=8))
            chunks = [ch async for ch in c.stream(req)]
            return a, b, other, chunks

    a, b, other, chunks = run(go())
    assert a.token_ids == b.token_ids and len(a.token_ids) == 24 and a.finish_reason == "length"
    assert other.token_ids != a.token_ids  # the seed is really used
    assert tuple(t for ch in chunks for t in ch.token_ids) == a.token_ids
    assert "".join(ch.text for ch in chunks) == a.text and chunks[-1].finish_reason == "length"
    assert a.prompt_token_ids == tuple(b"Seeds: ")


def test_probe_reuses_the_prefix_cache_and_changes_nothing(live):
    async def go():
        async with HTTPClient(live.url, OpenAIShim()) as c:
            first = await c.generate(GenerateRequest("Probe me: ", max_tokens=37, seed=3))
            prefix = first.prompt_token_ids + first.token_ids
            suffix_ids = await c.encode(" **Final Answer** \\boxed{")
            probe = await c.probe(prefix, " **Final Answer** \\boxed{", 6)
            fresh = await c.generate(GenerateRequest(prefix + suffix_ids, max_tokens=6, temperature=0.0))
            again = await c.generate(GenerateRequest(prefix, max_tokens=5, seed=9))
            return prefix, suffix_ids, probe, fresh, again

    prefix, suffix_ids, probe, fresh, again = run(go())
    assert suffix_ids == tuple(b" **Final Answer** \\boxed{")  # /tokenize, byte tokenizer
    assert probe.token_ids == fresh.token_ids  # a probe is the greedy continuation
    assert probe.num_prompt_tokens == len(prefix) + len(suffix_ids)
    # The prompt's and the decoded output's full blocks come from the prefix cache.
    assert probe.num_computed_tokens is not None
    assert probe.num_computed_tokens <= BLOCK + len(suffix_ids)
    assert probe.num_computed_tokens < len(prefix)
    assert again.num_cached_tokens == len(prefix) // BLOCK * BLOCK - (BLOCK if len(prefix) % BLOCK == 0 else 0)


def test_abort_stops_a_stream_on_the_server(live):
    async def go():
        async with HTTPClient(live.url, OpenAIShim()) as c:
            before = live.runner.snapshot.num_aborted
            req = GenerateRequest("Long: ", max_tokens=1700, seed=1, request_id="abort-me")
            got = []
            async for ch in c.stream(req):
                got.append(ch)
                if sum(len(x.token_ids) for x in got) >= 3 and got[-1].finish_reason is None:
                    await c.abort("abort-me")
            return before, got

    before, got = run(go())
    assert got[-1].finish_reason == "abort"
    assert sum(len(x.token_ids) for x in got) < 1700  # it could not have finished on its own
    assert wait_until(lambda: live.runner.snapshot.num_aborted == before + 1)
    assert wait_until(lambda: live.runner.num_live == 0)


def test_leaving_a_stream_early_aborts_on_the_server(live):
    async def go():
        async with HTTPClient(live.url, OpenAIShim()) as c:
            before = live.runner.snapshot.num_aborted
            stream = c.stream(GenerateRequest("Leave: ", max_tokens=1700, seed=3))
            async for ch in stream:
                if ch.token_ids:
                    break
            await stream.aclose()  # what `async for` leaves to the garbage collector
            return before

    before = run(go())
    assert wait_until(lambda: live.runner.snapshot.num_aborted == before + 1)
    assert wait_until(lambda: live.runner.num_live == 0)


def test_cancelling_generate_aborts_on_the_server(live):
    async def go():
        async with HTTPClient(live.url, OpenAIShim()) as c:
            before = live.runner.snapshot.num_aborted
            task = asyncio.ensure_future(c.generate(GenerateRequest("Cancel: ", max_tokens=1700, seed=2)))
            await until(lambda: live.runner.snapshot.num_running, "the request to run")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return before

    before = run(go())
    assert wait_until(lambda: live.runner.snapshot.num_aborted == before + 1)
    assert wait_until(lambda: live.runner.num_live == 0)


class PriorityFirst:
    """Test policy: waiting requests by priority (larger first), then arrival."""

    def decide(self, view: SchedulerView):
        waiting = sorted(view.waiting, key=lambda r: (-r.priority, r.arrival_s))
        return decide_ranked(view, [*view.running, *waiting])


def test_priority_direction_reaches_the_engine(tmp_path):
    config = EngineConfig(block_size=BLOCK, num_blocks=1024, max_num_seqs=1)
    engine = Engine.from_pretrained(make_tiny_checkpoint(tmp_path), config, policy=PriorityFirst())

    async def go(url, runner):
        async with HTTPClient(url, OpenAIShim()) as c:
            order: list[str] = []

            async def one(name, priority, n):
                await c.generate(GenerateRequest("P", max_tokens=n, seed=1, priority=priority, request_id=name))
                order.append(name)

            blocker = asyncio.ensure_future(one("blocker", 0, 300))
            await until(lambda: runner.snapshot.num_running, "the blocker to run")
            low = asyncio.ensure_future(one("low", -5, 4))
            await until(lambda: runner.snapshot.num_waiting >= 1 or blocker.done(), "low to queue first")
            high = asyncio.ensure_future(one("high", 5, 4))
            await until(lambda: runner.snapshot.num_waiting >= 2 or blocker.done(), "high to queue")
            waited = runner.snapshot.num_waiting
            await asyncio.gather(blocker, low, high)
            return order, waited

    with live_server(engine, CFG) as server:
        order, waited = run(go(server.url, server.runner))
    assert waited == 2  # both queued behind the blocker: the order below is the policy's
    assert order == ["blocker", "high", "low"]

