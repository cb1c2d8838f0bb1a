"""The engine-agnostic core of the vLLM/SGLang seeded-sampling processors (no engine needed)."""

import pytest
import torch

from reasonserve import ops
from reasonserve.adapters.phase_book import PhaseAwareConfig, PhaseBook
from reasonserve.adapters.seeded import SEED_KEY, SeededParams, force_seeded, seeded_params
from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError
from reasonserve.core.phase import Phase


def _logits(rows, vocab=61, seed=0):
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 2


def test_forced_rows_hold_exactly_the_token_ops_sample_draws():
    logits = _logits(4)
    params = [SeededParams(seed=3, temperature=0.7, top_p=0.9), SeededParams(seed=2**63 + 5, top_k=4, min_p=0.1)]
    out = force_seeded(logits.clone(), [0, 3], params, [17, 2])
    for row, p, pos in ((0, params[0], 17), (3, params[1], 2)):
        want = ops.sample(logits[row : row + 1], seeds=p.seed, positions=pos, temperature=p.temperature,
                          top_k=p.top_k or None, top_p=p.top_p, min_p=p.min_p)  # fmt: skip
        assert torch.isfinite(out[row]).nonzero().flatten().tolist() == want.tolist()
        assert out[row, int(want)] == 0.0
    assert torch.equal(out[1:3], logits[1:3])


def test_the_token_depends_on_seed_and_position_only_not_on_the_batch():
    logits = _logits(3, vocab=500, seed=1)
    p = SeededParams(seed=9, temperature=1.0)
    alone = force_seeded(logits[1:2].clone(), [0], [p], [5]).argmax()
    batched = force_seeded(logits.clone(), [0, 1, 2], [SeededParams(seed=1), p, SeededParams(seed=2)], [0, 5, 9])
    assert int(batched[1].argmax()) == int(alone)
    draws = {int(force_seeded(logits[1:2].clone(), [0], [p], [pos]).argmax()) for pos in range(40)}
    assert len(draws) > 1  # the position moves the noise


def test_greedy_and_temperature_below_the_engines_threshold_take_the_argmax():
    logits = _logits(1, seed=2)
    p = seeded_params({SEED_KEY: 1}, temperature=1e-6, top_k=-1, top_p=1.0, min_p=0.0)
    assert p == SeededParams(seed=1, temperature=0.0)
    assert int(force_seeded(logits.clone(), [0], [p], [0]).argmax()) == int(logits.argmax())


def test_requests_without_the_key_are_not_seeded():
    assert seeded_params(None, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0) is None
    assert seeded_params({"other": 1}, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0) is None


@pytest.mark.parametrize(
    ("extra", "error"),
    [({SEED_KEY: -1}, InvalidArgumentError), ({SEED_KEY: 2**64}, InvalidArgumentError),
     ({SEED_KEY: "1"}, InvalidTypeError), ({SEED_KEY: True}, InvalidTypeError), ([1], InvalidTypeError)],
)  # fmt: skip
def test_bad_seeds_are_typed_errors(extra, error):
    with pytest.raises(error, match=SEED_KEY if isinstance(extra, dict) else "mapping"):
        seeded_params(extra, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)


@pytest.mark.parametrize("bad", [{"temperature": float("nan")}, {"top_p": 0.0}, {"min_p": 1.5}, {"top_k": -2}])
def test_bad_sampling_parameters_are_typed_errors(bad):
    with pytest.raises(InvalidArgumentError):
        SeededParams(seed=1, **bad)


def test_a_row_that_cannot_be_sampled_is_left_alone_and_the_others_drawn():
    logits = _logits(2, seed=3)
    logits[0] = float("-inf")
    out = force_seeded(logits.clone(), [0, 1], [SeededParams(seed=1), SeededParams(seed=2)], [0, 0])
    assert torch.equal(out[0], logits[0])
    assert torch.isfinite(out[1]).sum() == 1


# phase book ---------------------------------------------------------------------------
def _book(**kw):
    return PhaseBook(PhaseAwareConfig(think_end_token_ids=(99,), **kw))


def _view(book, rid="r", *, output=(), computed=10, running=True, now=5.0, prompt=10):
    return book.view(rid, arrival_s=1.0, num_prompt_tokens=prompt, num_computed_tokens=computed,
                     output_ids=list(output), running=running, now_s=now)  # fmt: skip


def test_phase_follows_the_end_of_thinking_token():
    book = _book()
    assert _view(book, computed=3, running=False).phase is Phase.PREFILL
    assert _view(book, output=[5, 6], computed=12).phase is Phase.REASONING
    assert _view(book, output=[5, 6, 99], computed=13).phase is Phase.ANSWERING
    assert _view(book, output=[5, 6, 99, 7], computed=14).phase is Phase.ANSWERING  # stays answering


def test_quantum_counts_from_admission_and_preemption_requeues_now():
    book = _book()
    assert _view(book, computed=0, running=False).quantum_used == 0
    assert _view(book, computed=30, running=True).quantum_used == 30
    v = _view(book, computed=30, running=False, now=8.0)  # preempted
    assert (v.enqueued_s, v.quantum_used) == (8.0, 0)
    assert _view(book, computed=35, running=True).quantum_used == 5


def test_rank_puts_reasoning_before_answering_and_demotes_long_reasoning():
    book = _book(demote_threshold_tokens=100)
    policy = book.config.policy()
    answering = _view(book, "a", output=[99])
    reasoning = _view(book, "b", output=[1])
    long = _view(book, "c", output=[1] * 95)
    keys = sorted([(policy.rank_key(v, True), v.request_id) for v in (answering, reasoning, long)])
    assert [rid for _, rid in keys] == ["b", "a", "c"]


def test_retain_forgets_finished_requests():
    book = _book()
    _view(book, "a")
    _view(book, "b")
    book.retain({"b"})
    assert len(book) == 1


@pytest.mark.parametrize(
    "settings",
    [{}, {"think_end_token_id": -1}, {"think_end_token_id": 5, "quantum": 0}, {"think_end_token_id": 5, "x": 1},
     {"think_end_token_ids": []}, "151668"],
)  # fmt: skip
def test_bad_phase_aware_settings_are_typed_errors(settings):
    with pytest.raises((InvalidArgumentError, InvalidTypeError)):
        PhaseAwareConfig.from_mapping(settings)
