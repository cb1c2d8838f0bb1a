"""The cluster loop as a generator (``ClusterLoop.run(listen=True)``): it yields at every
report of finished requests, before the next decision, and at the wake-ups its driver
asks for; requests submitted then arrive at that time; a stop frees the request's KV.
Without a driver the run is the one :func:`simulate` makes."""

import pytest

from reasonserve.core.errors import PolicyError
from reasonserve.policies import FCFSPolicy
from reasonserve.policies.router import LeastKVRouter
from reasonserve.sim import SimConfig, SimRequest, simulate
from reasonserve.sim.cluster import ClusterLoop
from reasonserve.sim.cluster.simulator import _check_requests

CONFIG = SimConfig(num_instances=2, model="qwen2.5-7b", kv_capacity_tokens=2048, max_num_seqs=4)


def _loop(requests=()):
    loop = ClusterLoop(CONFIG, FCFSPolicy, LeastKVRouter())
    loop.pending = [(r.arrival_s, r.request_id, r) for r in _check_requests(list(requests), CONFIG)]
    return loop


def _timeline(result):
    return [(s.request_id, s.first_token_s, s.finished_s, s.num_output, s.finish_reason) for s in result.sequences]


def test_listening_run_yields_each_finish_before_the_next_decision_and_changes_nothing():
    reqs = [SimRequest(f"r{i}", 0.01 * i, 16 + i, 5 + 3 * i, 4) for i in range(8)]
    loop = _loop(reqs)
    reports = []
    for now in loop.run(listen=True, check=True):
        done = loop.take_finished()
        assert done and all(s.finished_s == now for s in done)  # told at the time they finished
        assert loop.take_finished() == []  # each finished request is reported once
        reports.append((now, [s.request_id for s in done]))
    assert sorted(r for _, ids in reports for r in ids) == sorted(r.request_id for r in reqs)
    assert [t for t, _ in reports] == sorted(t for t, _ in reports)
    assert _timeline(loop.result()) == _timeline(simulate(reqs, CONFIG, FCFSPolicy))


def test_a_program_submits_at_the_reported_time_and_stops_a_live_request():
    loop = _loop([SimRequest("a", 0.0, 16, 6, 0), SimRequest("long", 0.0, 16, 500, 0)])
    for now in loop.run(listen=True, check=True):
        for s in loop.take_finished():
            if s.request_id == "a":
                loop.submit(SimRequest("b", now, 16, 6, 0))
                assert loop.stop("long") and not loop.stop("a")  # a finished request is not live
                with pytest.raises(PolicyError):
                    loop.submit(SimRequest("b", now, 16, 6, 0))  # ids are unique in a run
                with pytest.raises(PolicyError):
                    loop.submit(SimRequest("c", now + 1.0, 16, 6, 0))  # requests arrive now
    seqs = {s.request_id: s for s in loop.result().sequences}
    a, b, long = seqs["a"], seqs["b"], seqs["long"]
    assert b.req.arrival_s == a.finished_s and b.finish_reason == "length"
    assert long.finish_reason == "stop" and long.finished_s == a.finished_s and long.num_output < 500
    assert long.num_blocks == 0 and all(inst.free_blocks == inst.total_blocks for inst in loop.instances)


def test_a_wake_up_comes_before_the_arrivals_of_its_time_and_can_cancel_one():
    loop = _loop([SimRequest("x", 0.5, 16, 4, 0), SimRequest("y", 0.5, 16, 4, 0)])
    loop.wake_at(0.5)
    loop.wake_at(0.25)
    woken = []
    for now in loop.run(listen=True):
        if not loop.take_finished():
            woken.append(now)
            if now == 0.5:
                assert loop.stop("y")  # not arrived yet: it never will
                loop.submit(SimRequest("w", 0.5, 16, 4, 0))
    assert woken == [0.25, 0.5]
    res = loop.result()
    assert [s.request_id for s in res.sequences] == ["w", "x"]
    assert all(s.req.arrival_s == 0.5 for s in res.sequences)
