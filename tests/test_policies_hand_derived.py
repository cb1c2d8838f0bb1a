"""PASCAL's and LPM's decisions on small views worked out by hand: quiet-steps bounds, ties
between equal enqueue times, times past int64 and infinities, the token pacer's order of
answering readers, ``starving_first``, and the host's columns deciding as the objects."""

from __future__ import annotations

import pytest

from reasonserve.core.column_store import ColumnStore
from reasonserve.core.decisions import Admit, Preempt
from reasonserve.core.phase import Phase
from reasonserve.core.policy import QUIET_FOREVER
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies import LPMPolicy, PascalPolicy, PrefixAwarePolicy
from reasonserve.policies.pacer import TokenPacer

NAN, INF = float("nan"), float("inf")
R, A = Phase.REASONING, Phase.ANSWERING


def _req(rid: str, phase: Phase = R, prompt=10, output=0, arrival_s=0.0, **kw) -> RequestView:
    return RequestView(rid, arrival_s, phase, prompt, prompt, output, **kw)


def _view(waiting=(), running=(), free=0, seats=8, now=0.0) -> SchedulerView:
    return SchedulerView(now, tuple(waiting), tuple(running), free, 16, seats)


@pytest.mark.parametrize(("used", "expected"), [(0, 5), (2, 3), (4, 1), (5, 91), (9, 91)])
def test_quiet_steps_last_until_the_quantum_expires_or_the_demotion(used, expected):
    """A high running request (10 tokens, threshold 100: demoted in 91 steps) with a high
    request waiting: quantum 5 - used while it lasts; once used up, the demotion bounds."""
    view = _view([_req("w", enqueued_s=1.0)], [_req("r", quantum_used=used)])
    assert PascalPolicy(quantum=5, demote_threshold_tokens=100).quiet_steps(view) == expected


def test_quiet_steps_bounded_by_demotion_and_by_answer_tokens():
    view = _view([_req("w", enqueued_s=1.0)], [_req("r", quantum_used=0)])
    assert PascalPolicy(quantum=500, demote_threshold_tokens=100).quiet_steps(view) == 91  # 100 - 10 + 1
    big = 2**64
    low = _req("r", prompt=big, quantum_used=big)  # demoted at once (its prompt too), used up
    assert PascalPolicy().quiet_steps(_view([_req("w", enqueued_s=1.0)], [low])) == QUIET_FOREVER
    answering = _req("a", A, quantum_used=3, num_answer_tokens=1)
    view = _view([_req("w", A, enqueued_s=1.0)], [answering])
    assert PascalPolicy(quantum=4).quiet_steps(view) == 3  # 4 - min(3, 1): its answer tokens count
    uncounted = _view(view.waiting, [answering._replace(num_answer_tokens=None)])
    assert PascalPolicy(quantum=4).quiet_steps(uncounted) == 1  # 4 - 3


@pytest.mark.parametrize(("t_a", "t_b"), [(1, 1.0), (1.0, 1), (0.0, -0.0), (-0.0, 0.0)])
def test_equal_enqueue_times_go_by_id(t_a, t_b):
    waiting = [_req("b", enqueued_s=t_b, blocks_needed=1), _req("a", enqueued_s=t_a, blocks_needed=1)]
    assert list(PascalPolicy().decide(_view(waiting, free=5))) == [Admit("a"), Admit("b")]
    tied = [_req("b", arrival_s=t_b), _req("a", arrival_s=t_a)]  # LPM orders the running by arrival
    assert list(LPMPolicy().decide(_view([_req("w", blocks_needed=1)], tied, free=0, seats=2))) == []


def test_times_beyond_int64_and_infinities_order_as_python_does():
    times = {"a": 2**64 + 1, "b": 2**64, "c": INF, "d": -INF, "e": 3}
    waiting = [_req(k, enqueued_s=t, blocks_needed=1) for k, t in times.items()]
    assert list(PascalPolicy().decide(_view(waiting, free=5))) == [Admit(k) for k in "debac"]


def test_the_reader_with_most_paced_tokens_left_is_preempted_and_nan_reads_as_no_pacer():
    """Three fresh answering requests, room for two: the one whose reader has the most
    paced tokens left (latest ``paced_until_s``) ranks last; NaN ranks as no pacer (first)."""
    running = [
        _req(k, A, num_blocks=1, enqueued_s=i, paced_until_s=p, num_answer_tokens=None)
        for i, (k, p) in enumerate([("late", 5.0), ("nan", NAN), ("early", 1.0)])
    ]
    view = _view([_req("w", A, blocks_needed=9, enqueued_s=9.0)], running, free=-1)
    assert list(PascalPolicy().decide(view)) == [Preempt("late", "swap")]
    early_nan = [r._replace(paced_until_s=9.0) if r.request_id == "early" else r for r in running]
    assert list(PascalPolicy().decide(_view(view.waiting, early_nan, free=-1))) == [Preempt("early", "swap")]


def test_starving_reader_ranks_ahead_of_running_answers():
    running = [_req("r", A, num_blocks=2, quantum_used=0, paced_until_s=20.0)]
    waiting = [_req("w", A, blocks_needed=2, paced_until_s=1.0)]  # 10.0 >= 1.0 + 0.1: starving
    view = _view(waiting, running, now=10.0)
    assert list(PascalPolicy(starving_first=TokenPacer(0.1)).decide(view)) == [
        Preempt("r", "swap"),
        Admit("w"),
    ]
    assert list(PascalPolicy().decide(view)) == []  # without it the running reader keeps its seat
    first = PascalPolicy(starving_first=TokenPacer(0.1))
    assert first.quiet_steps(view) == 500  # w is dry already: r's quantum bounds the stretch
    fresh = _view([waiting[0]._replace(paced_until_s=9.95)], running, now=10.0)
    assert first.quiet_steps(fresh) == 1  # w's reader may run dry at any step


def _with_columns(view: SchedulerView) -> SchedulerView:
    store = ColumnStore()
    for r in view.waiting:
        store.append(r)
    waiting, cols = store.snapshot()
    return SchedulerView(
        view.now_s, waiting, view.running, view.free_blocks, 16, view.max_num_seqs, waiting_columns=cols
    )


@pytest.mark.parametrize("n", [3, 300])
def test_host_columns_decide_as_the_objects(n):
    waiting = [
        _req(
            f"w{i:03d}",
            A if i % 3 == 0 else R,
            prompt=10 + 50 * (i % 4),
            blocks_needed=1 + i % 2,
            enqueued_s=float((7 * i) % n),
        )
        for i in range(n)
    ]
    running = [_req("r", A, num_blocks=3, quantum_used=9, num_answer_tokens=2)]
    view = _view(waiting, running, free=n // 3)
    for policy in (PascalPolicy(quantum=4, demote_threshold_tokens=100), LPMPolicy(), PrefixAwarePolicy()):
        assert list(policy.decide(_with_columns(view))) == list(policy.decide(view)), policy
