"""Migration's engine side (no Ray needed): a request restarted from committed token ids
re-prefills them and goes on bit-identically (deterministic requests), and bad committed
state is a typed error. The Ray-level migration test is in test_ray_serve.py."""

from __future__ import annotations

import pytest

from _live_server import tiny_engine
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine import EngineConfig, SamplingParams

PROMPT = [1, 2, 3, 4, 5, 6]


def _config(mode: str) -> EngineConfig:
    return EngineConfig(block_size=4, num_blocks=256, mode=mode, end_of_thinking_token_id=7)


def _run(engine, rid: str) -> list[int]:
    done = {}
    while engine.has_unfinished():
        done |= {o.request_id: o for o in engine.step()}
    return done[rid].token_ids


@pytest.mark.parametrize("mode", ["dvr", "batch_invariant"])
def test_resume_from_committed_tokens_is_bit_identical(tmp_path, mode):
    params = SamplingParams(max_tokens=32, temperature=0.8, seed=5, deterministic=True, ignore_eos=True)
    other = SamplingParams(max_tokens=24, temperature=1.0, seed=9, ignore_eos=True)
    source = tiny_engine(tmp_path, _config(mode))
    full = source.generate([PROMPT, [9, 9, 9]], [params, other])[0].token_ids
    assert len(full) == 32
    for k in (1, 17):  # a different batch on the target: a co-running request
        target = tiny_engine(tmp_path, _config(mode))
        target.add_request([4, 4, 4, 4, 4], other)
        rid = target.add_request(PROMPT, params, committed_output=full[:k])
        assert target.verified_tokens(rid) == full[:k]
        assert _run(target, rid) == full, f"diverged after migrating at {k} committed tokens"
        target.check_blocks()


def test_resume_without_the_seed_diverges(tmp_path):
    """The seed is part of the committed state: a different one gives other tokens (so the
    test above would catch a migration that dropped it)."""
    params = SamplingParams(max_tokens=32, temperature=1.0, seed=5, deterministic=True, ignore_eos=True)
    full = tiny_engine(tmp_path, _config("dvr")).generate([PROMPT], params)[0].token_ids
    target = tiny_engine(tmp_path, _config("dvr"))
    wrong = SamplingParams(max_tokens=32, temperature=1.0, seed=6, deterministic=True, ignore_eos=True)
    rid = target.add_request(PROMPT, wrong, committed_output=full[:8])
    out = _run(target, rid)
    assert out[:8] == full[:8] and out != full


@pytest.mark.parametrize(
    "committed, match",
    [([5] * 8, "nothing left"), ([10**9], r"\[0, "), (["a"], r"\[0, "), ("abc", "list of token ids")],
)
def test_bad_committed_output_is_rejected(tmp_path, committed, match):
    engine = tiny_engine(tmp_path, _config("dvr"))
    with pytest.raises(InvalidArgumentError, match=match):
        engine.add_request(PROMPT, SamplingParams(max_tokens=8), committed_output=committed)
    assert not engine.has_unfinished()
