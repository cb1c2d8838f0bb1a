"""Host-kept queue columns: a ColumnStore agrees with the columns read off the objects after
any sequence of appends and removals; every policy decides the same with and without the
host's columns (and differently with misaligned ones, so the check has teeth); bad input
gets typed errors; the engine's scheduler keeps its waiting queue's columns exact."""

import dataclasses
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reasonserve.core import InvalidArgumentError, InvalidTypeError, Phase, UnknownRequestError
from reasonserve.core.column_store import ColumnStore
from reasonserve.core.columns import NUMERIC, QueueColumns, columns_of
from reasonserve.core.decisions import Admit
from reasonserve.core.views import ProgramView, RequestView, SchedulerView
from reasonserve.policies import REGISTRY, FCFSPolicy, RoundRobinPolicy, _order, pascal
from reasonserve.policies._programs import Programs
from reasonserve.policies.app_fifo import AppFIFOPolicy
from reasonserve.policies.dynasor import DynasorPolicy, DynasorState
from reasonserve.policies.flashtts import prefix as flashtts_prefix
from reasonserve.policies.flashtts.prefix import PrefixAwarePolicy
from reasonserve.policies.lpm import LPMPolicy, cached_prefix_blocks, cached_prefix_columns
from reasonserve.policies.pacer import TokenPacer
from reasonserve.policies.pascal import PascalPolicy

HASHES = st.lists(st.integers(0, 5), max_size=11).map(tuple)  # shared, some longer than the columns
INT64_EDGES = st.sampled_from([(-(2**63), 2**63 - 1), (2**63 - 1, 1), (-1, 0, 1)])  # int64, at its ends
# not int64 (bool is); the last one past 8 hashes
ODD_HASHES = st.sampled_from([(2**70, 1), (1, "x"), (1, 2.5), (True, 3), (2**63,), (-1, 2**63), (-(2**63) - 1,),
                              (1, 2, 3, 4, 5, 6, 7, 8, 2**64)])  # fmt: skip
ARRIVALS = [0.0, 1.0, 2.5, 3.0, 70.0, float("nan"), float("inf"), -float("inf")]  # ties on purpose


def _request(i: int, draw_fields: dict, prefix: str = "w") -> RequestView:
    return RequestView(f"{prefix}{i}", phase=Phase.PREFILL, **draw_fields)


@st.composite
def request_fields(draw, running: bool = False, odd: bool = True) -> dict:
    return {
        "arrival_s": draw(st.sampled_from(ARRIVALS)),
        "num_prompt_tokens": draw(st.integers(1, 64)),
        "num_computed_tokens": draw(st.integers(0, 64)),
        "num_output_tokens": draw(st.integers(0, 3000)),
        "priority": draw(st.integers(-2, 2)),
        "num_blocks": draw(st.integers(1, 6)) if running else 0,
        "blocks_needed": draw(st.integers(0, 2)) if running else draw(st.integers(1, 8)),
        "enqueued_s": draw(st.floats(0, 100)),
        "quantum_used": draw(st.integers(0, 300)) if running else 0,
        "program_id": draw(st.sampled_from([None, "pa", "pb", "pc", "\x00w1"])),
        "prefix_hashes": draw(st.one_of(HASHES, INT64_EDGES, *([ODD_HASHES] if odd else []))),
    }


def assert_same_columns(a: QueueColumns, b: QueueColumns) -> None:
    assert len(a) == len(b)
    for name in NUMERIC:
        assert a.column(name).dtype == b.column(name).dtype
        assert np.array_equal(a.column(name), b.column(name), equal_nan=a.column(name).dtype.kind == "f"), (
            name
        )
    keys_a = [a.program_keys[c] for c in a.program_codes.tolist()]
    assert keys_a == [b.program_keys[c] for c in b.program_codes.tolist()]
    assert sorted(a.program_keys) == sorted(b.program_keys)  # dense: every key used
    assert np.array_equal(a.prefix_lens, b.prefix_lens)
    assert (a.prefix_heads is None) == (b.prefix_heads is None)
    if a.prefix_heads is not None:
        assert np.array_equal(a.prefix_heads, b.prefix_heads)


