"""The DVR controller's replay rule at its edges, for any host (LLM-42's verify pass): a pass
replays ``[last verified token] + unverified[:-1]`` from the position of the last verified
token, and there is nothing to replay when no token is unverified. The embedded engine
never reaches these edges (its first token is sampled from invariant prefill logits, so
``verified >= 1``, and it verifies only when a token is pending), but a simulator or an
adapter host may."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.core import InvalidArgumentError
from reasonserve.dvr import DVRState, verify_inputs
from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint


def test_with_nothing_verified_the_replay_starts_at_the_last_prompt_token():
    tokens = [10, 11, 12, 1, 2]  # prompt of 3, outputs 1, 2
    assert verify_inputs(tokens, 3, DVRState(verified=0)) == ([12, 1], 2)


@pytest.mark.parametrize("verified", [2, 3, 7])
def test_nothing_unverified_is_nothing_to_verify(verified):
    with pytest.raises(InvalidArgumentError, match="nothing to verify"):
        verify_inputs([10, 11, 12, 1, 2], 3, DVRState(verified=verified))


def test_without_a_verified_token_before_them_outputs_cannot_be_replayed():
    """An empty prompt and nothing verified: no token precedes the first output."""
    for tokens in ([], [1, 2]):
        with pytest.raises(InvalidArgumentError, match="nothing to verify"):
            verify_inputs(tokens, 0, DVRState())
    assert verify_inputs([1, 2, 3], 0, DVRState(verified=1)) == ([1, 2], 0)


@settings(max_examples=80, deadline=None)
@given(prompt=st.integers(1, 6), outputs=st.integers(1, 9), data=st.data())
def test_the_replay_predicts_every_unverified_position(prompt, outputs, data):
    """Replayed input ``i`` sits at position ``start + i`` and its logits predict token
    ``start + i + 1``: together, exactly the unverified positions, each once."""
    verified = data.draw(st.integers(0, outputs - 1))
    tokens = list(range(100, 100 + prompt + outputs))
    replay, start = verify_inputs(tokens, prompt, DVRState(verified=verified))
    assert replay == tokens[start : start + len(replay)]
    predicted = [start + i + 1 for i in range(len(replay))]
    assert predicted == list(range(prompt + verified, prompt + outputs))


# the engine host: what a rollback commits ---------------------------------------------------
@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("dvr_rules"), hidden_size=64, intermediate_size=128)


def _every_token_flipped(_rid, _pos, token):
    return (token + 1) % 256


@pytest.mark.parametrize("window", [1, 3])
def test_rolled_back_tokens_are_replaced_with_the_invariant_token_and_logprobs(ckpt, window):
    """Every fast-path token is wrong, so every verify pass rolls back and commits the
    verifier's token: the output, and each token's logprobs (the replacement's read off the
    verify row that predicts it), equal the batch-invariant run's bit for bit."""
    prompt = [3, 1, 4, 1, 5]
    params = SamplingParams(max_tokens=9, temperature=0.8, seed=21, deterministic=True, logprobs=2)
    want = Engine.from_pretrained(ckpt, EngineConfig(mode="batch_invariant")).generate([prompt], params)[0]
    eng = Engine.from_pretrained(ckpt, EngineConfig(dvr_window=window), fast_path_fault=_every_token_flipped)
    out = eng.generate([prompt], params)[0]
    assert out.token_ids == want.token_ids
    assert out.logprobs == want.logprobs
    assert eng.metrics().rollbacks >= len(want.token_ids) - 1  # all but the first (trusted) token
