"""EmbeddedClient over the in-process engine: seeds, stop strings, probes from the
prefix cache, abort and cancellation reach the engine, bad input is typed."""

from __future__ import annotations

import asyncio

import pytest

from _waits import until
from reasonserve.clients import GenerateRequest
from reasonserve.clients.embedded import EmbeddedClient
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine import Engine, EngineConfig, make_tiny_checkpoint

BLOCK = 4


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt"))
    return Engine.from_pretrained(path, EngineConfig(block_size=BLOCK, num_blocks=1024))


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_seeds_streams_and_probes(engine):
    async def go():
        c = EmbeddedClient(engine)
        req = GenerateRequest("Seed: ", max_tokens=21, seed=4)
        a, b = await asyncio.gather(c.generate(req), c.generate(req))
        chunks = [ch async for ch in c.stream(req)]
        prefix = a.prompt_token_ids + a.token_ids
        probe = await c.probe(prefix, " \\boxed{", 5)
        fresh = await c.generate(GenerateRequest(prefix + tuple(b" \\boxed{"), max_tokens=5, temperature=0.0))
        return a, b, chunks, probe, fresh, len(prefix)

    a, b, chunks, probe, fresh, n = run(go())
    assert a.token_ids == b.token_ids and len(a.token_ids) == 21 and a.finish_reason == "length"
    assert tuple(t for ch in chunks for t in ch.token_ids) == a.token_ids
    assert "".join(ch.text for ch in chunks) == a.text
    assert probe.token_ids == fresh.token_ids
    assert probe.num_computed_tokens <= BLOCK + len(b" \\boxed{") < n
    assert not engine.has_unfinished()


def test_stop_string_cuts_the_text_and_frees_the_request(engine):
    async def go():
        c = EmbeddedClient(engine)
        full = await c.generate(GenerateRequest("Stop: ", max_tokens=30, seed=9))
        stop = full.text[10:12]
        cut = await c.generate(GenerateRequest("Stop: ", max_tokens=30, seed=9, stop=(stop,)))
        return full, stop, cut

    full, stop, cut = run(go())
    assert cut.finish_reason == "stop" and cut.text == full.text[: full.text.index(stop)]
    assert not engine.has_unfinished()


def test_abort_and_cancel_reach_the_engine(engine):
    async def go():
        c = EmbeddedClient(engine)
        before = engine.num_aborted
        got = []
        async for ch in c.stream(GenerateRequest("Abort: ", max_tokens=1500, request_id="emb-1")):
            got.append(ch)
            if len(got) == 3:
                await c.abort("emb-1")
        task = asyncio.ensure_future(c.generate(GenerateRequest("Cancel: ", max_tokens=1500)))
        await until(lambda: engine.running, "the request to run")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until(lambda: not engine.has_unfinished(), "the engine to finish its requests")
        return before, got

    before, got = run(go())
    assert got[-1].finish_reason == "abort" and sum(len(ch.token_ids) for ch in got) < 1500
    assert engine.num_aborted == before + 2


def test_bad_input_is_typed_and_the_client_goes_on(engine):
    async def go():
        c = EmbeddedClient(engine)
        with pytest.raises(InvalidArgumentError, match="token ids"):
            await c.generate(GenerateRequest((1, 99999), max_tokens=2))
        with pytest.raises(InvalidArgumentError, match="max_model_len"):
            await c.generate(GenerateRequest("x", max_tokens=5000))
        return await c.generate(GenerateRequest("ok", max_tokens=2))

    assert run(go()).finish_reason == "length"


@pytest.mark.parametrize("deterministic", [False, True])
def test_finished_outputs_enter_the_prefix_cache_except_dvr_decodes(engine, deterministic):
    """A continuation of a finished request reuses its output blocks, unless the request
    was deterministic in DVR mode (its decoded KV came from the stock kernels)."""
    from reasonserve.engine import SamplingParams

    prompt = list(b"Prefix cache: ")  # 14 tokens: 3 full blocks
    params = SamplingParams(max_tokens=13, seed=1, deterministic=deterministic)
    first = engine.generate([prompt], params)[0]
    follow = engine.generate([prompt + first.token_ids], SamplingParams(max_tokens=2, deterministic=deterministic))[0]
    computed = len(prompt) + len(first.token_ids) - 1  # the last sampled token has no KV yet
    expected = (computed // BLOCK) * BLOCK if not deterministic else (len(prompt) // BLOCK) * BLOCK
    assert engine.config.mode == "dvr"
    assert follow.metrics.num_cached_tokens == expected
