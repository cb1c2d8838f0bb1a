"""PASCAL's policy object runs unchanged on the embedded engine and orders by phase."""

import pytest

from _recording import Recording
from reasonserve.core import Phase
from reasonserve.core.decisions import Admit, Preempt
from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint
from reasonserve.policies.pascal import PascalPolicy


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-pascal"))


PROMPTS = [[(7 * i + j) % 256 for j in range(5 + 3 * i)] for i in range(6)]
PARAMS = [SamplingParams(max_tokens=14, temperature=1.0, seed=100 + i, deterministic=True) for i in range(6)]


def _run(ckpt, config, policy):
    eng = Engine.from_pretrained(ckpt, config, policy=policy)
    outs = eng.generate(PROMPTS, PARAMS)
    eng.check_blocks()
    return [o.token_ids for o in outs]


def test_pascal_on_the_engine_schedules_reasoning_before_answering(ckpt):
    roomy = EngineConfig(block_size=4, num_blocks=256, mode="batch_invariant")
    reference = _run(ckpt, roomy, PascalPolicy())
    eot = reference[0][3]  # request 0 ends its reasoning at its 4th token; others when they hit it
    tight = EngineConfig(block_size=4, num_blocks=14, max_num_seqs=3, max_num_batched_tokens=16,
                         mode="batch_invariant", end_of_thinking_token_id=eot)  # fmt: skip
    policy = Recording(PascalPolicy(quantum=4, demote_threshold_tokens=10_000))
    assert _run(ckpt, tight, policy) == reference  # scheduling never changes deterministic tokens
    high = (Phase.PREFILL, Phase.REASONING)
    mixed = contested = 0
    fresh_answers = answer_beside_blocked = high_preempted = 0
    for view, decisions in policy.steps:
        phase = {r.request_id: r.phase for r in view.waiting + view.running}
        for r in view.waiting + view.running:  # the low queue's quantum counts answer tokens only
            assert r.num_answer_tokens == (_answers(r, eot, reference) if r.phase is Phase.ANSWERING else 0)
            fresh_answers += r.quantum_used > r.num_answer_tokens
        admitted = [d.request_id for d in decisions if isinstance(d, Admit)]
        preempted = [d.request_id for d in decisions if isinstance(d, Preempt)]
        left_high = [r for r in view.waiting if r.phase in high and r.request_id not in admitted]
        rank = policy.inner.rank_key
        if left_high and [rid for rid in admitted if phase[rid] is Phase.ANSWERING]:
            # an answer resumed while reasoning waits: only in blocks the first of it could not use
            first = min(left_high, key=lambda r: rank(r, False))
            blocks, seats = _left_before(view, admitted, preempted, high, rank(first, False), rank)
            assert first.blocks_needed > blocks or seats < 1
            answer_beside_blocked += 1
        for r in view.running:  # KV priority: reasoning loses its seat only if answers could not help
            if r.phase in high and r.request_id in preempted:
                blocks, seats = _left_before(view, admitted, preempted, high, rank(r, True), rank)
                assert r.num_blocks + r.blocks_needed > blocks or seats < 1
                high_preempted += 1
        live = set(phase.values())
        mixed += Phase.ANSWERING in live and bool(live & set(high))
        contested += bool(view.waiting) and len(view.running) == tight.max_num_seqs
    assert mixed > 0 and contested > 0  # the checks above really ran on mixed, full batches
    assert answer_beside_blocked > 0 and high_preempted > 0  # both rules above were exercised
    assert fresh_answers > 0  # requests that entered the low queue with reasoning tokens in their quantum


def _left_before(view, admitted, preempted, high, key, rank):
    """(blocks, seats) left once the reasoning requests ranked before ``key`` and kept or
    admitted took theirs (answering requests hold nothing a reasoning request cannot take)."""
    kept = [r for r in view.running if r.phase in high and r.request_id not in preempted and rank(r, True) < key]
    new = [r for r in view.waiting if r.phase in high and r.request_id in admitted and rank(r, False) < key]
    taken = sum(r.num_blocks + r.blocks_needed for r in kept) + sum(r.blocks_needed for r in new)
    blocks = view.free_blocks + sum(r.num_blocks for r in view.running) - taken
    return blocks, view.max_num_seqs - len(kept) - len(new)


def _answers(r, eot, reference):
    """Output tokens after the first end-of-thinking token (the run reproduces ``reference``)."""
    tokens = reference[int(r.request_id.rsplit("-", 1)[1])]  # the engine names them req-0, req-1, ...
    return r.num_output_tokens - tokens.index(eot) - 1
