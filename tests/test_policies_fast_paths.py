"""The shortcuts of the fast decide() paths make exactly the decisions of the plain
definitions (a full sort by the documented key with request-id tie-breaks, then
:func:`decide_ranked`), and each shortcut is taken by some case here (asserted)."""

import dataclasses
import random
from itertools import takewhile

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reasonserve.core import Phase
from reasonserve.core.columns import QueueColumns
from reasonserve.core.decisions import Order, Preempt
from reasonserve.policies import RequestView, SchedulerView, _ranked
from reasonserve.policies import _order as order_mod
from reasonserve.policies import _programs as programs_mod
from reasonserve.policies import lpm as lpm_mod
from reasonserve.policies._order import argsort_lazily, lex_order, ranked_lazily
from reasonserve.policies._programs import Programs
from reasonserve.policies._ranked import decide_ranked
from reasonserve.policies.app_fifo import AppFIFOPolicy
from reasonserve.policies.dynasor import DynasorPolicy, DynasorState
from reasonserve.policies.flashtts import prefix as prefix_mod
from reasonserve.policies.flashtts.prefix import PrefixAwarePolicy, prefix_order
from reasonserve.policies.lpm import LPMPolicy, cached_prefix_blocks

TIMES = st.sampled_from([0.0, 1.0, 2.5, 7.0])  # few values: many ties
HASHES = st.lists(st.integers(0, 5), max_size=4).map(tuple)


def _requests(prefix, running, hashes=HASHES):
    return st.lists(
        st.builds(
            RequestView,
            request_id=st.sampled_from([f"{prefix}{i}" for i in range(12)]),
            arrival_s=TIMES,
            phase=st.just(Phase.PREFILL),
            num_prompt_tokens=st.integers(1, 64),
            num_computed_tokens=st.just(0),
            num_output_tokens=st.integers(0, 40),
            num_blocks=st.integers(1, 6) if running else st.just(0),
            blocks_needed=st.integers(0, 2) if running else st.integers(1, 8),
            program_id=st.sampled_from([None, "pa", "pb", "pc"]),
            prefix_hashes=hashes,
        ),
        max_size=10,
        unique_by=lambda r: r.request_id,
    ).map(tuple)


VIEWS = st.builds(
    SchedulerView,
    now_s=st.just(0.0),
    waiting=_requests("w", False),
    running=_requests("r", True),
    free_blocks=st.integers(0, 30),
    block_size=st.just(4),
    max_num_seqs=st.integers(1, 16),
)


def _by_arrival(requests):
    return sorted(requests, key=lambda r: (r.arrival_s, r.request_id))


# --- plain definitions -------------------------------------------------------------------


def _plain_prefix_order(paths):
    """FlashTTS greedy order, as first written: the key of a path is the tuple of its nodes'
    ranks (the first path that has the node); a stable sort by it."""
    rank = {}
    for i, path in enumerate(paths):
        for node in path:
            rank.setdefault(node, i)
    return sorted(range(len(paths)), key=lambda i: tuple(rank[node] for node in paths[i]))


def _plain_match(hashes, cached):
    return len(list(takewhile(cached.__contains__, hashes)))


# --- FlashTTS prefix order ---------------------------------------------------------------

PATHS = st.lists(st.lists(st.integers(0, 6), max_size=4).map(tuple), max_size=12)


SAME_FIXTURE = [HealthCheck.function_scoped_fixture]  # ``small`` is the same for every example


@pytest.fixture(params=[0, prefix_mod.SMALL], ids=["numpy", "plain"])
def small(request, monkeypatch):
    """Run with the numpy path for every queue length (0), and with the plain one for short
    queues (the default)."""
    monkeypatch.setattr(prefix_mod, "SMALL", request.param)
    return request.param


@settings(max_examples=300, deadline=None, suppress_health_check=SAME_FIXTURE)
@given(paths=PATHS)
def test_prefix_order_equals_the_plain_definition(small, paths):
    assert prefix_order(paths) == _plain_prefix_order(paths)


@settings(max_examples=200, deadline=None, suppress_health_check=SAME_FIXTURE)
@given(paths=PATHS, rnd=st.randoms(use_true_random=False))
def test_int_path_order_in_any_given_order_equals_the_plain_definition(small, paths, rnd):
    taken = list(range(len(paths)))  # taken[k]: the k-th path taken
    rnd.shuffle(taken)
    expected = [taken[i] for i in _plain_prefix_order([paths[j] for j in taken])]
    for ints in (True, False):
        got = prefix_mod._path_order(paths, np.array(taken, np.intp), ints=ints)
        assert list(got) == expected


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4).flatmap(lambda w: st.lists(st.lists(st.integers(0, 6), min_size=w, max_size=w)
                                                   .map(tuple), min_size=1, max_size=12)))  # fmt: skip
