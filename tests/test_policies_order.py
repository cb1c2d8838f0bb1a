"""The fast decide() paths (C-level sorts, lazy queue splits, numpy program grouping)
make exactly the decisions of the plain definitions: a full sort of every live request
by the policy's ranking, then :func:`decide_ranked`."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.core import Phase
from reasonserve.core.column_store import ColumnStore
from reasonserve.core.decisions import Admit, Preempt
from reasonserve.core.policy import QUIET_FOREVER, quiet_without_waiting
from reasonserve.policies import FCFSPolicy, RequestView, RoundRobinPolicy, SchedulerView
from reasonserve.policies._order import ordered, waiting_ordered
from reasonserve.policies._ranked import decide_ranked
from reasonserve.policies.app_fifo import AppFIFOPolicy
from reasonserve.policies.dynasor import DynasorPolicy, DynasorState
from reasonserve.policies.pacer import TokenPacer
from reasonserve.policies.pascal import HIGH, LOW, PascalPolicy

TIMES = st.sampled_from([0.0, 1.0, 2.5, 7.0, 50.0, 120.0])  # few values: many ties


def _requests(prefix, running):
    return st.lists(
        st.builds(
            RequestView,
            request_id=st.sampled_from([f"{prefix}{i}" for i in range(12)]),
            arrival_s=TIMES,
            phase=st.sampled_from([Phase.PREFILL, Phase.REASONING, Phase.ANSWERING]),
            num_prompt_tokens=st.integers(1, 64),
            num_computed_tokens=st.integers(0, 80),
            num_output_tokens=st.integers(0, 40),
            num_blocks=st.integers(1, 6) if running else st.just(0),
            blocks_needed=st.integers(0, 2) if running else st.integers(1, 8),
            enqueued_s=TIMES,
            quantum_used=st.integers(0, 30) if running else st.just(0),
            program_id=st.sampled_from([None, "pa", "pb", "pc"]),
            num_answer_tokens=st.none() | st.integers(0, 40),
            paced_until_s=st.none() | TIMES,
        ),
        max_size=10,
        unique_by=lambda r: r.request_id,
    ).map(tuple)


VIEWS = st.builds(
    SchedulerView,
    now_s=st.sampled_from([0.0, 60.0, 200.0]),
    waiting=_requests("w", False),
    running=_requests("r", True),
    free_blocks=st.integers(0, 30),
    block_size=st.just(4),
    max_num_seqs=st.integers(1, 16),
)


@settings(max_examples=150, deadline=None)
@given(VIEWS, st.sampled_from([None, "swap"]))
def test_pascal_equals_its_full_sort_definition(view, mode):
    policy = PascalPolicy(quantum=10, demote_threshold_tokens=60, mode=mode)
    running = {r.request_id for r in view.running}
    ranked = sorted(view.running + view.waiting, key=lambda r: policy.rank_key(r, r.request_id in running))
    assert list(policy.decide(view)) == _decide_per_queue(view, ranked, mode, policy.queue)


@settings(max_examples=300, deadline=None)
@given(
    VIEWS, st.sampled_from([None, TokenPacer(tpot_s=0.5)]), st.sampled_from([(10, 60), (500, 5000), (5, 0)])
)
def test_pascal_quiet_steps_equal_their_definition(view, pacer, params):
    """quiet_steps (one inlined pass) against the definition in the policy's own terms."""
    quantum, limit = params
    policy = PascalPolicy(quantum=quantum, demote_threshold_tokens=limit, starving_first=pacer)
    assert policy.quiet_steps(view) == _quiet_definition(policy, view)
    if view.waiting and view.running:  # a queue with waiting requests: some quantum may count
        alone = view.__class__(view.now_s, view.waiting[:1], view.running, 4, 4, 8)
        assert policy.quiet_steps(alone) == _quiet_definition(policy, alone)


