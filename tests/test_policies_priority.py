"""PriorityPolicy's ranking on hand-built views: priority, then arrival, then id.

Ids are chosen so that id order, arrival order and the order the view lists requests in
all differ: a ranking that skips arrival, or that keeps the view's order, decides
differently.
"""

from reasonserve.core import Phase
from reasonserve.policies import Admit, Preempt, RequestView, SchedulerView
from reasonserve.policies.priority import PriorityPolicy


def _req(rid: str, arrival: float, priority: int, *, running: bool) -> RequestView:
    phase = Phase.REASONING if running else Phase.PREFILL
    blocks = dict(num_blocks=2, blocks_needed=1) if running else dict(num_blocks=0, blocks_needed=2)
    return RequestView(rid, arrival, phase, 8, 8 if running else 0, 0, priority=priority, **blocks)


def _view(waiting=(), running=(), free_blocks=0, seats=8) -> SchedulerView:
    return SchedulerView(0.0, tuple(waiting), tuple(running), free_blocks, 4, seats)


def test_waiting_requests_are_admitted_by_priority_then_arrival():
    waiting = [_req("a", 3.0, 0, running=False), _req("b", 1.0, 0, running=False),
               _req("c", 2.0, 5, running=False), _req("d", 0.5, -1, running=False)]  # fmt: skip
    decisions = PriorityPolicy().decide(_view(waiting, free_blocks=6))
    assert decisions == [Admit("c"), Admit("b"), Admit("a")]  # 3 x 2 blocks; "d" does not fit


def test_the_least_urgent_then_latest_running_request_is_preempted():
    running = [_req("a", 5.0, 0, running=True), _req("z", 1.0, 0, running=True),
               _req("m", 3.0, 0, running=True), _req("u", 9.0, 2, running=True)]  # fmt: skip
    # 4 x 2 blocks held + 4 x 1 needed = 12 > 10: one must go
    decisions = PriorityPolicy().decide(_view(running=running, free_blocks=2))
    assert decisions == [Preempt("a")]  # priority 0, the latest of the three (not "z" by id)


def test_a_more_urgent_arrival_waits_for_a_seat():
    running = [_req("r", 1.0, 0, running=True)]
    waiting = [_req("w", 2.0, 100, running=False)]
    assert PriorityPolicy().decide(_view(waiting, running, free_blocks=10, seats=1)) == []
    assert PriorityPolicy().decide(_view(waiting, running, free_blocks=10, seats=2)) == [Admit("w")]