# --- the store against the definition ------------------------------------------------------


@settings(max_examples=150)
@given(st.lists(st.tuples(st.booleans(), request_fields(), st.integers(0, 10**6)), max_size=120),
       st.sampled_from([1, 2, 8]))  # fmt: skip
def test_store_agrees_with_from_requests_after_appends_and_removals(ops, width):
    store, queue, old = ColumnStore(prefix_width=width, capacity=1), [], None
    for i, (add, fields, pick) in enumerate(ops):
        if add or not queue:
            queue.append(_request(i, fields))
            store.append(queue[-1])
        else:
            store.remove(queue.pop(pick % len(queue)).request_id)
        if i % 17 == 0:  # a snapshot is unaffected by later changes
            old = (tuple(queue), store.snapshot())
    views, columns = store.snapshot()
    assert views == tuple(queue) and len(store) == len(queue)
    assert_same_columns(columns, QueueColumns.from_requests(queue, prefix_width=width))
    if old is not None:
        assert old[1][0] == old[0]
        assert_same_columns(old[1][1], QueueColumns.from_requests(old[0], prefix_width=width))
    with pytest.raises(ValueError, match="read-only"):
        columns.column("arrival_s")[:1] = 5.0


def test_store_reuses_program_codes_and_compacts():
    store = ColumnStore(capacity=2)
    reqs = [
        RequestView(f"w{i}", float(i), Phase.PREFILL, 4, 0, 0, program_id=f"p{i % 3}") for i in range(300)
    ]
    for r in reqs:
        store.append(r)
    for r in reqs[:250]:
        store.remove(r.request_id)
    assert len(store._keys) == 3 and store._n < 100  # codes reused; dead rows compacted away
    views, columns = store.snapshot()
    assert views == tuple(reqs[250:])
    assert_same_columns(columns, QueueColumns.from_requests(reqs[250:]))


# --- policies decide the same with the host's columns ---------------------------------------


def _with_columns(
    view: SchedulerView, width: int, misalign: bool = False, churn: tuple = ()
) -> SchedulerView:
    """``view`` with a store's columns; ``churn``: the programs of requests queued before the
    first ones and removed (the store's program codes then differ from first appearance)."""
    store = ColumnStore(prefix_width=width)
    for i, program in enumerate(churn):
        store.append(RequestView(f"churn{i}", 0.0, Phase.PREFILL, 1, 0, 0, program_id=program))
    for r in reversed(view.waiting) if misalign else view.waiting:
        store.append(r)
    for i in range(len(churn)):
        store.remove(f"churn{i}")
    columns = store.snapshot()[1]
    if misalign:
        columns.ends = None  # no ids to check, as a host's from_arrays columns
    return dataclasses.replace(view, waiting_columns=columns)


@st.composite
def views(draw) -> SchedulerView:
    n_wait, n_run, odd = draw(st.integers(0, 40)), draw(st.integers(0, 6)), draw(st.integers(0, 3)) == 0
    waiting = tuple(_request(i, draw(request_fields(odd=odd))) for i in range(n_wait))
    running = tuple(_request(i, draw(request_fields(True, odd)), "r") for i in range(n_run))
    programs = tuple(ProgramView(p, (), draw(st.sampled_from([0.0, 50.0])), 0, draw(st.integers(0, 4)))
                     for p in draw(st.lists(st.sampled_from(["pa", "pb", "pz"]), unique=True)))  # fmt: skip
    return SchedulerView(draw(st.sampled_from([0.0, 61.0, 72.5, 500.0])), waiting, running,
                         draw(st.integers(0, 40)), 4, draw(st.integers(1, 12)), programs=programs)  # fmt: skip


POLICIES = {**REGISTRY, "dynasor_history": DynasorPolicy}


@pytest.fixture(params=[0, flashtts_prefix.SMALL], ids=["numpy-prefix-order", "plain-prefix-order"])
def prefix_small(request, monkeypatch):
    monkeypatch.setattr(flashtts_prefix, "SMALL", request.param)


