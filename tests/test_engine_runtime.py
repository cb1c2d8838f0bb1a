"""Engine runtime: continuous batching, prefix sharing, preemption, abort, bad requests."""

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.core import InvalidArgumentError, Phase, UnknownRequestError
from reasonserve.engine import Engine, EngineConfig, SamplingParams, SequenceBatch, make_tiny_checkpoint
from reasonserve.engine.block_manager import BlockManager, OutOfBlocks


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


def _greedy_reference(model, prompt, n):
    tokens = list(prompt)
    for _ in range(n):
        logits, _ = model.forward(SequenceBatch([torch.tensor(tokens)], [0], [None]))
        tokens.append(int(logits[0][-1].argmax()))
    return tokens[len(prompt) :]


def test_greedy_generation_matches_the_model_alone(ckpt):
    config = EngineConfig(block_size=4, num_blocks=64, max_num_batched_tokens=8, mode="batch_invariant")
    eng = Engine.from_pretrained(ckpt, config)
    prompts = [[1, 2, 3, 4, 5, 6, 7], [9, 8, 7], [5] * 19]
    outs = eng.generate(prompts, SamplingParams(max_tokens=6, temperature=0.0))
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.token_ids == _greedy_reference(eng.model, prompt, 6)
        assert out.finish_reason == "length" and out.phase is Phase.FINISHED
    eng.check_blocks()
    assert eng.blocks.num_free == 64


def _run(ckpt, config, requests):
    eng = Engine.from_pretrained(ckpt, config)
    outs = eng.generate([r[0] for r in requests], [r[1] for r in requests])
    eng.check_blocks()
    return eng, {tuple(r[0]): o.token_ids for r, o in zip(requests, outs, strict=True)}


def _requests(seed, n=6, deterministic=True):
    rng = random.Random(seed)
    return [([rng.randrange(256) for _ in range(rng.randint(1, 30))],
             SamplingParams(max_tokens=rng.randint(1, 8), temperature=rng.choice([0.0, 0.7, 1.3]),
                            top_p=rng.choice([1.0, 0.9]), seed=rng.randrange(2**32), deterministic=deterministic))
            for _ in range(n)]  # fmt: skip


@pytest.mark.slow
@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), preemption=st.sampled_from(["recompute", "swap"]))
def test_outputs_do_not_depend_on_batching_arrival_order_or_preemption(ckpt, preemption, seed):
    """Deterministic requests (DVR mode) against the all-batch-invariant mode."""
    requests = _requests(seed)
    _, roomy = _run(ckpt, EngineConfig(block_size=4, num_blocks=256, mode="batch_invariant"), requests)
    shuffled = requests[:]
    random.Random(seed + 1).shuffle(shuffled)
    # Tiny KV and token budget: chunked prefill and recompute preemption happen.
    tight_config = EngineConfig(block_size=4, num_blocks=14, max_num_batched_tokens=7, max_num_seqs=3,
                                preemption=preemption)  # fmt: skip
    _, tight = _run(ckpt, tight_config, shuffled)
    assert tight == roomy


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_preemption_really_happens_with_a_small_cache(ckpt, preemption):
    config = EngineConfig(block_size=4, num_blocks=10, max_num_batched_tokens=64, preemption=preemption)
    eng = Engine.from_pretrained(ckpt, config)
    params = SamplingParams(max_tokens=10, temperature=0.9, seed=3, deterministic=True)
    prompts = [[1] * 12, [2] * 12, [3] * 12]
    outs = eng.generate(prompts, params)
    assert sum(o.metrics.num_preemptions for o in outs) > 0
    if preemption == "swap":
        assert sum(o.metrics.num_swaps for o in outs) > 0
    reference = Engine.from_pretrained(ckpt, EngineConfig(mode="batch_invariant")).generate(prompts, params)
    assert [o.token_ids for o in outs] == [o.token_ids for o in reference]
    eng.check_blocks()


