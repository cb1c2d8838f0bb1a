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
