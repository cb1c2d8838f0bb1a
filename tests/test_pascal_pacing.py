"""PASCAL's answering phase: a fresh quantum in the low queue, controlled preemption by the
token pacer's buffer, the low queue using the blocks a blocked reasoning request cannot,
the ``starving_first`` option, the pacer's starving check (Algorithm 1's t_i), and the
simulator handing both to the policy."""

from __future__ import annotations

from dataclasses import astuple, replace

import pytest

from reasonserve.core.decisions import Admit, Preempt
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.core.phase import Phase
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies.pacer import TokenPacer
from reasonserve.policies.pascal import PascalPolicy
from reasonserve.sim import SimConfig, SimRequest, simulate
from reasonserve.sim.cluster.instance import SimInstance

NOW = 100.0


def _answering(rid: str, **kw) -> RequestView:
    fields = {"num_blocks": 4, "blocks_needed": 0, "enqueued_s": 10.0}
    return RequestView(rid, 0.0, Phase.ANSWERING, 16, 80, 64, **{**fields, **kw})


def _view(waiting, running, free_blocks=0) -> SchedulerView:
    return SchedulerView(NOW, tuple(waiting), tuple(running), free_blocks, block_size=16, max_num_seqs=8)


def test_a_request_enters_the_low_queue_with_a_fresh_quantum():
    # 600 tokens computed since admission, but only 10 of them answer tokens: within the
    # low queue's quantum, so it keeps its seat ahead of a waiting answering request
    running = _answering("a", quantum_used=600, num_answer_tokens=10)
    waiting = _answering("w", num_blocks=0, blocks_needed=4, enqueued_s=5.0)
    policy = PascalPolicy(quantum=500)
    assert policy.quantum_used(running) == 10
    assert list(policy.decide(_view([waiting], [running]))) == []
    used_up = running._replace(num_answer_tokens=500)  # its answering quantum is used: it yields
    assert list(policy.decide(_view([waiting], [used_up]))) == [Preempt("a", "swap"), Admit("w")]
    unknown = running._replace(num_answer_tokens=None)  # a host that does not count answer tokens
    assert list(policy.decide(_view([waiting], [unknown]))) == [Preempt("a", "swap"), Admit("w")]


def test_a_demoted_request_starts_the_low_quantum_at_the_threshold():
    policy = PascalPolicy(quantum=50, demote_threshold_tokens=100)
    demoted = RequestView("d", 0.0, Phase.REASONING, 40, 110, 70, num_blocks=8, quantum_used=90)
    assert policy.queue(demoted) == 1 and policy.quantum_used(demoted) == 10
    long_prompt = demoted._replace(num_prompt_tokens=140, num_output_tokens=0)  # low from its arrival
    assert policy.quantum_used(long_prompt) == 90


def test_reasoning_preempts_the_answer_whose_reader_is_furthest_ahead():
    # "b" starves (its reader has read everything) and is later in turn order; "a" has 30 s
    # of paced tokens buffered. The reasoning arrival needs one of them: "a" goes.
    ahead = _answering("a", enqueued_s=1.0, quantum_used=100, num_answer_tokens=100, paced_until_s=NOW + 30)
    dry = _answering("b", enqueued_s=50.0, quantum_used=100, num_answer_tokens=100, paced_until_s=NOW - 1)
    reasoning = RequestView("r", NOW, Phase.PREFILL, 60, 0, 0, blocks_needed=4, enqueued_s=NOW)
    decisions = list(PascalPolicy().decide(_view([reasoning], [ahead, dry])))
    assert decisions == [Preempt("a", "swap"), Admit("r")]
    # without a pacer (no release times) the last in turn order goes, as before
    plain = [ahead._replace(paced_until_s=None), dry._replace(paced_until_s=None)]
    assert list(PascalPolicy().decide(_view([reasoning], plain))) == [Preempt("b", "swap"), Admit("r")]
    # a request with no answer token yet (its reader waits for the first) is kept first
    first = _answering("c", enqueued_s=60.0, quantum_used=1, num_answer_tokens=0)
    assert list(PascalPolicy().decide(_view([reasoning], [first, dry]))) == [Preempt("b", "swap"), Admit("r")]