def test_deterministic_outputs_survive_aborts_of_other_requests(ckpt):
    params = SamplingParams(max_tokens=12, temperature=1.1, seed=77, deterministic=True)
    reference = Engine.from_pretrained(ckpt, EngineConfig(mode="batch_invariant")).generate([[4, 5, 6]], params)
    eng = Engine.from_pretrained(ckpt, EngineConfig(block_size=4, num_blocks=64, dvr_window=3))
    target = eng.add_request([4, 5, 6], params)
    others = [eng.add_request([i, i + 1], SamplingParams(max_tokens=30)) for i in range(6)]
    done: dict = {}
    for step in range(200):
        done |= {o.request_id: o for o in eng.step()}
        if step % 3 == 0 and others:
            rid = others.pop()
            if rid not in done:
                assert eng.abort(rid).finish_reason == "abort"
        eng.check_blocks()
        if target in done:
            break
    assert done[target].token_ids == reference[0].token_ids


def test_prefix_blocks_are_shared_and_reused(ckpt):
    eng = Engine.from_pretrained(ckpt, EngineConfig(block_size=4, num_blocks=64, mode="batch_invariant"))
    shared = list(range(1, 13))
    first = eng.generate([[*shared, 50]], SamplingParams(max_tokens=2, temperature=0.0))[0]
    second = eng.generate([[*shared, 60]], SamplingParams(max_tokens=2, temperature=0.0))[0]
    assert first.metrics.num_cached_tokens == 0
    assert second.metrics.num_cached_tokens == 12  # three full 4-token blocks reused
    assert first.token_ids == _greedy_reference(eng.model, [*shared, 50], 2)
    assert second.token_ids == _greedy_reference(eng.model, [*shared, 60], 2)
    eng.check_blocks()


def test_abort_frees_every_block_and_other_requests_continue(ckpt):
    eng = Engine.from_pretrained(ckpt, EngineConfig(block_size=4, num_blocks=32, mode="batch_invariant"))
    a = eng.add_request([1, 2, 3, 4, 5], SamplingParams(max_tokens=20, temperature=0.0))
    b = eng.add_request([7, 8, 9], SamplingParams(max_tokens=4, temperature=0.0))
    eng.step()
    assert eng.metrics().kv_blocks_used > 0
    out = eng.abort(a)
    assert out.finish_reason == "abort" and len(out.token_ids) < 20  # aborted before it could finish
    eng.check_blocks()
    done = []
    while eng.has_unfinished():
        done += eng.step()
    assert [o.request_id for o in done] == [b]  # the aborted request is never returned again
    assert done[0].token_ids == _greedy_reference(eng.model, [7, 8, 9], 4)
    assert eng.blocks.num_free == 32
    with pytest.raises(UnknownRequestError, match="unknown"):
        eng.abort(a)
    assert eng.metrics().num_aborted == 1 and eng.metrics().num_finished == 2


def test_abort_of_a_waiting_and_a_running_request_frees_their_blocks_at_once(ckpt):
    eng = Engine.from_pretrained(ckpt, EngineConfig(block_size=4, num_blocks=32, max_num_seqs=1))
    running = eng.add_request([1, 2, 3, 4, 5, 6], SamplingParams(max_tokens=50))
    waiting = eng.add_request([9, 9], SamplingParams(max_tokens=50))
    eng.step()
    assert eng.metrics().num_waiting == 1 and eng.metrics().kv_blocks_used >= 2
    assert eng.abort(waiting).finish_reason == "abort"
    out = eng.abort(running)
    assert out.finish_reason == "abort" and 0 < len(out.token_ids) < 50
    m = eng.metrics()
    assert (m.num_running, m.num_waiting, m.kv_blocks_used) == (0, 0, 0)
    assert not eng.has_unfinished() and eng.step() == []
    with pytest.raises(UnknownRequestError):
        eng.verified_tokens(running)


def test_one_failing_request_finishes_with_error_and_the_others_continue(ckpt):
    def fault(rid, _pos, token):
        if rid == "bad":
            raise RuntimeError("sampling exploded")
        return token

    eng = Engine.from_pretrained(ckpt, EngineConfig(block_size=4, num_blocks=64), fast_path_fault=fault)
    eng.add_request([1, 2, 3], SamplingParams(max_tokens=6, temperature=0.0), request_id="bad")
    eng.add_request([1, 2, 3], SamplingParams(max_tokens=6, temperature=0.0), request_id="good")
    done = []
    while eng.has_unfinished():
        done += eng.step()
    by_id = {o.request_id: o for o in done}
    assert by_id["bad"].finish_reason == "error" and "sampling exploded" in by_id["bad"].error
    assert by_id["good"].finish_reason == "length" and len(by_id["good"].token_ids) == 6
    assert eng.blocks.num_free == 64