@settings(max_examples=100, deadline=None)
@given(st.lists(VIEWS, min_size=2, max_size=5), st.sampled_from([(10, 60), (5, 0)]))
def test_pascal_asked_over_many_views_answers_as_a_fresh_policy(views, params):
    """One policy asked of view after view (as a host does), some views sharing their
    running or waiting tuple with the view before (the policy reads those once) and others
    only equal to it, answers each as a policy that never saw another view."""
    quantum, limit = params
    shared = [views[0]]
    for i, view in enumerate(views[1:]):
        prev = shared[-1]
        if i % 3 == 0:
            view = dataclasses.replace(view, running=prev.running)  # same tuple, other waiting
        elif i % 3 == 1:
            view = dataclasses.replace(view, waiting=prev.waiting)
        else:
            view = dataclasses.replace(view, running=tuple(prev.running[:-1]), waiting=tuple(prev.waiting))
        shared.append(view)
    policy = PascalPolicy(quantum=quantum, demote_threshold_tokens=limit)
    for view in shared:
        fresh = PascalPolicy(quantum=quantum, demote_threshold_tokens=limit)
        assert policy.quiet_steps(view) == fresh.quiet_steps(view)
        assert list(policy.decide(view)) == list(fresh.decide(view))
        assert policy.quiet_steps(view) == fresh.quiet_steps(view)


@pytest.mark.parametrize("n_running", [2, 6])
def test_pascal_fill_shortcuts_hold_with_negative_costs(n_running):
    """A negative cost (a broken host value) lets a run of running requests fit together
    while one of them alone does not: the shortcuts must then take them one at a time."""
    running = tuple(
        RequestView(f"r{i}", 0.0, Phase.REASONING, 8, 8, 1, num_blocks=0, blocks_needed=5 if i == 0 else -3)
        for i in range(n_running)
    )
    policy = PascalPolicy()
    for waiting in ((), (RequestView("w0", 9.0, Phase.PREFILL, 8, 0, 0, blocks_needed=1, enqueued_s=9.0),)):
        view = SchedulerView(0.0, waiting, running, 3, 4, 16)
        ranked = sorted(view.running + view.waiting, key=lambda r: policy.rank_key(r, r.request_id[0] == "r"))
        assert list(policy.decide(view)) == _decide_per_queue(view, ranked, "swap", policy.queue)
        assert Preempt("r0", "swap") in policy.decide(view)


def test_pascal_a_nan_turn_is_met_after_the_running_requests():
    """A waiting request whose enqueue time is NaN compares after every running request it
    meets in its queue (``key(waiting) < key(running)`` is False): blocked here, where taken
    first it would be admitted and preempt both."""
    running = tuple(
        RequestView(
            f"r{i}", 0.0, Phase.REASONING, 8, 8, 1, num_blocks=2, blocks_needed=1, enqueued_s=float(i)
        )
        for i in range(2)
    )
    nan = RequestView("w0", 0.0, Phase.PREFILL, 8, 0, 0, blocks_needed=4, enqueued_s=float("nan"))
    assert list(PascalPolicy().decide(SchedulerView(0.0, (nan,), running, 2, 4, 16))) == []


@settings(max_examples=300, deadline=None)
@given(VIEWS)
def test_declared_quiet_without_waiting_holds(view):
    """FCFS, RR and PASCAL declare ``quiet_without_waiting``: with nothing waiting and the
    running requests fitting the seats and (their growth) the free blocks, no decision and
    no limit on the quiet steps, whatever the quanta, phases and pacer times."""
    need = sum(r.blocks_needed for r in view.running)
    view = dataclasses.replace(view, waiting=(), free_blocks=need + view.free_blocks % 3,
                               max_num_seqs=max(view.max_num_seqs, len(view.running)))  # fmt: skip
    for policy in (FCFSPolicy(), RoundRobinPolicy(quantum=3), PascalPolicy(quantum=3, demote_threshold_tokens=20),
                   PascalPolicy(quantum=3, starving_first=TokenPacer(tpot_s=0.5))):  # fmt: skip
        assert quiet_without_waiting(policy)
        assert list(policy.decide(view)) == [] and policy.quiet_steps(view) == QUIET_FOREVER
    tight = dataclasses.replace(view, free_blocks=need - 1)  # growth no longer fits: some preempt
    if view.running and need > 0:
        assert all(list(p.decide(tight)) for p in (FCFSPolicy(), PascalPolicy()))


