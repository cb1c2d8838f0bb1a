"""An instance's :class:`SchedulerView` (:meth:`SimInstance.view`, built from its fields by
their slot setters, without the dataclass constructor) is the view the constructor builds,
field for field, at every step of a run with requests waiting and running."""

import dataclasses

from reasonserve.core.views import SchedulerView
from reasonserve.policies.pascal import PascalPolicy
from reasonserve.sim import SimConfig, SimRequest
from reasonserve.sim.instance import SimInstance

CFG = SimConfig(num_instances=1, kv_capacity_tokens=256, block_size=4, model="qwen2.5-7b", skip_quiet_steps=False)


def _constructed(view: SchedulerView) -> SchedulerView:
    return SchedulerView(**{f.name: getattr(view, f.name) for f in dataclasses.fields(SchedulerView)})


def test_the_view_equals_the_constructed_view_at_every_step():
    inst = SimInstance("i7", CFG, CFG.cost_model(), PascalPolicy(quantum=5, demote_threshold_tokens=40))
    for i in range(6):
        inst.add(SimRequest(f"r{i}", 0.1 * i, 30 + 7 * i, 5 + i, 12), 0.1 * i)
    now, seen = 1.0, set()
    while inst.has_work:
        view = inst.view(now)
        assert type(view) is SchedulerView
        assert view == _constructed(view)  # an unset field would raise here, a misplaced one differ
        expected = (now, inst.steps, inst.free_blocks, inst.total_blocks, "i7", (), None)
        got = (view.now_s, view.step, view.free_blocks, view.total_blocks, view.instance_id, view.programs,
               view.waiting_columns)  # fmt: skip
        assert got == expected
        assert (view.block_size, view.max_num_seqs, view.max_num_batched_tokens) == (
            CFG.block_size, CFG.max_num_seqs, CFG.max_num_batched_tokens)  # fmt: skip
        assert [r.request_id for r in view.running] == [s.req.request_id for s in inst.running]
        assert [r.request_id for r in view.waiting] == [s.req.request_id for s in inst.waiting]
        seen.add((bool(view.waiting), bool(view.running)))
        now = inst.step(now) or now
        inst.finish_run(now)
    assert (True, True) in seen  # requests waited while others ran