def test_duplicate_ids_and_requests_that_can_never_fit_are_rejected(ckpt):
    eng = Engine.from_pretrained(ckpt, EngineConfig(block_size=4, num_blocks=8, max_model_len=64))
    eng.add_request([1, 2], SamplingParams(max_tokens=4), request_id="x")
    with pytest.raises(InvalidArgumentError, match="already in use"):
        eng.add_request([1, 2], SamplingParams(max_tokens=4), request_id="x")
    with pytest.raises(InvalidArgumentError, match="max_model_len"):
        eng.add_request([1] * 10, SamplingParams(max_tokens=60))
    with pytest.raises(InvalidArgumentError, match="KV cache"):
        eng.add_request([1] * 10, SamplingParams(max_tokens=30))  # 40 tokens > 8 blocks x 4
    assert eng.metrics().num_waiting == 1


def _first_new(tokens, start):
    return next(i for i in range(start, len(tokens) - 1) if tokens[i] not in tokens[:i])


def test_a_reasoning_request_crosses_end_of_thinking_and_ttfat_starts_there(ckpt):
    """End-of-thinking is chosen before the run (a token greedy decoding emits at index k);
    with one token per step on a fake clock, TTFAT is exactly one step."""
    prompt, params = [3, 4, 5], SamplingParams(max_tokens=12, temperature=0.0)
    plain = _greedy_reference(Engine.from_pretrained(ckpt).model, prompt, 12)
    k = _first_new(plain, 3)
    now = [0.0]
    eng = Engine.from_pretrained(ckpt, EngineConfig(end_of_thinking_token_id=plain[k], mode="batch_invariant"),
                                 clock=lambda: now[0])  # fmt: skip
    eng.add_request(prompt, params)
    phases, out = [], []
    while not out:
        now[0] += 1.0
        out = eng.step()
        phases.append(out[0].phase if out else eng.running[0].phase)
    assert phases[:k] == [Phase.REASONING] * k and phases[k] is Phase.ANSWERING  # crossed at token k
    m = out[0].metrics
    assert m.ttft_s == 1.0 and m.end_of_thinking_s == 1.0 + k and m.first_answer_token_s == 2.0 + k
    assert m.ttfat_s == 1.0  # from the end of thinking, not from arrival (k + 2)
    eng2 = Engine.from_pretrained(ckpt)
    out = eng2.generate([[3, 4, 5]], SamplingParams(max_tokens=2, temperature=0.0))[0]
    assert out.metrics.ttfat_s == out.metrics.ttft_s  # no thinking phase configured


@pytest.mark.parametrize(
    ("prompt", "params", "message"),
    [([], None, "non-empty"), ([1, 999], None, "token ids"), ([1, -1], None, "token ids"),
     ("", None, "non-empty"), ([1] * 3000, None, "max_model_len"), ([1], "greedy", "SamplingParams")],
)  # fmt: skip
def test_bad_requests_are_rejected_and_the_engine_keeps_serving(ckpt, prompt, params, message):
    eng = Engine.from_pretrained(ckpt)
    with pytest.raises(InvalidArgumentError, match=message):
        eng.add_request(prompt, params)
    assert eng.generate([[1, 2]], SamplingParams(max_tokens=1))[0].token_ids