@settings(
    max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture]
)  # fixture: a constant
@given(views(), st.sampled_from([1, 2, 8]), st.lists(st.sampled_from(["pa", "pb", "pc", None]), max_size=4))
def test_every_policy_decides_the_same_with_host_columns(prefix_small, view, width, churn):
    hosted = _with_columns(view, width, churn=tuple(churn))
    history = DynasorState({"pa": (2, 300), "\x00w3": (1, 5000), "pq": (4, 10)}, {})
    for name, factory in POLICIES.items():
        if name == "dynasor_history":
            got = [DynasorPolicy().step(v, history) for v in (view, hosted)]
        else:
            got = [factory().decide(v) for v in (view, hosted)]
        assert got[0] == got[1], name
    keys = [DynasorPolicy().program_keys(v, history) for v in (view, hosted)]
    assert repr(sorted(keys[0].items())) == repr(sorted(keys[1].items()))  # repr: NaN arrivals compare
    _assert_same_rankings(view, hosted)


def _assert_same_rankings(view: SchedulerView, hosted: SchedulerView) -> None:
    """What the decisions are made of, compared in full (a decision reads only its head)."""
    cached = {h for r in view.running for h in r.prefix_hashes}
    by_columns = cached_prefix_columns(hosted.waiting_columns, view.waiting, cached)
    if by_columns is not None:
        assert (
            by_columns.tolist()
            == cached_prefix_blocks([r.prefix_hashes for r in view.waiting], cached).tolist()
        )
    greedy = [list(flashtts_prefix._greedy(view.waiting, c)) for c in (None, hosted.waiting_columns)]
    assert greedy[0] == greedy[1]
    plain, hosted_programs = Programs(view.running + view.waiting), Programs.of_view(hosted)
    key = [[p.keys[c] for c in p.codes.tolist()] for p in (plain, hosted_programs)]
    assert key[0] == key[1]
    assert repr(sorted(zip(plain.keys, plain.min_arrival.tolist(), strict=True))) == repr(
        sorted(zip(hosted_programs.keys, hosted_programs.min_arrival.tolist(), strict=True))
    )


def _wait(i, arrival, program=None, hashes=(), out=0, needed=4):
    return RequestView(f"w{i}", arrival, Phase.PREFILL, 8, 0, out, blocks_needed=needed, program_id=program,
                       prefix_hashes=hashes)  # fmt: skip


def _turn(i, t, needed=4):
    """A waiting request that arrived and was queued at ``t``."""
    return RequestView(f"w{i}", t, Phase.PREFILL, 8, 0, 0, blocks_needed=needed, enqueued_s=t)


_TURNS = SchedulerView(0.0, (_turn(0, 0.0), _turn(1, 1.0)), (), 4, 4, 1)
MISALIGNED = {  # views where each column-reading policy decides differently on reversed columns
    "fcfs": (FCFSPolicy, _TURNS),
    "round_robin": (RoundRobinPolicy, _TURNS),
    "pascal": (PascalPolicy, _TURNS),
    "app_fifo": (AppFIFOPolicy, SchedulerView(0.0, (_wait(0, 0.0, "pa"), _wait(1, 1.0, "pb")), (), 4, 4, 1)),
    "dynasor_escalated": (DynasorPolicy, SchedulerView(500.0, (_wait(0, 0.0, "pa"), _wait(1, 1.0, "pb")), (), 4, 4, 1)),
    "dynasor_sjf": (DynasorPolicy, SchedulerView(
        0.0, (_wait(0, 0.0, "pa", out=10), _wait(1, 0.0, "pb", out=900)), (), 4, 4, 1)),
    "lpm": (LPMPolicy, SchedulerView(
        0.0, (_wait(0, 0.0, hashes=(9,)), _wait(1, 1.0, hashes=(1, 2))),
        (RequestView("r0", 0.0, Phase.REASONING, 8, 8, 1, num_blocks=2, prefix_hashes=(1, 2)),), 4, 4, 2)),
    "flashtts_prefix": (PrefixAwarePolicy, SchedulerView(
        0.0, (_wait(0, 0.0, hashes=(5,)), _wait(1, 1.0, hashes=(6,)), _wait(2, 2.0, hashes=(5, 7))), (), 4, 4, 1)),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(MISALIGNED))