def test_prefix_order_of_paths_all_one_length_equals_the_plain_definition(paths):
    """Paths all as long: the rank columns are the rows of the ranks (no gather), same order."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prefix_mod, "SMALL", 0)
        assert prefix_order(paths) == _plain_prefix_order(paths)
        assert list(prefix_mod._path_order(paths, np.arange(len(paths)), ints=True)) == _plain_prefix_order(paths)
    width, rank = len(paths[0]), np.arange(len(paths) * len(paths[0]))
    columns = prefix_mod._rank_columns(np.full(len(paths), width), width, rank)
    assert all(np.shares_memory(c, rank) for c in columns)  # the uniform branch was taken
    ragged = prefix_mod._rank_columns(np.array([width] * (len(paths) - 1) + [width + 1]), width + 1,
                                      np.arange(len(paths) * width + 1))  # fmt: skip
    assert [c.tolist() for c in ragged] == [
        [i * width + j if j < width else -1 for i in range(len(paths) - 1)] + [(len(paths) - 1) * width + j]
        for j in range(width + 1)
    ]


@pytest.mark.parametrize(
    "paths",
    [
        [(2**70, 1), (5,), (2**70, 3)],  # beyond int64: the dict path
        [("a", "b"), ("c",), ("a", "d")],  # not ints at all
        [tuple(range(k, k + 30)) for k in (5, 0, 5, 3)],  # too wide for one int64 key: lexsort
        [(3, 1), (3,), (), (1, 3)],  # an empty path sorts first
        # 8 paths of 19 distinct nodes: packed in one int64 the last key is 9^19 * 8 > 2^63
        [tuple(range(100 * k, 100 * k + 19)) for k in range(8)],
    ],
)
def test_prefix_order_fallbacks_equal_the_plain_definition(monkeypatch, paths):
    monkeypatch.setattr(prefix_mod, "SMALL", 0)  # the numpy path
    if len(paths[0]) in (19, 30):
        assert not prefix_mod._one_key_fits(len(paths), len(paths[0]))
    assert prefix_order(paths) == _plain_prefix_order(paths)
    got = prefix_mod._path_order(paths, np.arange(len(paths)), ints=True)
    assert list(got) == _plain_prefix_order(paths)


def _plain_prefix_decisions(view):
    running, waiting = _by_arrival(view.running), _by_arrival(view.waiting)
    running = [running[i] for i in _plain_prefix_order([r.prefix_hashes for r in running])]
    waiting = [waiting[i] for i in _plain_prefix_order([r.prefix_hashes for r in waiting])]
    decisions = decide_ranked(view, running + waiting)
    preempted = {d.request_id for d in decisions if isinstance(d, Preempt)}
    kept = tuple(r.request_id for r in running if r.request_id not in preempted)
    return ([Order(kept)] if kept else []) + decisions


@settings(max_examples=200, deadline=None, suppress_health_check=SAME_FIXTURE)
@given(view=VIEWS)
def test_prefix_policy_equals_its_plain_definition(small, view):
    assert list(PrefixAwarePolicy().decide(view)) == _plain_prefix_decisions(view)


# --- LPM ---------------------------------------------------------------------------------


def _plain_lpm(view):
    cached = {h for r in view.running for h in r.prefix_hashes}
    key = lambda r: (-_plain_match(r.prefix_hashes, cached), r.arrival_s, r.request_id)
    return decide_ranked(view, _by_arrival(view.running) + sorted(view.waiting, key=key))


@settings(max_examples=300, deadline=None)
@given(VIEWS)
def test_lpm_equals_its_plain_definition(view):
    assert list(LPMPolicy().decide(view)) == _plain_lpm(view)


@pytest.fixture(params=[0, 2, lpm_mod.COLUMNS], ids=["per-entry", "2-columns", "default"])
def columns(request, monkeypatch):
    """Blocks matched column by column before the per-entry walk: none (every match walked
    per entry), 2 (both, for matches longer than 2) and the default."""
    monkeypatch.setattr(lpm_mod, "COLUMNS", request.param)
    return request.param


@settings(max_examples=200, deadline=None, suppress_health_check=SAME_FIXTURE)
@given(st.lists(st.lists(st.integers(0, 5), max_size=5).map(tuple), max_size=8), st.sets(st.integers(0, 5)))
def test_cached_prefix_blocks_equal_the_plain_match(columns, hashes, cached):
    got = cached_prefix_blocks(hashes, cached).tolist()
    assert got == [_plain_match(h, cached) for h in hashes]


def test_cached_prefix_blocks_walks_what_the_columns_leave(monkeypatch):
    """A match longer than COLUMNS is finished per entry; one that ends inside them, or an
    entry shorter than them, is not walked."""
    monkeypatch.setattr(lpm_mod, "COLUMNS", 2)
    walked = []
    real = lpm_mod.takewhile
    monkeypatch.setattr(lpm_mod, "takewhile", lambda f, it: walked.append(1) or real(f, it))
    hashes = [(1, 2, 3, 9), (1, 9, 2), (1,), (1, 2, 3, 4, 5)]
    assert cached_prefix_blocks(hashes, {1, 2, 3, 4, 5}).tolist() == [3, 1, 1, 5]
    assert len(walked) == 2  # (1, 2, 3, 9) and (1, 2, 3, 4, 5)


def test_cached_prefix_blocks_takes_both_branches():
    everything = [(1, 2), (2,), ()]
    assert cached_prefix_blocks(everything, {1, 2}).tolist() == [2, 1, 0]  # all cached: lengths
    partial = [(1, 9, 2), (9, 1), (1, 2, 3)]
    assert cached_prefix_blocks(partial, {1, 2}).tolist() == [1, 0, 2]  # stops at the first miss


# --- lazy ranking and the gang fill --------------------------------------------------------

KEYED = st.lists(st.tuples(st.integers(0, 2), st.sampled_from([0.0, 1.5])), max_size=12)


@settings(max_examples=200, deadline=None)
@given(KEYED)
@example([(2, 0.0), (0, 1.5), (1, 0.0)])  # no ties
@example([(1, 0.0), (0, 1.5), (1, 0.0)])  # a tie, broken by id
def test_ranked_lazily_equals_a_full_sort_with_id_ties(keys):
    reqs = [RequestView(f"q{(7 * i) % 13:02d}", 0.0, Phase.PREFILL, 1, 0, 0) for i in range(len(keys))]
    a = np.array([k[0] for k in keys], np.intp)
    b = np.array([k[1] for k in keys], np.float64)
    expected = sorted(range(len(keys)), key=lambda i: (keys[i], reqs[i].request_id))
    assert list(ranked_lazily(reqs, (a, b))) == [reqs[i] for i in expected]
    names = [r.request_id for r in reqs]
    assert lex_order((a, b), lambda: names).tolist() == expected


def test_lex_order_reads_the_tie_break_only_on_ties():
    read = []
    tie_break = lambda: read.append(1) or ["b", "a"]
    assert lex_order((np.array([2.0, 1.0]),), tie_break).tolist() == [1, 0]
    assert read == []
    assert lex_order((np.array([1.0, 1.0]),), tie_break).tolist() == [1, 0]  # by "a" < "b"
    assert read == [1]


def test_programs_group_runs_and_scattered_members_alike():
    ids = ["pa", "pa", "pb", "pa", None, "pb", "pc", "pc"]
    reqs = tuple(
        RequestView(f"x{i}", float(10 - i), Phase.PREFILL, 1, 0, 0, program_id=p) for i, p in enumerate(ids)
    )
    programs = Programs(reqs)
    assert programs.keys == ["pa", "pb", "\x00x4", "pc"]
    assert programs.codes.tolist() == [0, 0, 1, 0, 2, 1, 3, 3]
    assert programs.min_arrival.tolist() == [7.0, 5.0, 6.0, 3.0]


def _gang_plain(view):
    members = {}
    for r in view.running + view.waiting:
        pid = r.program_id if r.program_id is not None else "\x00" + r.request_id
        members.setdefault(pid, []).append(r)
    order = sorted(members, key=lambda pid: (min(r.arrival_s for r in members[pid]), pid))
    return decide_ranked(view, [r for pid in order for r in sorted(members[pid], key=lambda r: r.request_id)])


def _run(i, program, blocks=2, needed=1):
    return RequestView(f"r{i}", float(i), Phase.REASONING, 8, 8, 1, num_blocks=blocks, blocks_needed=needed,
                       program_id=program)  # fmt: skip


def _wait(i, program, needed):
    return RequestView(f"w{i}", float(i), Phase.PREFILL, 8, 0, 0, blocks_needed=needed, program_id=program)


@pytest.mark.parametrize(
    ("free", "expect_all_fit"),
    [(3, True), (2, False)],  # after the block: the later programs' running requests all fit, or not
)
def test_gang_fill_shortcut_for_running_after_the_block(monkeypatch, free, expect_all_fit):
    calls = []
    real = _ranked._all_fit
    monkeypatch.setattr(_ranked, "_all_fit", lambda fill, rs: calls.append(real(fill, rs)) or calls[-1])
    # p0 arrives first; its waiting request does not fit, so admission is blocked at p0 and
    # the running requests of p1 and p2 are seen after the block.
    view = SchedulerView(
        now_s=0.0,
        waiting=(_wait(0, "p0", 50), _wait(5, "p1", 1)),
        running=(_run(1, "p1"), _run(2, "p2"), _run(3, "p2")),
        free_blocks=free,
        block_size=4,
        max_num_seqs=8,
    )
    decisions = AppFIFOPolicy().decide(view)
    assert decisions == _gang_plain(view)
    assert calls == [expect_all_fit]
    assert any(isinstance(d, Preempt) for d in decisions) is not expect_all_fit


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-(2**40), 2**40), unique=True, max_size=60), st.integers(1, 8))
def test_argsort_lazily_equals_a_full_sort(values, first):
    key = np.array(values, np.int64)
    expected = sorted(range(len(values)), key=values.__getitem__)
    assert list(argsort_lazily(key, first)) == expected  # partial selection once len > 4 * first
    assert len(values) <= 4 * first or list(argsort_lazily(key, first))[:first] == expected[:first]


def test_argsort_lazily_sorts_its_partial_selection():
    """numpy's partial selection does not come out in order for every input; find one
    where it does not (so the sort of the head is needed) and check the order."""
    for seed in range(100):
        values = random.Random(seed).sample(range(10**6), 300)
        key = np.array(values, np.int64)
        head = key[np.argpartition(key, 50)[:50]].tolist()
        if head != sorted(head):
            break
    else:
        pytest.skip("this numpy's partial selection came out sorted for every seed tried")
    assert list(argsort_lazily(key, 50)) == sorted(range(300), key=values.__getitem__)


@pytest.mark.parametrize(("free", "all_fit"), [(3, True), (2, False)])
def test_running_first_fill_shortcut_equals_the_ranked_fill(monkeypatch, free, all_fit):
    calls = []
    real = _ranked._all_fit
    monkeypatch.setattr(_ranked, "_all_fit", lambda fill, rs: calls.append(real(fill, rs)) or calls[-1])
    running = (_run(1, None), _run(2, None), _run(3, None))  # cost 3 each; budget = free + 6
    waiting = (_wait(4, None, 1), _wait(5, None, 9), _wait(6, None, 1))
    view = SchedulerView(0.0, waiting, running, free, 4, 8)
    expected = decide_ranked(view, running + waiting)
    assert _ranked.decide_running_first(view, running, iter(waiting)) == expected
    assert calls == [all_fit]
    assert any(isinstance(d, Preempt) for d in expected) is not all_fit


@pytest.mark.parametrize(("free", "seats", "preempted"), [(0, 8, 3), (2, 0, 3), (3, 8, 2), (4, 8, 2)])
def test_running_many_equals_one_at_a_time(free, seats, preempted):
    """All at once when none fits (no room, or no seat), else one at a time (free 3: exactly
    the cheapest one's cost, which still fits)."""
    running = (_run(1, None), _run(2, None, needed=2), _run(3, None))  # costs 3, 4, 3
    view = SchedulerView(0.0, (), running, free, 4, 8)
    batch, single = _ranked.Fill(view, "swap"), _ranked.Fill(view, "swap")
    for fill in (batch, single):
        fill.budget, fill.seats = free, seats  # what better-ranked requests left
    batch.running_many(running)
    for r in running:
        single.running(r)
    assert (batch.preempts, batch.budget, batch.seats) == (single.preempts, single.budget, single.seats)
    assert len(batch.preempts) == preempted


def test_dynasor_reads_no_estimate_when_every_program_is_escalated(monkeypatch):
    reads = []
    real = QueueColumns.column
    monkeypatch.setattr(QueueColumns, "column", lambda self, name: reads.append((name, len(self))) or real(self, name))
    # pa arrived first but has the most work left: SJF would put pb first, escalation pa
    waiting = (_wait(0, "pa", 2), _wait(1, "pa", 2), _wait(2, "pb", 2))
    running = (_run(3, "pb"),)
    starved = SchedulerView(500.0, waiting, running, 9, 4, 8)
    decisions, _ = DynasorPolicy(starvation_bound_s=60.0, prior_tokens=100.0).step(starved, DynasorState())
    assert decisions == _gang_plain(starved)  # (earliest arrival, program): pa first
    assert [d.request_id for d in decisions] == ["w0", "w1", "w2"]
    assert ("num_output_tokens", 3) not in reads  # no estimate: the queue's tokens are not read
    reads.clear()
    fresh = SchedulerView(30.0, waiting, running, 9, 4, 8)  # nothing escalated: SJF, pb first
    decisions, _ = DynasorPolicy(starvation_bound_s=60.0, prior_tokens=100.0).step(fresh, DynasorState())
    assert decisions == decide_ranked(fresh, [running[0], waiting[2], waiting[0], waiting[1]])
    assert [d.request_id for d in decisions] == ["w2", "w0", "w1"]
    assert sorted(reads).count(("num_output_tokens", 3)) == 1  # the estimate reads them once


# --- App-FIFO and Dynasor against their plain definitions -----------------------------------

NOW = st.sampled_from([0.0, 61.0, 62.5, 67.0, 500.0])  # with a 60 s bound: 61 - 1.0 is exactly 60


def _programs_of(view):
    members = {}
    for r in view.running + view.waiting:
        pid = r.program_id if r.program_id is not None else "\x00" + r.request_id
        members.setdefault(pid, []).append(r)
    return members


def _plain_dynasor(view, bound, prior):
    """Fresh state (no history): a program's estimate is the sum over its live requests of
    max(1, prior - generated); one that arrived more than ``bound`` ago goes first, by arrival."""
    members = _programs_of(view)

    def key(pid):
        arrival = min(r.arrival_s for r in members[pid])
        if view.now_s - arrival > bound:
            return (0, arrival, pid)
        return (1, sum(max(1.0, prior - r.num_output_tokens) for r in members[pid]), arrival, pid)

    order = sorted(members, key=key)
    return decide_ranked(view, [r for pid in order for r in sorted(members[pid], key=lambda r: r.request_id)])


@settings(max_examples=200, deadline=None)
@given(VIEWS, NOW)
def test_app_fifo_equals_its_plain_definition(view, now):
    view = dataclasses.replace(view, now_s=now)
    assert AppFIFOPolicy().decide(view) == _gang_plain(view)


@settings(max_examples=200, deadline=None)
@given(VIEWS, NOW)
def test_dynasor_equals_its_plain_definition(view, now):
    view = dataclasses.replace(view, now_s=now)
    policy = DynasorPolicy(starvation_bound_s=60.0, prior_tokens=20.0)  # below some outputs: max(1, .)
    decisions, _ = policy.step(view, DynasorState())
    assert decisions == _plain_dynasor(view, 60.0, 20.0)


@settings(max_examples=100, deadline=None)
@given(VIEWS, NOW)
def test_gang_policies_decide_the_same_on_a_joined_or_copied_queue(view, now):
    """Programs.of_view joins running + waiting past ``_COPY_UP_TO`` waiting (0 here: always)."""
    view = dataclasses.replace(view, now_s=now)
    copied = (AppFIFOPolicy().decide(view), DynasorPolicy().decide(view))
    assert isinstance(Programs.of_view(view).requests, tuple)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(programs_mod, "_COPY_UP_TO", -1)
        assert isinstance(Programs.of_view(view).requests, programs_mod._Joined)
        assert (AppFIFOPolicy().decide(view), DynasorPolicy().decide(view)) == copied


def test_dynasor_history_counts_finished_requests_not_preempted_ones():
    policy, first = DynasorPolicy(), SchedulerView(0.0, (), (_run(1, "pa"),), 9, 4, 8)
    _, seen = policy.step(first, DynasorState())
    preempted = SchedulerView(1.0, (_wait(1, "pa", 1)._replace(request_id="r1"),), (), 9, 4, 8)
    assert policy.step(preempted, seen)[1].history == {}
    finished = SchedulerView(1.0, (), (), 9, 4, 8)
    assert policy.step(finished, seen)[1].history == {"pa": (1, 1)}  # one request, 1 output token


# --- ordered: the numpy read of one field --------------------------------------------------

KEYS = st.lists(
    st.one_of(st.sampled_from([0.0, 1.0, 2.5, 2**60, 2**60 + 1, float("nan")]), st.floats(-1e6, 1e6)),
    max_size=14,
)


def _queue(keys, field="arrival_s"):
    return [
        RequestView(f"q{(7 * i) % 17:02d}", 0.0, Phase.PREFILL, 1, 0, 0)._replace(**{field: k})
        for i, k in enumerate(keys)
    ]


@settings(max_examples=300, deadline=None)
@given(KEYS, st.sampled_from(["arrival_s", "enqueued_s"]), st.booleans())
def test_ordered_equals_the_plain_sort(keys, field, presorted):
    if presorted and not any(k != k for k in keys):
        keys = sorted(keys)
    reqs = _queue(keys, field)
    assert order_mod.ordered(reqs, field) == order_mod.ordered_plain(reqs, field)


@settings(max_examples=300, deadline=None)
@given(KEYS, st.booleans(), st.sampled_from([1, 3, 20]))
def test_pascals_turn_order_equals_the_plain_sort(keys, presorted, copies):
    """The turn order PASCAL takes (ordered(): the plain sort below 256 requests, numpy's
    passes from there) is the plain sort's: in order, with runs of ties, out of order, NaNs,
    big ints."""
    keys = keys * copies
    if presorted and not any(k != k for k in keys):
        keys = sorted(keys)
    reqs = _queue(keys, "enqueued_s")  # ids repeat every 17 requests: equal views, told apart by identity
    assert list(map(id, order_mod.ordered(reqs, "enqueued_s"))) == list(map(id, order_mod.ordered_plain(reqs, "enqueued_s")))


@pytest.mark.parametrize("n", [2, 31, 32, 255, 256])  # the old short-list bound, and the new one
@pytest.mark.parametrize(
    "times",
    [
        lambda i: ["b", "a", "a", "c"][i % 4 if i % 8 else 1],  # str times: Python's order, ties by id
        lambda i: sorted(["a", "b"] * 200)[i],  # str times in order, two runs of ties
        lambda i: [1, 1.0, 2**53, float(2**53), 2**53 + 1][min(i // 3, 4)],  # int and float equal, then not
        lambda i: [2**70, 2**70 + 1, float(2**70)][i % 3],  # beyond int64, some round to the same float
    ],
)
def test_pascals_turn_order_on_hostile_times(n, times):
    """str times, ints that equal floats, ints beyond 2**53 and int64, duplicate ids: the
    same requests, in the same order, as the plain sort, on both sides of both bounds."""
    reqs = [_queue([times(i)], "enqueued_s")[0]._replace(request_id=f"q{(5 * i) % 7}") for i in range(n)]
    assert list(map(id, order_mod.ordered(reqs, "enqueued_s"))) == list(map(id, order_mod.ordered_plain(reqs, "enqueued_s")))


def test_pascals_turn_order_raises_where_the_plain_sort_does():
    """Times that do not compare (a str among floats): a TypeError, as the plain sort's."""
    for n in (3, 40, 300):
        reqs = _queue([float(i) for i in range(n - 1)] + ["x"], "enqueued_s")
        with pytest.raises(TypeError):
            order_mod.ordered_plain(reqs, "enqueued_s")
        with pytest.raises(TypeError):
            order_mod.ordered(reqs, "enqueued_s")


@pytest.mark.parametrize(
    ("keys", "branch"),
    [
        ([0.0, 1.0, 2.5], "as_is"),  # strictly increasing: returned as it is
        ([2.5, 0.0, 1.0], "argsort"),  # distinct: a numpy argsort
        ([1.0, 0.0, 1.0], "plain"),  # a tie out of order: by request id
        ([0.0, 1.0, 1.0, 1.0, 2.5, 2.5], "tie_runs"),  # in order with ties: each run by id, in place
        ([0.5, 2**60 + 1, 2**60], "plain"),  # equal in float64 only: the run's values differ
        ([2**60 + 1, 2**60], "argsort"),  # ints stay exact in int64
        ([2**60 + 1, 2**60, 0.5], "plain"),  # mixed with a float: equal as float64, a tie there
        ([2**70, 1], "plain"),  # beyond int64
        ([1.0, float("nan"), 0.0], "plain"),
        (["10", "9"], "plain"),  # numpy would read these as numbers
        ([1, "10", 5], "plain"),  # a str after the first key: the plain sort's error
        ([1.0, "x"], "plain"),  # not a number: the plain sort's error
    ],
)
def test_ordered_takes_each_branch(monkeypatch, keys, branch):
    """Each branch of ordered() past the short-list bound (set to 0 here) and what it gives."""
    monkeypatch.setattr(order_mod, "SHORT", 0)
    taken = []
    plain, argsort, runs = order_mod.ordered_plain, np.argsort, order_mod.order_tie_runs
    monkeypatch.setattr(order_mod, "ordered_plain", lambda *a: taken.append("plain") or plain(*a))

    def tie_runs(*args):
        out = runs(*args)
        taken.append("tie_runs" if out is not None else "tie_runs refused")
        return out

    monkeypatch.setattr(order_mod, "order_tie_runs", tie_runs)
    monkeypatch.setattr(np, "argsort", lambda *a, **k: taken.append("argsort") or argsort(*a, **k))
    reqs = _queue(keys)
    try:
        got = order_mod.ordered(reqs, "arrival_s")
    except TypeError:  # str and float do not compare: the plain sort's own error
        got = None
    assert taken[-1:] == ([] if branch == "as_is" else [branch])
    if got is not None:
        assert got == sorted(reqs, key=lambda r: (r.arrival_s, r.request_id))


# --- shuffled queues: program grouping, LPM's chunked ranking, FlashTTS's arrival order ------


def _argsort_spy(monkeypatch) -> list:
    """Record the dtype of every array ``np.argsort`` sorts (numpy's own, patched for the test)."""
    calls, real = [], np.argsort

    def spy(a, *args, **kwargs):
        calls.append(np.asarray(a).dtype)
        return real(a, *args, **kwargs)

    monkeypatch.setattr(np, "argsort", spy)
    return calls


@pytest.mark.parametrize(
    ("codes", "num_codes", "radix_codes", "sorted_as"),
    [
        ([0, 0, 1, 2, 2], 3, 2**16, None),  # in order: no sort
        ([3, 4, 0, 0, 1, 1, 2, 2] * 1 + list(range(5, 130)), 130, 2**16, np.intp),  # few runs: numpy's
        ([2, 0, 1, 0, 2, 1, 0, 2], 3, 2**16, np.uint16),  # scattered: radix
        ([2, 0, 1, 0, 2, 1, 0, 2], 3, 2, np.intp),  # more codes than 16 bits hold
    ],
    ids=["in-order", "few-runs", "radix", "too-many-codes"],
)
def test_program_grouping_takes_each_sort_and_equals_a_stable_argsort(
    monkeypatch, codes, num_codes, radix_codes, sorted_as
):
    codes = np.array(codes, np.intp)
    want = np.argsort(codes, kind="stable")
    monkeypatch.setattr(programs_mod, "_RADIX_CODES", radix_codes)
    calls = _argsort_spy(monkeypatch)
    assert np.array_equal(programs_mod._grouped(codes, num_codes), want)
    assert calls == ([] if sorted_as is None else [np.dtype(sorted_as)])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=80), st.sampled_from([1, 4, 64]))
def test_program_grouping_equals_a_stable_argsort(codes, few_runs):
    codes = np.array(codes, np.intp)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(programs_mod, "_FEW_RUNS", few_runs)
        got = programs_mod._grouped(codes, 10)
    assert np.array_equal(got, np.argsort(codes, kind="stable"))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0.0, -0.0, 1.5, -2.0, np.inf, np.nan])),
                max_size=40))  # fmt: skip
