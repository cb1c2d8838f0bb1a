"""FlashTTS's roofline KV allocator (§4.3) worked by hand on stages whose step time has one
roof: compute-bound (a batch of ``b`` costs ``b * c`` a step, so every batch that divides
``N`` takes the same time) or memory-bound (a step costs about the same at any batch, so
fewer waves ``ceil(N / B)`` win). The planner evaluates only ``B = ceil(N / q)``, keeps the
fastest batch within a budget (ties: the larger), and searches ``B_pre`` ascending, an equal
total keeping the larger ``B_dec`` (the paper's tie rule)."""

import math

from reasonserve.cost.hardware import HardwareSpec
from reasonserve.policies.flashtts.kv import KVPlan, RooflineKVAllocator, _Stage
from reasonserve.sim import RooflineCostModel
from reasonserve.sim.beam.models import BEAM_MODELS

_ONE_TOKEN = (((1.0, 0.0), 1),)  # a wave: one step of one token per sequence, no context


def _stage(n: int, *, compute_bound: bool) -> _Stage:
    flops, bandwidth = (1e12, math.inf) if compute_bound else (math.inf, 1e12)
    hw = HardwareSpec("one-roof", flops, bandwidth, 1e9, 1e9)
    cost = RooflineCostModel(hw, next(iter(BEAM_MODELS.values())), step_overhead_s=0.0)
    return _Stage(cost, n, _ONE_TOKEN, _ONE_TOKEN)


def test_every_wave_count_has_its_smallest_batch():
    """N = 7: ceil(7 / q) for q = 1..7 is 7, 4, 3, 2, 2, 2, 1; batch 4 is the smallest that
    runs in two waves, so memory-bound with room for 6 it is the pick (three waves of 3 lose)."""
    stage = _stage(7, compute_bound=False)
    assert stage.batches == [1, 2, 3, 4, 7]
    assert stage.best_within(6)[0] == 4 and stage.best_within(3)[0] == 3


def test_an_equal_time_goes_to_the_larger_batch():
    """Compute-bound N = 4: batches 1, 2 and 4 all take 4c (batch 3 takes 2 waves of 3c)."""
    stage = _stage(4, compute_bound=True)
    t = stage.time[1]
    assert stage.time[2] == stage.time[4] == t < stage.time[3]
    assert stage.best_within(1) == (1, t)
    assert stage.best_within(2) == stage.best_within(3) == (2, t)
    assert stage.best_within(4) == (4, t)


def test_an_equal_total_keeps_the_larger_decode_batch():
    """M = 6, one unit of KV per sequence of either model, both stages compute-bound N = 4
    (every batch but 3 takes t). B_pre = 1, 2 and 4 leave room for B_dec 4, 4 and 2, all
    totals 2t: the first, B_pre = 1 with B_dec = 4, is the plan."""
    pre, dec = _stage(4, compute_bound=True), _stage(4, compute_bound=True)
    t = pre.time[1]
    plan = RooflineKVAllocator._shared(pre, dec, 6.0, 1.0, 1.0)
    assert plan == KVPlan(False, 1, 4, 1.0, 5.0, 2 * t, 2 * t, math.inf)