def test_misaligned_columns_change_decisions(monkeypatch, case):
    """The equivalence above would catch a stale or misaligned column: reading the columns of
    the queue in another order changes each column-reading policy's decisions."""
    monkeypatch.setattr(flashtts_prefix, "SMALL", 0)
    factory, view = MISALIGNED[case]
    right = factory().decide(view)
    assert factory().decide(_with_columns(view, 8)) == right
    assert factory().decide(_with_columns(view, 8, misalign=True)) != right


# --- bad input -------------------------------------------------------------------------------


def test_bad_input_gets_typed_errors():
    r = _wait(0, 0.0)
    store = ColumnStore()
    store.append(r)
    with pytest.raises(InvalidArgumentError, match="already"):
        store.append(r)
    with pytest.raises(UnknownRequestError, match="w9"):
        store.remove("w9")
    with pytest.raises(InvalidTypeError, match="RequestView"):
        store.append(("w1", 0.0))
    with pytest.raises(InvalidArgumentError, match="int64"):
        store.append(r._replace(request_id="w2", num_output_tokens=2**70))
    assert len(store) == 1 and "w2" not in store
    for width in (0, -1, True, 2.0):
        with pytest.raises(InvalidArgumentError, match="prefix_width"):
            ColumnStore(prefix_width=width)
    cols = store.snapshot()[1]
    with pytest.raises(InvalidArgumentError, match="1 rows for 2 waiting"):
        SchedulerView(0.0, (r, _wait(1, 0.0)), (), 4, 4, 1, waiting_columns=cols)
    with pytest.raises(InvalidTypeError, match="QueueColumns"):
        columns_of(SchedulerView(0.0, (r,), (), 4, 4, 1, waiting_columns=[0]))
    with pytest.raises(InvalidArgumentError, match="unknown column"):
        cols.column("request_id")


def test_a_snapshot_paired_with_another_queue_is_refused():
    """Only the row count and a snapshot's first and last ids are checked (O(1)): a snapshot
    of the queue reversed, or of another queue as long, is refused; from_arrays columns carry
    no ids, so they are trusted (the misaligned cases above decide differently, silently)."""
    waiting = (_wait(0, 0.0), _wait(1, 1.0), _wait(2, 2.0))
    for queue in (waiting[::-1], (_wait(5, 0.0), *waiting[1:])):
        store = ColumnStore()
        for r in queue:
            store.append(r)
        with pytest.raises(InvalidArgumentError, match="rows run from"):
            SchedulerView(0.0, waiting, (), 4, 4, 1, waiting_columns=store.snapshot()[1])
    assert QueueColumns.from_arrays(**_arrays(3)).ends is None
    SchedulerView(0.0, waiting, (), 4, 4, 1, waiting_columns=QueueColumns.from_arrays(**_arrays(3)))


def _arrays(n=2, **change):
    args = {"columns": {name: np.zeros(n, dtype) for name, dtype in NUMERIC.items()},
            "program_codes": np.arange(n), "program_keys": [f"p{i}" for i in range(n)],
            "prefix_lens": np.zeros(n, np.intp), "prefix_heads": np.zeros((n, 3), np.int64)}  # fmt: skip
    args.update(change)
    return args


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"prefix_lens": np.zeros(3, np.intp)}, InvalidArgumentError, "prefix_lens must have shape"),
        ({"program_codes": np.array([0, 2])}, InvalidArgumentError, "index program_keys"),
        ({"program_keys": ["p0", "p0"]}, InvalidArgumentError, "distinct"),
        ({"program_codes": np.array([0, 0])}, InvalidArgumentError, "used"),
        ({"columns": {"arrival_s": np.zeros(2)}}, InvalidTypeError, "enqueued_s must be a numpy array"),
        ({"prefix_lens": np.zeros(2, np.float64)}, InvalidTypeError, "dtype"),
        ({"prefix_heads": np.zeros(2, np.int64)}, InvalidArgumentError, "prefix_heads"),
    ],
)
def test_from_arrays_rejects_bad_columns(change, error, match):
    with pytest.raises(error, match=match):
        QueueColumns.from_arrays(**_arrays(**change))