def test_min_per_code_equals_the_definition(pairs):
    codes = np.array([c for c, _ in pairs], np.intp)
    values = np.array([v for _, v in pairs], np.float64)
    got = programs_mod._min_per_code(codes, values, 6)
    for c in range(6):
        mine = values[codes == c]
        want = np.inf if not len(mine) else np.nan if np.isnan(mine).any() else mine.min()
        assert got[c] == want or (np.isnan(want) and np.isnan(got[c]))


def test_joined_indexes_as_the_concatenation():
    first, second = ("a", "b"), ("c", "d", "e")
    joined, both = programs_mod._Joined(first, second), first + second
    assert len(joined) == 5 and list(joined) == list(both)
    assert [joined[i] for i in range(-5, 5)] == [both[i] for i in range(-5, 5)]
    for i in (5, -6):
        with pytest.raises(IndexError):
            joined[i]


def test_joined_slices_as_the_concatenation():
    """A joined queue is a Sequence: a slice reads as the concatenation's (it raised
    TypeError: only queues past ``_COPY_UP_TO`` waiting are joined, so only long ones failed)."""
    first, second = ("a", "b"), ("c", "d", "e")
    joined, both = programs_mod._Joined(first, second), first + second
    for cut in (slice(None), slice(1, 4), slice(-4, None), slice(None, None, -2), slice(4, 0, -3), slice(7, 9)):
        assert joined[cut] == both[cut]


