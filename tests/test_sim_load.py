"""An instance's PASCAL load (:meth:`SimInstance.load`): ``a_i`` of Algorithm 2 counts the
answering requests that have not exhausted their FIRST quantum (PASCAL §IV-B: fewer answer
tokens than ``SimConfig.quantum_tokens``), whether they are running or waiting, not the
ones "not yet run since (re-)admission"."""


import pytest

from reasonserve.core.decisions import Stop
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.policies import FCFSPolicy
from reasonserve.policies.pacer import TokenPacer
from reasonserve.policies.pascal import PascalPolicy
from reasonserve.policies.router import PascalRouter
from reasonserve.sim import SimConfig, SimRequest, simulate
from reasonserve.sim.cluster.instance import SimInstance

CFG = SimConfig(num_instances=1, kv_capacity_tokens=1024, model="qwen2.5-7b", quantum_tokens=4,
                skip_quiet_steps=False)  # fmt: skip


def _instance() -> SimInstance:
    return SimInstance("0", CFG, CFG.cost_model(), FCFSPolicy())


def _step_through(inst: SimInstance) -> list[tuple[int, int]]:
    """(answer tokens, a_i) after each step until the request finishes."""
    pacer, now, seen = TokenPacer(CFG.tpot_slo_s), 0.0, []
    while inst.has_work:
        now = inst.step(now) or now
        inst.finish_run(now)  # the step's token is out
        [s] = inst.running or inst.waiting or [None]
        if s is not None and s.num_output >= s.req.reasoning_tokens:
            seen.append((s.num_output - s.req.reasoning_tokens, inst.load(now, pacer).num_fresh_answering))
    return seen


def test_a_running_answering_request_is_fresh_until_its_first_quantum_is_used():
    inst = _instance()
    inst.add(SimRequest("r", 0.0, 8, 3, 9), 0.0)
    seen = _step_through(inst)
    assert [n for n, _ in seen] == list(range(0, 9))  # every answer count, running all along
    assert seen == [(n, int(n < 4)) for n in range(0, 9)]  # fresh for answer tokens 0..3


def test_a_preempted_request_past_its_first_quantum_is_not_fresh_and_one_within_it_is():
    inst = _instance()
    inst.add(SimRequest("r", 0.0, 8, 3, 20), 0.0)
    pacer, now = TokenPacer(CFG.tpot_slo_s), 0.0
    for expected in (5, 2):  # answer tokens when preempted: past, then (a new request) within
        while not inst.running or inst.running[0].num_output - 3 < expected:
            now = inst.step(now) or now
            inst.finish_run(now)
        s = inst.running[0]
        inst._preempt(s, "swap", now)
        assert s.status == "waiting" and s.num_output - 3 == expected
        assert inst.load(now, pacer).num_fresh_answering == int(expected < 4)
        inst._finish(s, "stop", now)
        inst.add(SimRequest(f"r{expected}", now, 8, 3, 20), now)


def test_the_quantum_is_validated():
    with pytest.raises(InvalidArgumentError, match="quantum_tokens"):
        SimConfig(quantum_tokens=0)


def test_the_waiting_queue_caches_follow_the_queue(monkeypatch):
    """An instance keeps its waiting views and the waiting share of its load while the
    queue holds; every arrival, admission, preemption, landing and stop must drop them.
    Checked before every step of a run with all of those (a stale cache would be used the
    same way stepped and exact, so the quiet-stretch comparisons could not see it)."""
    checked = []
    original = SimInstance.step

    def step(self, now_s):
        if self._waiting_tuple is not None:
            assert self._waiting_tuple == tuple(map(self.request_view, self.waiting))
        if self._waiting_load is not None:
            cached, self._waiting_load = self._waiting_load, None
            assert self.waiting_load() == cached
            checked.append(len(self.waiting))
        return original(self, now_s)

    monkeypatch.setattr(SimInstance, "step", step)

    class StopsSome(PascalPolicy):  # PASCAL, stopping each waiting request whose id ends in 7
        def decide(self, view):
            stops = [Stop(r.request_id) for r in view.waiting if r.request_id.endswith("7")]
            return stops or super().decide(view)

    reqs = [SimRequest(f"r{i:02d}", 0.05 * i, 12 + i % 5, 30 + 7 * (i % 4), 25 + 5 * (i % 3)) for i in range(40)]
    cfg = SimConfig(num_instances=2, kv_capacity_tokens=320, block_size=4, model="qwen2.5-7b", quantum_tokens=8)
    res = simulate(reqs, cfg, lambda: StopsSome(quantum=9, demote_threshold_tokens=70), PascalRouter(adaptive=False))
    assert any(not m.on_gpu for m in res.migrations) and any(s.num_preemptions for s in res.sequences)
    assert sum(s.finish_reason == "stop" for s in res.sequences) == 4
    assert len(checked) > 50 and max(checked) >= 3