def test_from_arrays_accepts_good_columns():
    cols = QueueColumns.from_arrays(**_arrays())
    assert len(cols) == 2 and cols.prefix_width == 3 and cols.program_keys == ["p0", "p1"]


# --- the engine's scheduler keeps its queue's columns -------------------------------------


class _Checking:
    """A policy wrapper asserting, at every step, that the host's waiting views and columns
    are the ones built fresh from its queue."""

    def __init__(self, inner, engine_ref):
        self.inner, self.engine_ref, self.name, self.steps = inner, engine_ref, "checking", 0

    def decide(self, view):
        sched = self.engine_ref[0].scheduler
        fresh = tuple(map(sched.waiting_view, sched.waiting))
        assert view.waiting == fresh and view.waiting_columns is not None
        assert_same_columns(view.waiting_columns, QueueColumns.from_requests(fresh))
        self.steps += 1
        return self.inner.decide(view)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from reasonserve.engine import Engine, make_tiny_checkpoint

    return Engine.from_pretrained(make_tiny_checkpoint(tmp_path_factory.mktemp("cols"))).model


@pytest.mark.parametrize(
    ("policy", "preemption"), [("fcfs", "swap"), ("dynasor", "swap"), ("lpm", "swap"), ("fcfs", "recompute")]
)
def test_engine_scheduler_keeps_its_queue_columns(model, policy, preemption):
    """A waiting request's view, built once on enqueue, equals the one built fresh at every
    step (recompute preemption resets num_computed_tokens; swap keeps it and sets swapped)."""
    from reasonserve.engine import Engine, EngineConfig, SamplingParams

    ref = []
    checking = _Checking(REGISTRY[policy](), ref)
    eng = Engine(model, EngineConfig(num_blocks=12, block_size=4, max_num_seqs=3, preemption=preemption),
                 policy=checking)  # fmt: skip
    ref.append(eng)
    rng = random.Random(0)
    ids = [eng.add_request([rng.randrange(1, 50) for _ in range(rng.randrange(3, 14))],
                           SamplingParams(max_tokens=rng.randrange(4, 20), temperature=0.0),
                           program_id=f"p{i % 3}" if i % 2 else None) for i in range(14)]  # fmt: skip
    aborted = 0
    for step in range(400):
        if not eng.has_unfinished():
            break
        eng.step()
        if step in (2, 5, 9):  # abort a waiting one and a running one
            for queue in (eng.waiting, eng.running):
                if queue:
                    eng.abort(queue[-1].request_id)
                    aborted += 1
    assert not eng.has_unfinished() and aborted >= 4 and checking.steps > 10
    assert eng.scheduler.num_preemptions > 0  # the run preempted (and re-queued) requests
    assert len(eng.scheduler.queue) == 0 and len(ids) == 14


def test_nan_arrivals_tie_so_program_codes_do_not_order_programs():
    """Two programs with NaN arrivals tie (NaN sorts last; ties by key): the order of the
    store's program codes (reused after a removal) must not pick which goes first."""
    nan = float("nan")
    waiting = (_wait(0, nan, "pb", needed=1), _wait(1, nan, "pa", needed=1))
    view = SchedulerView(0.0, waiting, (), 4, 4, 1)
    store = ColumnStore()
    for r in (_wait(9, 0.0, "pa"), *waiting):
        store.append(r)
    store.remove("w9")  # codes: pa 0, pb 1; read off the objects: pb 0, pa 1
    hosted = dataclasses.replace(view, waiting_columns=store.snapshot()[1])
    for factory in (AppFIFOPolicy, DynasorPolicy):
        assert factory().decide(view) == factory().decide(hosted) == [Admit("w1")]


# --- FCFS, round-robin and PASCAL order the waiting queue from the host's columns --------------