MATCHED = st.tuples(st.integers(0, 3), st.sampled_from([0.0, -0.0, 1.0, 2.5, 7.0, np.inf, -np.inf]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(MATCHED, max_size=60), st.sampled_from([1, 2, 64]), st.booleans(), st.randoms())
def test_lpm_ranking_equals_the_full_lexsort(pairs, first, nan, rng):
    """LPM's chunked ranking (``FIRST`` small: several chunks, ties across their bounds) is
    :func:`ranked_lazily` of (-match, arrival, id), NaN arrivals included (its fallback)."""
    ids = [f"w{i}" for i in range(len(pairs))]
    rng.shuffle(ids)
    reqs = [RequestView(rid, a, Phase.PREFILL, 1, 0, 0) for rid, (_, a) in zip(ids, pairs, strict=True)]
    if nan and reqs:
        reqs[0] = reqs[0]._replace(arrival_s=float("nan"))
    matches = np.array([m for m, _ in pairs], np.intp)
    arrival = np.array([r.arrival_s for r in reqs], np.float64)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lpm_mod, "FIRST", first)
        got = list(lpm_mod.ranked_by_match(reqs, matches, arrival))
    assert got == list(ranked_lazily(reqs, (-matches, arrival)))


@pytest.mark.parametrize("nan", [False, True])
def test_lpm_ranking_chunks_unless_an_arrival_is_nan(monkeypatch, nan):
    reqs = [RequestView(f"w{i:02d}", float(i % 5), Phase.PREFILL, 1, 0, 0) for i in range(40)]
    if nan:
        reqs[3] = reqs[3]._replace(arrival_s=float("nan"))
    arrival = np.array([r.arrival_s for r in reqs])
    matches = np.arange(40) % 2
    monkeypatch.setattr(lpm_mod, "FIRST", 2)
    fallback, selections = [], []
    monkeypatch.setattr(lpm_mod, "ranked_lazily", lambda *a: fallback.append(1) or ranked_lazily(*a))
    real_partition = np.partition
    monkeypatch.setattr(np, "partition", lambda *a, **k: selections.append(1) or real_partition(*a, **k))
    got = list(lpm_mod.ranked_by_match(reqs, matches, arrival))
    assert got == list(ranked_lazily(reqs, (-matches, arrival)))
    assert (fallback, bool(selections)) == (([1], False) if nan else ([], True))