def _quiet_definition(policy, view):
    """Nothing waiting: for ever; a waiting reader that may start starving: 1 step; else
    until a quantum expires in a queue with waiting requests, or a reasoning request passes
    the demotion threshold."""
    if not view.waiting:
        return QUIET_FOREVER
    pacer = policy.starving_first
    if pacer is not None and any(policy.queue(r) == LOW and r.paced_until_s is not None
                                 and not pacer.starving(r.paced_until_s, view.now_s) for r in view.waiting):  # fmt: skip
        return 1
    waits, steps = {policy.queue(r) for r in view.waiting}, QUIET_FOREVER
    for r in view.running:
        queue, used = policy.queue(r), policy.quantum_used(r)
        if queue in waits and used < policy.quantum:
            steps = min(steps, policy.quantum - used)
        if queue == HIGH:
            steps = min(steps, policy.demote_threshold_tokens - r.num_tokens + 1)
    return max(1, steps)


def _decide_per_queue(view, ranked, mode, queue_of):
    """decide_ranked's plain loop with one head-of-line block per queue (PASCAL §IV-B/C: the
    low queue uses what the high queue could not allocate)."""
    running_ids = {r.request_id for r in view.running}
    budget = view.free_blocks + sum(r.num_blocks for r in view.running)
    seats, admits, preempts, blocked = view.max_num_seqs, [], [], set()
    for r in ranked:
        if r.request_id in running_ids:
            cost = r.num_blocks + r.blocks_needed
            if seats >= 1 and cost <= budget:
                budget, seats = budget - cost, seats - 1
            else:
                preempts.append(Preempt(r.request_id, mode))
        elif queue_of(r) not in blocked:
            if seats >= 1 and r.blocks_needed <= budget:
                admits.append(Admit(r.request_id))
                budget, seats = budget - r.blocks_needed, seats - 1
            else:
                blocked.add(queue_of(r))
    return preempts + admits


def _program(r):
    return r.program_id if r.program_id is not None else "\x00" + r.request_id


def _gang(view, program_key):
    members = {}
    for r in view.running + view.waiting:
        members.setdefault(_program(r), []).append(r)
    order = sorted(members, key=lambda pid: program_key(pid, members[pid]))
    return [r for pid in order for r in sorted(members[pid], key=lambda r: r.request_id)]


@settings(max_examples=150, deadline=None)
@given(VIEWS)
def test_app_fifo_equals_its_full_sort_definition(view):
    ranked = _gang(view, lambda pid, reqs: (min(r.arrival_s for r in reqs), pid))
    assert list(AppFIFOPolicy().decide(view)) == decide_ranked(view, ranked)


@settings(max_examples=150, deadline=None)
@given(VIEWS, st.dictionaries(st.sampled_from(["pa", "pb", "pc", "\x00w1"]), st.tuples(st.integers(1, 5),
       st.integers(0, 400)), max_size=3))  # fmt: skip
