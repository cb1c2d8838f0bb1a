"""Decode-verify-rollback: the pure controller and the engine under an adversarial fast path."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.core import InvalidArgumentError, Phase
from reasonserve.dvr import DVRState, accept, plan_groups, verify_inputs
from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint


def test_accept_keeps_the_agreeing_prefix_and_the_verifier_token():
    assert accept([1, 2, 3], [1, 2, 3]).committed == 3
    r = accept([1, 2, 3, 4], [1, 9, 3, 4])
    assert (r.keep, r.replacement, r.committed) == (1, 9, 2)
    assert accept([5], [6]).committed == 1  # every pass makes progress
    with pytest.raises(InvalidArgumentError):
        accept([], [])


def test_plan_groups_pads_to_a_fixed_shape():
    assert plan_groups(["a", "b", "c"], 2) == [["a", "b"], ["c", None]]
    assert plan_groups([], 4) == []


def test_verify_inputs_replays_the_last_verified_token_and_the_unverified_but_last():
    state = DVRState(verified=2)
    tokens = [10, 11, 12, 1, 2, 3, 4, 5]  # prompt of 3, outputs 1..5
    assert verify_inputs(tokens, 3, state) == ([2, 3, 4], 4)
    assert state.needs_verify(5, window=3, stopped=False)
    assert not DVRState(verified=5).needs_verify(5, 3, stopped=True)


def test_commit_moves_the_verified_prefix_and_counts_rollbacks():
    state = DVRState(verified=2)
    result = state.commit([5, 6, 7, 8], [5, 9, 7, 8], pass_tokens=16)
    assert (result.keep, result.replacement) == (1, 9)
    assert (state.verified, state.rollbacks, state.tokens_rolled_back) == (4, 1, 3)
    state.commit([1, 2], [1, 2], pass_tokens=16)
    assert (state.verified, state.rollbacks, state.verify_passes, state.verify_tokens) == (6, 1, 2, 32)
    fresh = DVRState()
    fresh.on_sampled(1, trusted=True, deterministic=True)  # invariant logits on a verified prefix
    fresh.on_sampled(2, trusted=False, deterministic=True)  # fast path: unverified
    fresh.on_sampled(3, trusted=True, deterministic=True)  # trusted logits, unverified prefix
    assert fresh.verified == 1
    fresh.on_sampled(4, trusted=False, deterministic=False)  # non-deterministic: final at once
    assert fresh.verified == 4


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("dvr"), hidden_size=128, intermediate_size=256)


def _requests(seed, n=4):
    rng = random.Random(seed)
    return [([rng.randrange(256) for _ in range(rng.randint(1, 12))],
             SamplingParams(max_tokens=rng.randint(3, 14), temperature=rng.choice([0.0, 0.8, 1.2]),
                            seed=rng.randrange(2**32), deterministic=True))
            for _ in range(n)]  # fmt: skip


def _reference(ckpt, requests):
    eng = Engine.from_pretrained(ckpt, EngineConfig(mode="batch_invariant"))
    return [o.token_ids for o in eng.generate([r[0] for r in requests], [r[1] for r in requests])]


@pytest.mark.slow
@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), p=st.floats(0.0, 0.3), window=st.sampled_from([1, 3, 8]),
       group=st.sampled_from([1, 2, 4]))  # fmt: skip
def test_committed_output_equals_the_reference_whatever_the_fast_path_does(ckpt, seed, p, window, group):
    requests = _requests(seed)
    noise = random.Random(seed)

    def flip(_rid, _pos, token):
        return (token + 1 + noise.randrange(255)) % 256 if noise.random() < p else token

    config = EngineConfig(block_size=4, num_blocks=128, max_num_batched_tokens=16, dvr_window=window,
                          dvr_group_size=group)  # fmt: skip
    eng = Engine.from_pretrained(ckpt, config, fast_path_fault=flip)
    outs = eng.generate([r[0] for r in requests], [r[1] for r in requests])
    assert [o.token_ids for o in outs] == _reference(ckpt, requests)
    m = eng.metrics()
    assert m.verify_passes * group >= len(requests)  # every request verified at least once
    assert eng.dvr.verify_tokens == m.verify_passes * window * group  # one fixed shape
    assert m.tokens_rolled_back >= m.rollbacks
    eng.check_blocks()
    if p >= 0.2:
        assert m.rollbacks > 0


def test_non_deterministic_requests_are_never_verified(ckpt):
    eng = Engine.from_pretrained(ckpt, EngineConfig(dvr_window=2))
    eng.generate([[1, 2, 3]], SamplingParams(max_tokens=6))
    assert eng.metrics().verify_passes == 0


def _every_token_flipped(_rid, _pos, token):
    return (token + 1) % 256


def test_a_faulted_fast_path_never_leaks_an_unverified_token_to_a_stream(ckpt):
    """Every fast-path token is wrong: streams see only verified tokens, always a prefix of
    the reference, and really lag the raw output while tokens are unverified."""
    prompt, params = [3, 1, 4, 1, 5], SamplingParams(max_tokens=24, temperature=0.9, seed=5, deterministic=True)
    want = _reference(ckpt, [(prompt, params)])[0]
    eng = Engine.from_pretrained(ckpt, EngineConfig(dvr_window=4), fast_path_fault=_every_token_flipped)
    rid = eng.add_request(prompt, params)
    lagged, done = False, []
    while not done:
        done = eng.step()
        if done:
            break
        streamed, raw = eng.verified_tokens(rid), eng.running[0].output
        assert streamed == want[: len(streamed)]
        lagged |= len(streamed) < len(raw) and raw[len(streamed)] != want[len(streamed)]
    assert lagged  # an unverified (wrong) token existed and was held back
    assert done[0].token_ids == want and eng.metrics().rollbacks > 0


def test_rollback_recomputes_phase_and_answer_latency(ckpt):
    """The fast path invents an end-of-thinking token that verification rolls back: the
    request is back to REASONING and its TTFAT comes from the real end of thinking."""
    prompt, params = [7, 7, 2], SamplingParams(max_tokens=16, temperature=0.0, deterministic=True)
    want = _reference(ckpt, [(prompt, params)])[0]
    k = next(i for i in range(3, len(want) - 1) if want[i] not in want[:i])
    eot = want[k]
    now = [0.0]
    fake = {len(prompt) + 1: eot}  # the fast path's second token becomes end-of-thinking
    eng = Engine.from_pretrained(ckpt, EngineConfig(dvr_window=4, end_of_thinking_token_id=eot),
                                 clock=lambda: now[0], fast_path_fault=lambda _r, pos, tok: fake.get(pos, tok))
    eng.add_request(prompt, params)
    phases, out = [], []
    while not out:
        now[0] += 1.0
        out = eng.step()
        if not out:
            phases.append((eng.running[0].phase, list(eng.running[0].output)))
    assert out[0].token_ids == want
    crossed = next(i for i, (_, o) in enumerate(phases) if len(o) > 1 and o[1] == eot)
    assert phases[crossed][0] is Phase.ANSWERING  # the fake crossing happened
    rolled = [ph for ph, o in phases[crossed:] if eot not in o]
    assert rolled and all(ph is Phase.REASONING for ph in rolled)  # phase recomputed after rollback
    m = out[0].metrics
    assert m.end_of_thinking_s is not None and m.first_answer_token_s > m.end_of_thinking_s > m.first_token_s
    assert m.ttfat_s == m.first_answer_token_s - m.end_of_thinking_s
