"""Scheduling policies: pure, repeatable, id-agnostic, never lose a request."""

from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.core import Phase
from reasonserve.policies import REGISTRY, Admit, Preempt, RequestView, SchedulerView


def _requests(draw_ids, phase):
    return st.lists(
        st.builds(
            RequestView,
            request_id=st.sampled_from(draw_ids),
            arrival_s=st.floats(0, 100),
            phase=st.just(phase),
            num_prompt_tokens=st.integers(1, 64),
            num_computed_tokens=st.integers(0, 80),
            num_output_tokens=st.integers(0, 16),
        ),
        max_size=8,
        unique_by=lambda r: r.request_id,
    )


VIEWS = st.builds(
    SchedulerView, now_s=st.floats(0, 200), waiting=_requests([f"w{i}" for i in range(10)], Phase.PREFILL).map(tuple),
    running=_requests([f"r{i}" for i in range(10)], Phase.REASONING).map(tuple), free_blocks=st.integers(0, 20),
    block_size=st.sampled_from([1, 4, 16]), max_num_seqs=st.integers(1, 8),
)  # fmt: skip


@settings(max_examples=200)
@given(VIEWS)
def test_policies_are_pure_and_keep_every_request(view):
    for factory in REGISTRY.values():
        policy = factory()
        first = list(policy.decide(view))
        assert list(policy.decide(view)) == first  # same view, same decisions; view is frozen
        admitted = [d.request_id for d in first if isinstance(d, Admit)]
        preempted = [d.request_id for d in first if isinstance(d, Preempt)]
        assert sorted(admitted) == sorted(r.request_id for r in view.waiting)  # nobody forgotten
        assert set(preempted) <= {r.request_id for r in view.running}
        assert len(set(preempted)) == len(preempted)


@settings(max_examples=100)
@given(VIEWS)
def test_relabelling_ids_does_not_change_decisions(view):
    """Order-preserving relabelling (ties are broken by id, so the order must be kept)."""
    mapping = {r.request_id: f"x{i:02d}" for i, r in enumerate(sorted(view.waiting + view.running,
                                                                      key=lambda r: r.request_id))}  # fmt: skip

    def relabel(rs):
        return tuple(RequestView(mapping[r.request_id], *[getattr(r, f) for f in RequestView.__slots__[1:]]) for r in rs)

    renamed = SchedulerView(view.now_s, relabel(view.waiting), relabel(view.running), view.free_blocks,
                            view.block_size, view.max_num_seqs)  # fmt: skip
    for factory in REGISTRY.values():
        original = [(type(d), mapping[d.request_id]) for d in factory().decide(view)]
        assert original == [(type(d), d.request_id) for d in factory().decide(renamed)]