def test_dynasor_equals_its_full_sort_definition(view, history):
    policy = DynasorPolicy(starvation_bound_s=100.0, prior_tokens=30.0)
    state = DynasorState(history, {})
    n = sum(c for c, _ in history.values())
    fallback = sum(t for _, t in history.values()) / n if n else 30.0

    def key(pid, reqs):
        arrival = min(r.arrival_s for r in reqs)
        if view.now_s - arrival > 100.0:
            return (0, arrival, pid)
        mean = history[pid][1] / history[pid][0] if pid in history else fallback
        return (1, sum(max(1.0, mean - r.num_output_tokens) for r in reqs), arrival, pid)

    decisions, _ = policy.step(view, state)
    assert decisions == decide_ranked(view, _gang(view, key))
    keys = policy.program_keys(view, state)
    for pid, reqs in _members(view).items():
        assert keys[pid] == key(pid, reqs)


def _members(view):
    out = {}
    for r in view.running + view.waiting:
        out.setdefault(_program(r), []).append(r)
    return out


# --- queues in turn order with tied times (the simulator's shape) ------------------------------

SIM_TIMES = [-float("inf"), -1.0, -0.0, 0.0, 0.0, 1.0, 1.0, 2.5, float("inf")]  # -0.0 == 0.0: a tie


def _in_turn_order(prefix: str, times: list, draw) -> tuple[RequestView, ...]:
    """Requests whose (arrival and enqueue) times never decrease, ids out of that order: a
    shortcut that takes a non-decreasing queue as it is puts tied ones out of id order."""
    ids = draw(st.permutations(range(len(times))))
    return tuple(
        RequestView(
            f"{prefix}{i:03d}", t, draw(st.sampled_from(list(Phase))), draw(st.integers(1, 64)), 0,
            draw(st.integers(0, 80)), num_blocks=draw(st.integers(0, 6)) if prefix == "r" else 0,
            blocks_needed=draw(st.integers(0, 2) if prefix == "r" else st.integers(0, 8)), enqueued_s=t,
            quantum_used=draw(st.integers(0, 30)) if prefix == "r" else 0,
            num_answer_tokens=draw(st.none() | st.integers(0, 40)), paced_until_s=draw(st.none() | TIMES),
        )
        for i, t in zip(ids, times, strict=True)
    )  # fmt: skip


@st.composite
def turn_order_views(draw) -> SchedulerView:
    times = st.lists(st.sampled_from(SIM_TIMES), max_size=70).map(sorted)  # stable: -0.0, 0.0 kept
    waiting = _in_turn_order("w", draw(times), draw)
    running = _in_turn_order("r", draw(st.lists(st.sampled_from(SIM_TIMES), max_size=40).map(sorted)), draw)
    return SchedulerView(draw(st.sampled_from([0.0, 80.0])), waiting, running, draw(st.integers(0, 60)), 4,
                         draw(st.integers(1, 48)))  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(turn_order_views())
def test_queues_in_turn_order_with_ties_keep_id_order(view):
    """FCFS, RR and PASCAL on queues whose times never decrease, with and without the host's
    columns: the waiting order is (time, id), running requests by turn likewise, and PASCAL
    decides as its full-sort definition (threshold 60: exactly at it stays high)."""
    store = ColumnStore()
    for r in view.waiting:
        store.append(r)
    hosted = dataclasses.replace(view, waiting_columns=store.snapshot()[1])
    for field in ("arrival_s", "enqueued_s"):
        by_id = sorted(view.waiting, key=lambda r: (getattr(r, field), r.request_id))
        assert list(waiting_ordered(hosted, field)) == list(waiting_ordered(view, field)) == by_id
    by_turn = sorted(view.running, key=lambda r: (r.enqueued_s, r.request_id))
    assert ordered(list(view.running), "enqueued_s") == by_turn
    for policy in (PascalPolicy(quantum=10, demote_threshold_tokens=60), PascalPolicy(quantum=5, mode=None)):
        ranked = sorted(view.running + view.waiting, key=lambda r: policy.rank_key(r, r.request_id[0] == "r"))
        expected = _decide_per_queue(view, ranked, policy.mode, policy.queue)
        assert list(policy.decide(view)) == list(policy.decide(hosted)) == expected
    for policy in (FCFSPolicy(), RoundRobinPolicy(quantum=10),
                   PascalPolicy(quantum=10, demote_threshold_tokens=60, starving_first=TokenPacer(tpot_s=0.5))):  # fmt: skip
        assert list(policy.decide(view)) == list(policy.decide(hosted))


