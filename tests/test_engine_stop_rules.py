"""When the engine stops a request (vLLM's semantics), checked against a greedy reference
run: a stop token or an EOS token ends it with that token kept ("stop"), ``ignore_eos``
skips EOS but not stop tokens, ``max_tokens`` ends it ("length"). And the sequence
bookkeeping those rules read: pending tokens, answer tokens, a rollback of the
end-of-thinking token."""

import pytest

from reasonserve.core.phase import Phase
from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint
from reasonserve.engine.sequence import Sequence
from reasonserve.policies import FCFSPolicy

PROMPT = [3, 1, 4, 1, 5]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("stop_rules"), hidden_size=64, intermediate_size=128)


def _run(ckpt, config=None, policy=None, **params):
    eng = Engine.from_pretrained(ckpt, config or EngineConfig(mode="batch_invariant"), policy=policy)
    out = eng.generate([PROMPT], SamplingParams(**({"max_tokens": 12, "temperature": 0.0} | params)))[0]
    return out.token_ids, out.finish_reason


@pytest.fixture(scope="module")
def reference(ckpt):
    tokens, reason = _run(ckpt)
    assert reason == "length" and len(tokens) == 12
    k = next(i for i in range(2, 12) if tokens[i] not in tokens[:i])  # a token first seen at k >= 2
    return tokens, k


def test_a_stop_token_ends_the_request_with_it(ckpt, reference):
    tokens, k = reference
    assert _run(ckpt, stop_token_ids=[tokens[k]]) == (tokens[: k + 1], "stop")
    assert _run(ckpt, stop_token_ids=[tokens[k]], ignore_eos=True) == (tokens[: k + 1], "stop")


def test_eos_ends_the_request_unless_ignored(ckpt, reference):
    tokens, k = reference
    config = EngineConfig(mode="batch_invariant", eos_token_id=tokens[k])
    assert _run(ckpt, config) == (tokens[: k + 1], "stop")
    assert _run(ckpt, config, ignore_eos=True) == (tokens, "length")
    several = EngineConfig(mode="batch_invariant", eos_token_ids=(9999 % 256, tokens[k]))
    assert _run(ckpt, several) == (tokens[: k + 1], "stop")


def test_max_tokens_ends_the_request(ckpt, reference):
    tokens, _ = reference
    assert _run(ckpt, max_tokens=5) == (tokens[:5], "length")
    assert _run(ckpt, max_tokens=1) == (tokens[:1], "length")


class _Recording:
    """FCFS, keeping every view it was shown."""

    def __init__(self):
        self.inner, self.views = FCFSPolicy(), []

    def decide(self, view):
        self.views.append(view)
        return self.inner.decide(view)


def test_views_count_the_answer_tokens_after_the_end_of_thinking(ckpt, reference):
    tokens, k = reference
    policy = _Recording()
    config = EngineConfig(mode="batch_invariant", end_of_thinking_token_id=tokens[k])
    assert _run(ckpt, config, policy=policy)[0] == tokens
    seen = {(r.num_output_tokens, r.phase, r.num_answer_tokens) for v in policy.views for r in v.running}
    for n, phase, answers in seen:
        assert (phase is Phase.ANSWERING) == (n > k)
        assert answers == (n - k - 1 if n > k else 0)
    assert any(n > k + 1 for n, _, _ in seen)


def test_pending_tokens_and_rollback_of_the_end_of_thinking():
    seq = Sequence("r", [1, 2, 3], SamplingParams(), 0, 0.0, end_of_thinking=(9,))
    for t in (4, 9, 6):
        seq.append(t, 0.0)
    seq.num_computed = 4
    assert (seq.num_pending, seq.pending(1), seq.pending(2), seq.pending(5)) == (2, [9], [9, 6], [9, 6])
    seq.num_computed = 2
    assert seq.pending(2) == [3, 4] and seq.pending(9) == [3, 4, 9, 6]
    assert seq.phase is Phase.ANSWERING and seq.eot_index == 1
    seq.truncate(2)  # the end-of-thinking token stays
    assert seq.phase is Phase.ANSWERING
    seq.truncate(1)  # rolled back: reasoning again
    assert seq.eot_index is None and seq.phase is Phase.REASONING and seq.output == [4]
