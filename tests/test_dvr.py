"""Decode-verify-rollback: the pure controller and the engine under an adversarial fast path."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.core import InvalidArgumentError
from reasonserve.dvr import DVRConfig, DVRState, accept, plan_groups, verify_inputs
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
    with pytest.raises(InvalidArgumentError):
        DVRConfig(window=0)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("dvr"), hidden_size=128, intermediate_size=256)


def _requests(seed, n=5):
    rng = random.Random(seed)
    return [([rng.randrange(256) for _ in range(rng.randint(1, 20))],
             SamplingParams(max_tokens=rng.randint(3, 20), temperature=rng.choice([0.0, 0.8, 1.2]),
                            seed=rng.randrange(2**32), deterministic=True))
            for _ in range(n)]  # fmt: skip


def _reference(ckpt, requests):
    eng = Engine.from_pretrained(ckpt, EngineConfig(mode="batch_invariant"))
    return [o.token_ids for o in eng.generate([r[0] for r in requests], [r[1] for r in requests])]


@settings(max_examples=8, deadline=None)
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
    for rid in (o.request_id for o in outs):
        state = eng.finished[rid].dvr
        assert state.verified == len(eng.finished[rid].output)
        assert state.verify_passes <= len(eng.finished[rid].output)  # each pass commits >= 1 token
    assert eng.stats["verify_tokens"] == eng.stats["verify_passes"] * window * group
    eng.check_blocks()
    if p >= 0.2:
        assert eng.stats["rollbacks"] > 0


def test_non_deterministic_requests_are_never_verified(ckpt):
    eng = Engine.from_pretrained(ckpt, EngineConfig(dvr_window=2))
    eng.generate([[1, 2, 3]], SamplingParams(max_tokens=6))
    assert eng.stats["verify_passes"] == 0
