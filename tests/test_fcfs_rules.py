"""FCFS as vLLM does it, worked by hand: when the running batch's growth does not fit,
preempt the newest arrival first, each preemption freeing its held blocks and dropping its
growth, until the rest fits; admit nothing in a step that preempted."""

from reasonserve.core.decisions import Admit, Preempt
from reasonserve.core.phase import Phase
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies import FCFSPolicy


def _req(rid, arrival, held, needed):
    return RequestView(rid, arrival, Phase.REASONING, 10, 10, 0, num_blocks=held, blocks_needed=needed)


def test_the_newest_arrival_yields_until_the_growth_fits():
    running = (_req("a", 0.0, 4, 2), _req("b", 1.0, 3, 2))
    waiting = (_req("w", 2.0, 0, 1),)
    # growth 4 > 0 free: b yields (3 blocks freed, 2 less growth): 2 <= 3, a stays
    assert FCFSPolicy().decide(SchedulerView(0.0, waiting, running, 0, 16, 8)) == [Preempt("b")]
    # growth 4 > 1 free: b yields: 2 <= 4; nothing admitted in that step
    assert FCFSPolicy().decide(SchedulerView(0.0, waiting, running, 1, 16, 8)) == [Preempt("b")]
    # growth fits: admit by arrival with what is left (5 - 4 = 1 block)
    assert FCFSPolicy().decide(SchedulerView(0.0, waiting, running, 5, 16, 8)) == [Admit("w")]