def test_bad_sampling_params():
    for kwargs in (dict(max_tokens=0), dict(max_tokens=2**31), dict(max_tokens=True), dict(temperature=float("nan")),
                   dict(temperature=float("inf")), dict(top_p=0.0), dict(top_p=float("nan")), dict(top_k=-2),
                   dict(top_k=2**31), dict(min_p=2.0), dict(seed=-1), dict(seed=2**63), dict(stop_token_ids=(-1,)),
                   dict(stop_token_ids=(2**31,)), dict(priority=2**31), dict(logprobs=21)):  # fmt: skip
        field = next(iter(kwargs))
        with pytest.raises(InvalidArgumentError, match=field):
            SamplingParams(**kwargs)
    assert SamplingParams(top_k=-1, seed=2**63 - 1).effective_top_k == 0


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["alloc", "grow", "fork", "free"]), st.integers(0, 40)), max_size=40)
)
def test_block_manager_accounting_under_random_operations(ops_):
    bm = BlockManager(num_blocks=12, block_size=4)
    tables: list[tuple[list[int], int]] = []
    for op, n in ops_:
        try:
            if op == "alloc":
                tokens = list(range(n % 20 + 1))
                table, _ = bm.allocate_prompt(tokens)
                bm.register_full_blocks(table, tokens, len(tokens))
                tables.append((table, len(tokens)))
            elif op == "grow" and tables:
                table, length = tables[n % len(tables)]
                bm.ensure_capacity(table, length + 1)
                tables[n % len(tables)] = (table, length + 1)
            elif op == "fork" and tables:
                table, length = tables[n % len(tables)]
                tables.append((bm.fork(table), length))
            elif op == "free" and tables:
                bm.free(tables.pop(n % len(tables))[0])
        except OutOfBlocks:
            pass
        bm.check([t for t, _ in tables])


def test_probe_runs_a_fork_and_leaves_the_request_untouched(ckpt):
    config = EngineConfig(block_size=4, num_blocks=64, mode="batch_invariant")
    eng = Engine.from_pretrained(ckpt, config)
    rid = eng.add_request(list(range(1, 11)), SamplingParams(max_tokens=12, temperature=0.0))
    for _ in range(4):
        eng.step()
    seq = next(s for s in eng.running if s.request_id == rid)
    before = (list(seq.output), list(seq.block_table), seq.num_computed)
    kv_before = eng.cache.gather(seq.block_table, seq.num_computed)
    suffix = [200, 201, 202]
    probe = eng.probe(rid, suffix, max_tokens=5)
    # The probe equals greedy decoding of (current tokens + suffix) from scratch.
    assert probe == _greedy_reference(eng.model, seq.tokens + suffix, 5)
    assert (list(seq.output), list(seq.block_table), seq.num_computed) == before
    kv_after = eng.cache.gather(seq.block_table, seq.num_computed)
    assert torch.equal(kv_before[0], kv_after[0]) and torch.equal(kv_before[1], kv_after[1])
    eng.check_blocks()
    done = []
    while eng.has_unfinished():
        done += eng.step()
    assert done[0].token_ids == _greedy_reference(eng.model, list(range(1, 11)), 12)
    with pytest.raises(UnknownRequestError):
        eng.probe(rid, [1], 3)  # finished: unknown to probe
    with pytest.raises(UnknownRequestError):
        Engine.from_pretrained(ckpt).probe("nope", [1], 3)


def test_text_prompts_need_a_tokenizer(ckpt):
    out = Engine.from_pretrained(ckpt).generate(["hi"], SamplingParams(max_tokens=2, temperature=0.0))[0]
    assert out.prompt_token_ids == [104, 105] and isinstance(out.text, str)  # byte tokenizer
    bare = Engine(Engine.from_pretrained(ckpt).model, tokenizer=None)
    with pytest.raises(InvalidArgumentError, match="tokenizer"):
        bare.add_request("hi")


def test_fast_path_prefills_never_feed_the_prefix_cache_of_deterministic_requests(ckpt):
    """In DVR mode non-deterministic prompts run on the stock kernels: their blocks are cached
    for other fast-path requests only, so a deterministic request recomputes its prefix."""
    eng = Engine.from_pretrained(ckpt, EngineConfig(block_size=4, num_blocks=64))
    shared = list(range(1, 13))
    fast = SamplingParams(max_tokens=2, temperature=0.0)
    det = SamplingParams(max_tokens=4, temperature=0.0, deterministic=True)
    eng.generate([[*shared, 50]], fast)
    again, exact = eng.generate([[*shared, 60], [*shared, 70]], [fast, det])
    assert again.metrics.num_cached_tokens == 12  # fast path reuses fast-path blocks
    assert exact.metrics.num_cached_tokens == 0  # never stock KV under a deterministic request
    reference = Engine.from_pretrained(ckpt, EngineConfig(mode="batch_invariant")).generate([[*shared, 70]], det)
    assert exact.token_ids == reference[0].token_ids
    eng.check_blocks()
