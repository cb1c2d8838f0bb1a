"""The engine's thinking budget and per-token logprobs."""

import pytest
import torch

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.core.phase import Phase
from reasonserve.engine import (
    DecoderModel,
    Engine,
    EngineConfig,
    SamplingParams,
    SequenceBatch,
    make_tiny_checkpoint,
)

EOT = 200  # the end-of-thinking token id of these tests
PROMPT = [5, 6, 7, 8, 9]


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("think"))


def _engine(path, **kwargs) -> Engine:
    cfg = dict(block_size=4, num_blocks=128, end_of_thinking_token_id=EOT) | kwargs
    return Engine.from_pretrained(path, EngineConfig(**cfg))


def _run(engine, **params):
    return engine.generate([PROMPT], SamplingParams(**({"max_tokens": 16, "temperature": 0.0} | params)))[0]


def test_the_budget_forces_the_end_of_thinking_token(path):
    free = _run(_engine(path)).token_ids
    assert EOT not in free  # the model would not end thinking by itself
    for budget in (0, 3, 9):
        out = _run(_engine(path), thinking_token_budget=budget)
        assert out.token_ids[: budget + 1] == [*free[:budget], EOT]
        assert out.metrics.end_of_thinking_s is not None
    engine = _engine(path)
    rid = engine.add_request(PROMPT, SamplingParams(max_tokens=16, temperature=0.0, thinking_token_budget=2))
    phases = []
    while engine.has_unfinished():
        engine.step()
        if rid in engine.scheduler.by_id:
            phases.append(engine.scheduler.by_id[rid].phase)
    assert Phase.REASONING in phases and phases[-1] == Phase.ANSWERING


def test_a_model_that_ends_thinking_itself_is_not_forced_again(path):
    free = _run(_engine(path)).token_ids
    own_end = free[2]  # pretend the model's third token is its end of thinking
    out = _run(_engine(path, end_of_thinking_token_id=own_end), thinking_token_budget=5)
    assert out.token_ids[:3] == free[:3] and out.token_ids.count(own_end) == free[:16].count(own_end)


def test_verification_forces_the_same_token(path):
    """DVR re-samples every decoded token in its verify pass; the forced token must be
    forced there too, or it would be rolled back (and differ from the all-invariant run)."""
    params = dict(temperature=0.8, seed=3, deterministic=True, thinking_token_budget=4)
    reference = _run(_engine(path, mode="batch_invariant"), **params)
    engine = _engine(path, mode="dvr", dvr_window=4)
    out = _run(engine, **params)
    assert out.token_ids == reference.token_ids and out.token_ids[4] == EOT
    assert engine.dvr.verify_passes > 0


SPLIT = (200, 201, 202)  # an end of thinking the tokenizer writes as three tokens


def test_a_multi_token_end_of_thinking_is_forced_whole_and_ends_thinking_once_complete(path):
    free = _run(_engine(path)).token_ids
    split = dict(end_of_thinking_token_id=None, end_of_thinking_token_ids=SPLIT)
    for budget in (0, 3, 9):
        out = _run(_engine(path, **split), thinking_token_budget=budget)
        assert out.token_ids[: budget + 3] == [*free[:budget], *SPLIT]
        assert out.metrics.end_of_thinking_s is not None
    engine = _engine(path, **split)
    rid = engine.add_request(PROMPT, SamplingParams(max_tokens=16, temperature=0.0, thinking_token_budget=2))
    phases = []
    while engine.has_unfinished():
        engine.step()
        if rid in engine.scheduler.by_id:
            seq = engine.scheduler.by_id[rid]
            phases.append((len(seq.output), seq.phase))
    # still thinking while the tag is incomplete (2 + 2 tokens), answering once it is whole
    assert all(p == Phase.REASONING for n, p in phases if n <= 4)
    assert all(p == Phase.ANSWERING for n, p in phases if n >= 5) and phases[-1][0] >= 5
    with pytest.raises(InvalidArgumentError, match="not both"):
        EngineConfig(end_of_thinking_token_id=7, end_of_thinking_token_ids=SPLIT)


def test_a_model_writing_the_multi_token_end_itself_is_not_forced(path):
    free = _run(_engine(path)).token_ids
    own = tuple(free[2:4])  # pretend the model's third and fourth tokens are its end of thinking
    out = _run(
        _engine(path, end_of_thinking_token_id=None, end_of_thinking_token_ids=own), thinking_token_budget=6
    )
    assert out.token_ids == free  # ended at index 3, before the budget: nothing forced