def _running(rid, phase, prompt, out, used, answered=None):
    return RequestView(rid, 0.0, phase, prompt, prompt + out, out, num_blocks=2, quantum_used=used,
                       num_answer_tokens=answered)  # fmt: skip


_LOW_WAITING = RequestView("w0", 0.0, Phase.ANSWERING, 8, 0, 4, blocks_needed=1)
_HIGH_WAITING = RequestView("w1", 0.0, Phase.PREFILL, 8, 0, 0, blocks_needed=1)


@pytest.mark.parametrize(
    ("running", "waiting", "steps"),
    [
        # demoted (prompt 50 + 56 output = 106 > 100: 6 past the threshold), 8 tokens since
        # admitted: its quantum counts the 6 since it entered the low queue: 10 - 6 = 4 steps
        (_running("r0", Phase.REASONING, 50, 56, 8), (_LOW_WAITING,), 4),
        (_running("r0", Phase.REASONING, 50, 56, 8), (_HIGH_WAITING,), QUIET_FOREVER),  # low: no high limit
        (_running("r0", Phase.REASONING, 120, 0, 8), (_LOW_WAITING,), 2),  # prompt already past: all 8 count
        (_running("r0", Phase.ANSWERING, 8, 30, 9, answered=3), (_LOW_WAITING,), 7),  # 3 answer tokens
        (_running("r0", Phase.ANSWERING, 8, 30, 10, answered=12), (_LOW_WAITING,), QUIET_FOREVER),  # expired
        (_running("r0", Phase.REASONING, 50, 50, 0), (_LOW_WAITING,), 1),  # exactly at the threshold
        (_running("r0", Phase.REASONING, 50, 45, 7), (_LOW_WAITING,), 6),  # passes it in 6 steps
        (_running("r0", Phase.REASONING, 50, 45, 7), (_HIGH_WAITING,), 3),  # its quantum first
    ],
)
def test_pascal_quiet_steps_per_branch(running, waiting, steps):
    """quiet_steps on one running request per queue case (quantum 10, threshold 100)."""
    policy = PascalPolicy(quantum=10, demote_threshold_tokens=100)
    view = SchedulerView(0.0, waiting, (running,), 4, 4, 8)
    assert policy.quiet_steps(view) == _quiet_definition(policy, view) == steps


class _CountedQueue(tuple):
    """A waiting queue that counts the requests read off it by index."""

    reads = 0

    def __getitem__(self, i):
        type(self).reads += 1
        return super().__getitem__(i)


@pytest.mark.parametrize("policy", [FCFSPolicy(), RoundRobinPolicy(quantum=10), PascalPolicy(quantum=10)],
                         ids=["fcfs", "round_robin", "pascal"])  # fmt: skip
def test_with_host_columns_the_queue_is_read_only_until_admission_stops(policy):
    """2,000 waiting (every third answering), the head of each queue too big to fit: with
    the host's columns the walk stops at the first chunk (64), not at the queue's end."""
    store = ColumnStore()
    for i in range(2000):
        phase = Phase.ANSWERING if i % 3 == 2 else Phase.PREFILL
        store.append(RequestView(f"w{i:04d}", i * 0.001, phase, 8, 0, 4 if i % 3 == 2 else 0,
                                 blocks_needed=100, enqueued_s=i * 0.001))  # fmt: skip
    waiting, columns = store.snapshot()
    view = SchedulerView(0.0, _CountedQueue(waiting), (), 50, 4, 8, waiting_columns=columns)
    _CountedQueue.reads = 0
    assert list(policy.decide(view)) == []
    assert 0 < _CountedQueue.reads <= 2 * 64