def test_pacer_ranks_agree_with_rank_key():
    policy = PascalPolicy()
    ahead = _answering("a", quantum_used=100, num_answer_tokens=100, paced_until_s=NOW + 30)
    dry = _answering("b", quantum_used=100, num_answer_tokens=100, paced_until_s=float("nan"))
    waiting = _answering("w", num_blocks=0, blocks_needed=4)
    keys = sorted((policy.rank_key(r, r is not waiting), r.request_id) for r in (ahead, dry, waiting))
    assert [rid for _, rid in keys] == ["b", "a", "w"]  # NaN reads as no pacer: first


def test_quiet_steps_count_the_answering_quantum():
    running = _answering("a", quantum_used=600, num_answer_tokens=10)
    waiting = _answering("w", num_blocks=0, blocks_needed=4, enqueued_s=5.0)
    assert PascalPolicy(quantum=500).quiet_steps(_view([waiting], [running])) == 490


def test_pacer_release_and_starving_follow_the_digested_curve():
    pacer = TokenPacer(tpot_s=0.1)
    burst = [0.01 * k for k in range(30)]
    assert pacer.released_until(burst) == pytest.approx(pacer.digested(burst)[-1])
    assert pacer.released_until(burst[10:], pacer.released_until(burst[:10])) == pytest.approx(2.9)
    assert pacer.released_until([]) is None
    # a 20 s stall, then tokens again: behind the expected curve for good, but the buffer
    # refills, so the pacer does not report it starving once it runs ahead again
    times = [0.1 * k for k in range(10)] + [20 + 0.01 * k for k in range(100)]
    until = pacer.released_until(times)
    assert pacer.behind(times[0], len(times), 21.5) and not pacer.starving(until, 21.5)
    assert pacer.starving(until, until + 0.1) and not pacer.starving(until, until + 0.05)


def test_the_simulator_hands_answer_tokens_and_pacing_to_the_policy():
    cfg = SimConfig(num_instances=1, kv_capacity_tokens=4096)
    seen: list[RequestView] = []

    class Recording(PascalPolicy):
        quiet_without_waiting = False  # asked with nothing waiting too: it sees the answering phase

        def decide(self, view):
            seen.extend(view.running)
            return super().decide(view)

    simulate([SimRequest("x", 0.0, 32, 8, 40)], cfg, lambda: Recording(quantum=500))
    answering = [r for r in seen if r.phase is Phase.ANSWERING]
    assert answering and all(r.num_answer_tokens == r.num_output_tokens - 8 for r in answering)
    pacer = TokenPacer(cfg.tpot_slo_s)
    inst = SimInstance("0", cfg, cfg.cost_model(), PascalPolicy())
    inst.add(SimRequest("y", 0.0, 32, 2, 5), 0.0)
    seq = inst.waiting[0]
    seq.num_output, seq.answer_times = 5, [1.0, 1.01, 1.02]
    view = inst.request_view(seq)
    assert view.num_answer_tokens == 3 and view.paced_until_s == pytest.approx(pacer.digested([1.0, 1.01, 1.02])[-1])
    seq.answer_times.append(5.0)  # carried forward as tokens arrive
    assert inst.paced_until(seq) == pytest.approx(5.0)
    assert inst.load(5.05, pacer).answering_slo_ok and not inst.load(5.2, pacer).answering_slo_ok