def test_verification_forces_the_same_multi_token_end(path):
    params = dict(temperature=0.8, seed=3, deterministic=True, thinking_token_budget=3)
    split = dict(end_of_thinking_token_id=None, end_of_thinking_token_ids=SPLIT)
    reference = _run(_engine(path, mode="batch_invariant", **split), **params)
    engine = _engine(path, mode="dvr", dvr_window=4, **split)
    out = _run(engine, **params)
    assert out.token_ids == reference.token_ids and tuple(out.token_ids[3:6]) == SPLIT
    assert engine.dvr.verify_passes > 0


def test_budget_needs_an_end_of_thinking_token(path):
    engine = Engine.from_pretrained(path, EngineConfig(block_size=4, num_blocks=64))
    with pytest.raises(InvalidArgumentError, match="end_of_thinking_token_id"):
        engine.add_request(PROMPT, SamplingParams(thinking_token_budget=3))
    with pytest.raises(InvalidArgumentError, match="thinking_token_budget"):
        SamplingParams(thinking_token_budget=-1)


def _reference_logprobs(path, tokens: list[int]) -> torch.Tensor:
    model = DecoderModel.from_pretrained(path)
    logits, _ = model.forward(SequenceBatch([torch.tensor(PROMPT + tokens)], [0], [None]))
    return torch.log_softmax(logits[0].double(), -1)[len(PROMPT) - 1 : -1]  # row i predicts token i


@pytest.mark.parametrize("temperature", [0.0, 1.3])
def test_logprobs_are_the_models_own_distribution(path, temperature):
    out = _run(_engine(path), logprobs=3, temperature=temperature, seed=1)
    assert [e.token_id for e in out.logprobs] == out.token_ids
    ref = _reference_logprobs(path, out.token_ids)
    for i, entry in enumerate(out.logprobs):
        assert entry.logprob == pytest.approx(float(ref[i, entry.token_id]), abs=1e-4)
        best = ref[i].topk(3)
        assert [t for t, _ in entry.top] == best.indices.tolist()
        assert [lp for _, lp in entry.top] == pytest.approx(best.values.tolist(), abs=1e-4)
        assert [lp for _, lp in entry.top] == sorted((lp for _, lp in entry.top), reverse=True)
        if temperature == 0.0:
            assert entry.top[0][0] == entry.token_id
    none = _run(_engine(path))
    assert none.logprobs is None and none.token_ids == _run(_engine(path), logprobs=0).token_ids


def test_deterministic_logprobs_are_the_invariant_ones(path):
    params = dict(temperature=0.9, seed=5, deterministic=True, logprobs=2)
    reference = _run(_engine(path, mode="batch_invariant"), **params)
    out = _run(_engine(path, mode="dvr", dvr_window=4), **params)
    assert out.token_ids == reference.token_ids
    assert out.logprobs == reference.logprobs  # bit for bit: verified values replace the fast path's


@pytest.mark.parametrize("mode", ["dvr", "batch_invariant"])
def test_a_resumed_request_reports_the_logprobs_of_what_it_samples_after_its_committed_tokens(path, mode):
    """A request resumed from committed tokens (migration) has None for those (they were
    reported where they were sampled) and, after them, the undisturbed run's logprobs
    bit for bit (deterministic requests)."""
    params = dict(temperature=0.9, seed=5, deterministic=True, logprobs=3, ignore_eos=True)
    whole = _run(_engine(path, mode=mode), **params)
    engine = _engine(path, mode=mode, dvr_window=4)
    sampling = SamplingParams(**({"max_tokens": 16, "temperature": 0.0} | params))
    rid = engine.add_request(PROMPT, sampling, committed_output=whole.token_ids[:6])
    assert engine.verified_logprobs(rid) == [None] * 6
    done = {}
    while engine.has_unfinished():
        done |= {o.request_id: o for o in engine.step()}
    out = done[rid]
    assert out.token_ids == whole.token_ids
    assert out.logprobs == [None] * 6 + whole.logprobs[6:]
    with pytest.raises(InvalidArgumentError, match="logprobs"):
        SamplingParams(logprobs=21)