TURNS = [0.0, 1.0, 2.5, 70.0, float("inf"), -float("inf")]  # few values: ties, broken by id
PHASES = [Phase.PREFILL, Phase.REASONING, Phase.ANSWERING]


@st.composite
def turn_views(draw) -> SchedulerView:
    """Views whose waiting queues are long enough for the numpy sorts (and short ones),
    request ids out of queue order (ties by id are not queue order), NaN keys sometimes,
    every PASCAL queue and demotion case (threshold 60 below)."""
    times = st.sampled_from(TURNS + ([float("nan")] if draw(st.integers(0, 3)) == 0 else []))
    n_wait, n_run = draw(st.integers(0, 70)), draw(st.integers(0, 8))

    def req(rid: str, running: bool) -> RequestView:
        return RequestView(
            rid, draw(times), draw(st.sampled_from(PHASES)), draw(st.integers(1, 64)), 0, draw(st.integers(0, 80)),
            num_blocks=draw(st.integers(1, 6)) if running else 0,
            blocks_needed=draw(st.integers(0, 2)) if running else draw(st.integers(1, 8)),
            enqueued_s=draw(times), quantum_used=draw(st.integers(0, 30)) if running else 0,
            num_answer_tokens=draw(st.none() | st.integers(0, 40)), paced_until_s=draw(st.none() | times),
        )  # fmt: skip

    ids = draw(st.permutations(range(n_wait)))
    waiting = tuple(req(f"w{i:03d}", False) for i in ids)
    running = tuple(req(f"r{i}", True) for i in range(n_run))
    return SchedulerView(draw(st.sampled_from([0.0, 80.0])), waiting, running, draw(st.integers(0, 60)), 4,
                         draw(st.integers(1, 24)))  # fmt: skip


TURN_POLICIES = {
    "fcfs": FCFSPolicy,
    "round_robin": lambda: RoundRobinPolicy(quantum=10),
    "pascal": lambda: PascalPolicy(quantum=10, demote_threshold_tokens=60),
    "pascal_default": PascalPolicy,
    "pascal_starving_first": lambda: PascalPolicy(quantum=10, demote_threshold_tokens=60,
                                                  starving_first=TokenPacer(tpot_s=0.5)),
}  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(turn_views(), st.sampled_from([1, 8]))
def test_fcfs_rr_pascal_decide_the_same_with_host_columns(view, width):
    hosted = _with_columns(view, width)
    for name, factory in TURN_POLICIES.items():
        assert factory().decide(view) == factory().decide(hosted), name
    for field in ("arrival_s", "enqueued_s"):  # the whole order, not only the head a decision reads
        assert list(_order.waiting_ordered(hosted, field)) == _order.ordered(view.waiting, field)
    for factory in (PascalPolicy, TURN_POLICIES["pascal"]):
        plain, by_columns = factory()._waiting_by_queue(view), factory()._waiting_by_queue(hosted)
        assert [list(q) for q in plain] == [list(q) for q in by_columns]


@pytest.mark.parametrize(
    ("keys", "taken"),
    [([0.0, 1.0, 2.0], "in order"), ([2.0, 0.0, 1.0], "argsort"), ([1.0, 0.0, 1.0], "ties"),
     ([1.0, float("nan"), 0.0], None), ([-float("inf"), float("inf"), 0.0], "argsort")],
)  # fmt: skip
def test_column_order_branches_equal_ordered(monkeypatch, keys, taken):
    """Each branch of column_order gives ordered()'s order; the ids are read only on ties;
    a NaN key leaves the order to the objects (None)."""
    reqs = tuple(_turn(i, t)._replace(request_id=f"w{9 - i}") for i, t in enumerate(keys))
    read = []
    monkeypatch.setattr(_order, "lex_order", lambda k, ids: read.append(1) or _LEX_ORDER(k, ids))
    order = _order.column_order(np.array(keys), reqs)
    if taken is None:
        assert order is None
        return
    assert [reqs[i] for i in order.tolist()] == _order.ordered(reqs, "arrival_s")
    assert bool(read) == (taken == "ties")


