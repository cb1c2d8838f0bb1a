"""Scheduling policies: pure, repeatable, id-agnostic, within capacity, never lose a request."""

from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.core import Phase
from reasonserve.policies import REGISTRY, Admit, FCFSPolicy, Preempt, RequestView, SchedulerView


def _requests(ids, phase, running):
    return st.lists(
        st.builds(
            RequestView,
            request_id=st.sampled_from(ids),
            arrival_s=st.floats(0, 100),
            phase=st.just(phase),
            num_prompt_tokens=st.integers(1, 64),
            num_computed_tokens=st.integers(0, 80),
            num_output_tokens=st.integers(0, 16),
            num_blocks=st.integers(1, 6) if running else st.just(0),
            blocks_needed=st.integers(0, 1) if running else st.integers(1, 8),
            enqueued_s=st.floats(0, 100),
            quantum_used=st.integers(0, 200) if running else st.just(0),
        ),
        max_size=8,
        unique_by=lambda r: r.request_id,
    )


VIEWS = st.builds(
    SchedulerView,
    now_s=st.floats(0, 200),
    waiting=_requests([f"w{i}" for i in range(10)], Phase.PREFILL, False).map(tuple),
    running=_requests([f"r{i}" for i in range(10)], Phase.REASONING, True).map(tuple),
    free_blocks=st.integers(0, 20),
    block_size=st.sampled_from([1, 4, 16]),
    max_num_seqs=st.integers(8, 16),
)


def _split(decisions):
    admitted = [d.request_id for d in decisions if isinstance(d, Admit)]
    preempted = [d.request_id for d in decisions if isinstance(d, Preempt)]
    return admitted, preempted


@settings(max_examples=200)
@given(VIEWS)
def test_policies_are_pure_and_stay_within_capacity(view):
    for factory in REGISTRY.values():
        policy = factory()
        first = list(policy.decide(view))
        assert list(policy.decide(view)) == first  # same view, same decisions; view is frozen
        admitted, preempted = _split(first)
        assert set(admitted) <= {r.request_id for r in view.waiting} and len(set(admitted)) == len(admitted)
        assert set(preempted) <= {r.request_id for r in view.running} and len(set(preempted)) == len(
            preempted
        )
        by_id = {r.request_id: r for r in view.waiting + view.running}
        staying = [r for r in view.running if r.request_id not in preempted]
        need = sum(by_id[i].blocks_needed for i in admitted) + sum(r.blocks_needed for r in staying)
        room = view.free_blocks + sum(by_id[i].num_blocks for i in preempted)
        assert need <= room or not admitted  # admissions never overcommit the KV cache
        assert len(staying) + len(admitted) <= max(view.max_num_seqs, len(staying))


@settings(max_examples=200)
@given(VIEWS)
def test_fcfs_admits_an_arrival_ordered_prefix_and_preempts_the_newest(view):
    admitted, preempted = _split(FCFSPolicy().decide(view))
    order = [r.request_id for r in sorted(view.waiting, key=lambda r: (r.arrival_s, r.request_id))]
    assert admitted == order[: len(admitted)]
    newest = [r.request_id for r in sorted(view.running, key=lambda r: (r.arrival_s, r.request_id))][::-1]
    assert preempted == newest[: len(preempted)]
    if sum(r.blocks_needed for r in view.running) <= view.free_blocks:
        assert not preempted  # nobody is preempted while the batch's growth fits


@settings(max_examples=100)
@given(VIEWS)
def test_relabelling_ids_does_not_change_decisions(view):
    """Order-preserving relabelling (ties are broken by id, so the order must be kept)."""
    ordered = sorted(view.waiting + view.running, key=lambda r: r.request_id)
    mapping = {r.request_id: f"x{i:02d}" for i, r in enumerate(ordered)}

    def relabel(rs):
        fields = RequestView._fields[1:]
        return tuple(RequestView(mapping[r.request_id], *[getattr(r, f) for f in fields]) for r in rs)

    renamed = SchedulerView(
        view.now_s, relabel(view.waiting), relabel(view.running), view.free_blocks, view.block_size,
        view.max_num_seqs,
    )  # fmt: skip
    def named(decisions, name=lambda rid: rid):  # Order names several requests
        return [(type(d), tuple(map(name, d.request_ids)) if hasattr(d, "request_ids") else name(d.request_id))
                for d in decisions]  # fmt: skip

    for factory in REGISTRY.values():
        assert named(factory().decide(view), mapping.__getitem__) == named(factory().decide(renamed))