@pytest.mark.parametrize("arrivals", ["in-order", "distinct", "ties", "nan"])
def test_flashtts_arrival_order_equals_the_lexsort(monkeypatch, arrivals):
    """_greedy takes the paths by (arrival, id) from column_order (no sort, one numpy sort, or
    ids on ties) and from lex_order on a NaN, equal to the lexsort it replaced."""
    rng = random.Random(1)
    times = {"in-order": [float(i) for i in range(30)], "distinct": rng.sample(range(1000), 30),
             "ties": [float(i % 4) for i in range(30)], "nan": [float("nan") if i % 7 == 0 else float(i % 4)
                                                                for i in range(30)]}[arrivals]  # fmt: skip
    ids = [f"w{i}" for i in range(30)]
    rng.shuffle(ids)
    reqs = [RequestView(rid, float(t), Phase.PREFILL, 1, 0, 0, prefix_hashes=(i % 3, i % 5))
            for i, (rid, t) in enumerate(zip(ids, times, strict=True))]  # fmt: skip
    monkeypatch.setattr(prefix_mod, "SMALL", 0)
    arrival = np.array([r.arrival_s for r in reqs])
    taken = lex_order((arrival,), lambda: ids)
    want = list(prefix_mod._path_order([r.prefix_hashes for r in reqs], taken, ints=True))
    lexsorts = []
    real = prefix_mod.lex_order
    monkeypatch.setattr(prefix_mod, "lex_order", lambda *a: lexsorts.append(1) or real(*a))
    assert list(prefix_mod._greedy(reqs)) == want
    assert bool(lexsorts) == (arrivals == "nan")