_LEX_ORDER = _order.lex_order


def _spy_object_sorts(monkeypatch) -> list:
    """Record the queues sorted from the objects (ordered(), as FCFS, round-robin and PASCAL
    take it)."""
    sorted_queues = []
    for module, name in ((_order, "ordered"), (pascal.policy, "ordered")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda q, *a, _real=real: sorted_queues.append(q) or _real(q, *a))
    return sorted_queues


@pytest.mark.parametrize("nan", [False, True])
@pytest.mark.parametrize("name", sorted(TURN_POLICIES))
def test_the_column_branch_is_taken_unless_a_key_is_nan(monkeypatch, name, nan):
    """With the host's columns the waiting queue (shuffled, 60 requests) is never sorted
    from the objects; with a NaN time it is (the objects' sort is the definition there)."""
    waiting = [_turn(i, float(i % 25), needed=1 + i % 3) for i in range(60)]
    random.Random(1).shuffle(waiting)
    if nan:
        waiting[7] = waiting[7]._replace(arrival_s=float("nan"), enqueued_s=float("nan"))
    running = (
        RequestView("r0", 3.0, Phase.ANSWERING, 8, 8, 70, num_blocks=2, enqueued_s=3.0, quantum_used=20),
    )
    view = SchedulerView(0.0, tuple(waiting), running, 9, 4, 6)
    hosted = _with_columns(view, 8)
    expected = TURN_POLICIES[name]().decide(view)
    sorted_queues = _spy_object_sorts(monkeypatch)
    assert TURN_POLICIES[name]().decide(hosted) == expected
    assert any(q is hosted.waiting for q in sorted_queues) == nan


@pytest.mark.parametrize(
    ("policy", "change"),
    [(PascalPolicy(demote_threshold_tokens=2**64), {}), (PascalPolicy(demote_threshold_tokens=60), {"num_output_tokens": -5})],
    ids=["threshold-beyond-int64", "negative-tokens"],
)  # fmt: skip
def test_pascal_demotes_on_the_columns_as_on_the_objects_past_int64_and_below_zero(policy, change):
    """The queue rule on the token columns (int64) and on the objects (Python ints) agree
    with a threshold beyond int64 and with negative token counts."""
    waiting = tuple(_turn(i, float(5 - i))._replace(**change) for i in range(6))
    view = SchedulerView(0.0, waiting, (), 8, 4, 2)
    hosted = _with_columns(view, 8)
    assert policy.decide(hosted) == policy.decide(view)
    plain, by_columns = policy._waiting_by_queue(view), policy._waiting_by_queue(hosted)
    assert [list(q) for q in plain] == [list(q) for q in by_columns]


# --- FlashTTS prefix order: host paths all of one length --------------------------------------


def _spy_rank_sorts(monkeypatch) -> list:
    """Record the sort kind of every node ranking (None: numpy's default sort)."""
    kinds, real = [], flashtts_prefix._int_ranks
    monkeypatch.setattr(flashtts_prefix, "_int_ranks", lambda f, o, kind=None: kinds.append(kind) or real(f, o, kind))
    return kinds


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.integers(1, 4).flatmap(lambda w: st.lists(st.tuples(
        st.sampled_from([0.0, 1.0, 2.0]),
        st.lists(st.one_of(st.integers(0, 5), st.sampled_from([-(2**63), 2**63 - 1])), min_size=w, max_size=w)
        .map(tuple)), min_size=1, max_size=30)),
    st.booleans(),
)  # fmt: skip
def test_one_length_host_paths_rank_by_column_or_by_path_as_the_plain_order(monkeypatch, rows, grow):
    """Host paths all as long: ranked column after column by the stable sort (few runs) or
    path after path by the default sort (many runs); each branch forced by RUNS and shown
    taken, both equal to the plain definition (the objects' order below SMALL)."""
    if grow:  # node ids growing with arrival in each column: few runs, as a tree's ids
        rows = [(t, tuple(k * 100 + 10 * j + h % 7 for j, h in enumerate(p))) for k, (t, p) in enumerate(rows)]
    view = SchedulerView(0.0, tuple(_wait(i, t, hashes=p) for i, (t, p) in enumerate(rows)), (), 40, 4, 8)
    expected = list(flashtts_prefix._greedy(view.waiting))  # n <= SMALL: the plain definition
    hosted = _with_columns(view, 4)
    monkeypatch.setattr(flashtts_prefix, "SMALL", 0)
    kinds = _spy_rank_sorts(monkeypatch)
    for runs, kind in ((10**9, "stable"), (0, None)):
        monkeypatch.setattr(flashtts_prefix, "RUNS", runs)
        kinds.clear()
        assert list(flashtts_prefix._greedy(hosted.waiting, hosted.waiting_columns)) == expected
        assert kinds == [kind]
    monkeypatch.setattr(flashtts_prefix, "RUNS", 64)
    assert PrefixAwarePolicy().decide(hosted) == PrefixAwarePolicy().decide(view)