def test_a_blocked_reasoning_request_leaves_the_remaining_blocks_to_the_low_queue():
    # §IV-B/C: answering requests use the memory left once the high queue has allocated.
    # "r" needs 12 blocks and only 6 exist beside the running reasoning request: it waits,
    # and the swapped answering request "w" (4 blocks) resumes in what it cannot use.
    thinking = RequestView("t", 0.0, Phase.REASONING, 16, 40, 24, num_blocks=6, enqueued_s=1.0)
    big = RequestView("r", NOW, Phase.PREFILL, 180, 0, 0, blocks_needed=12, enqueued_s=NOW)
    swapped = _answering("w", num_blocks=0, blocks_needed=4, swapped=True, paced_until_s=NOW - 5)
    decisions = list(PascalPolicy().decide(_view([big, swapped], [thinking], free_blocks=6)))
    assert decisions == [Admit("w")]
    # the reasoning request still outranks it: once the answer's blocks would make it fit,
    # the running answering request is preempted for it and the waiting one stays out
    fits = big._replace(blocks_needed=8)
    running = swapped._replace(num_blocks=4, blocks_needed=0, swapped=False, quantum_used=10)
    decided = list(PascalPolicy().decide(_view([fits, swapped._replace(request_id="v")], [thinking, running],
                                               free_blocks=6)))
    assert decided == [Preempt("w", "swap"), Admit("r")]
    # within the high queue admission stays head-of-line: a small reasoning request
    # behind the blocked one does not jump it
    small = RequestView("s", NOW, Phase.PREFILL, 16, 0, 0, blocks_needed=2, enqueued_s=NOW + 1)
    assert list(PascalPolicy().decide(_view([big, small], [thinking], free_blocks=6))) == []


def test_starving_first_resumes_a_dry_reader_ahead_of_a_buffered_one():
    # room for one of the two: "b" runs with 30 s buffered, the swapped "w" has run dry
    buffered = _answering("b", quantum_used=10, num_answer_tokens=10, paced_until_s=NOW + 30)
    dry = _answering("w", num_blocks=0, blocks_needed=4, swapped=True, paced_until_s=NOW - 1)
    view = _view([dry], [buffered])
    assert list(PascalPolicy().decide(view)) == []  # the paper's round-robin: "b" keeps its turn
    option = PascalPolicy(starving_first=TokenPacer(0.1))
    assert list(option.decide(view)) == [Preempt("b", "swap"), Admit("w")]
    # a reader that still has tokens to read (or has no pacer state) waits its turn
    for reader in (dry._replace(paced_until_s=NOW - 0.05), dry._replace(paced_until_s=None)):
        assert list(option.decide(_view([reader], [buffered]))) == []
    # among dry readers the earlier release time goes first; reasoning still outranks them
    drier = dry._replace(request_id="v", paced_until_s=NOW - 9)
    assert list(option.decide(_view([dry, drier], [buffered]))) == [Preempt("b", "swap"), Admit("v")]
    reasoning = RequestView("r", NOW, Phase.PREFILL, 60, 0, 0, blocks_needed=4, enqueued_s=NOW)
    assert list(option.decide(_view([dry, reasoning], [buffered]))) == [Preempt("b", "swap"), Admit("r")]


def test_starving_first_is_stepped_while_a_waiting_reader_may_run_dry():
    running = _answering("a", quantum_used=10, num_answer_tokens=10)
    reading = _answering("w", num_blocks=0, blocks_needed=4, paced_until_s=NOW + 5)
    option = PascalPolicy(quantum=500, starving_first=TokenPacer(0.1))
    assert option.quiet_steps(_view([reading], [running])) == 1
    assert PascalPolicy(quantum=500).quiet_steps(_view([reading], [running])) == 490
    dry = reading._replace(paced_until_s=NOW - 1)  # already dry: it stays so while it waits
    assert option.quiet_steps(_view([dry], [running])) == 490


def test_starving_first_keeps_quiet_stretches_exact():
    reqs = [SimRequest(f"q{i}", 0.3 * i, 24 + 7 * (i % 5), 30 + 11 * (i % 4), 40 + 13 * (i % 3)) for i in range(14)]
    cfg = SimConfig(num_instances=1, block_size=4, kv_capacity_tokens=320, max_num_seqs=4, preemption="swap",
                    model="qwen2.5-7b")  # fmt: skip
    outcomes = []
    for skip in (False, True):
        res = simulate(reqs, replace(cfg, skip_quiet_steps=skip),
                       lambda: PascalPolicy(quantum=9, demote_threshold_tokens=70, starving_first=TokenPacer(0.1)))
        outcomes.append(([astuple(s) for s in res.sequences], res.end_s, res.steps))
        preempted = sum(s.num_preemptions for s in res.sequences)
    assert outcomes[0] == outcomes[1]
    assert preempted > 0


def test_starving_first_must_be_a_pacer():
    with pytest.raises(InvalidArgumentError, match="starving_first"):
        PascalPolicy(starving_first=0.1)  # type: ignore[arg-type]