@pytest.mark.parametrize(("hashes", "kind"), [
    (lambda i: (1, 2 + i // 64, 10_000 + i // 4), "stable"),  # the FlashTTS benchmark's beams: 3 runs
    (lambda i: (i % 7, i % 13), None),  # the generic benchmark's: a run per 7 or 13 rows
    (lambda i: (), "no sort"),  # no nodes at all: arrival order, nothing ranked
])  # fmt: skip
def test_one_length_host_paths_pick_the_sort_by_their_runs(monkeypatch, hashes, kind):
    """With the default RUNS, past SMALL: the branch each queue takes, and the plain order."""
    view = SchedulerView(0.0, tuple(_wait(i, float(i % 97), hashes=hashes(i)) for i in range(600)), (), 40, 4, 8)
    assert len(view.waiting) > flashtts_prefix.SMALL
    taken = sorted(range(600), key=lambda i: (view.waiting[i].arrival_s, view.waiting[i].request_id))
    expected = flashtts_prefix._plain_order([r.prefix_hashes for r in view.waiting], taken)
    hosted = _with_columns(view, 8)
    kinds = _spy_rank_sorts(monkeypatch)
    assert list(flashtts_prefix._greedy(hosted.waiting, hosted.waiting_columns)) == expected
    assert kinds == ([] if kind == "no sort" else [kind])
    assert PrefixAwarePolicy().decide(hosted) == PrefixAwarePolicy().decide(view)


@settings(max_examples=200, deadline=None)
@given(turn_views())
def test_pascal_column_walks_agree_with_the_object_walks(view):
    """Both queues, in full, and the decisions are those of the object path."""
    hosted = _with_columns(view, 8)
    for factory in (PascalPolicy, TURN_POLICIES["pascal"], TURN_POLICIES["pascal_starving_first"]):
        assert factory().decide(view) == factory().decide(hosted)
        plain, by_columns = factory()._waiting_by_queue(view), factory()._waiting_by_queue(hosted)
        assert [list(q) for q in plain] == [list(q) for q in by_columns]


@pytest.mark.parametrize("first", [Phase.PREFILL, Phase.ANSWERING])
def test_pascal_finds_its_queue_behind_300_of_the_other(first):
    """300 waiting requests of one queue that cannot fit, then 4 of the other queue that do:
    PASCAL's walk of their queue reaches them, and admits them."""
    other = Phase.ANSWERING if first is Phase.PREFILL else Phase.PREFILL
    big = [RequestView(f"a{i:03d}", float(i), first, 8, 0, 0, blocks_needed=50, enqueued_s=float(i))
           for i in range(300)]  # fmt: skip
    small = [RequestView(f"b{i}", 300.0 + i, other, 8, 0, 0, blocks_needed=2, enqueued_s=300.0 + i)
             for i in range(4)]  # fmt: skip
    view = SchedulerView(0.0, tuple(big + small), (), 20, 16, 64)
    hosted = _with_columns(view, 8)
    decisions = PascalPolicy().decide(hosted)
    assert decisions == PascalPolicy().decide(view)
    assert [d.request_id for d in decisions] == [r.request_id for r in small]
