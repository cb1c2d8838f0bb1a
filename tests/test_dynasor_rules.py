"""Dynasor's inter-program scheduler (Fu et al. §4, SPEC §2.3), worked by hand: a program's
remaining work is ``sum over its live requests of max(1, mean - generated)`` plus its
remaining knob times the mean, the mean being its own finished requests' (else everyone's,
else the prior); a program waiting longer than the starvation bound is escalated."""

from reasonserve.core.decisions import Admit
from reasonserve.core.phase import Phase
from reasonserve.core.views import ProgramView, RequestView, SchedulerView
from reasonserve.policies import DynasorPolicy
from reasonserve.policies.dynasor import DynasorState


def _req(rid, program, generated, arrival=0.0):
    return RequestView(rid, arrival, Phase.REASONING, 10, 10 + generated, generated, program_id=program)


def _view(running, now=0.0, programs=()):
    return SchedulerView(now, (), tuple(running), 100, 16, 8, programs=tuple(programs))


HISTORY = DynasorState(history={"p": (2, 300), "q": (1, 900)})


def test_the_mean_is_the_programs_own_else_everyones_else_the_prior():
    assert HISTORY.mean_tokens("p", 1024.0) == 150.0
    assert HISTORY.mean_tokens("new", 1024.0) == (300 + 900) / 3  # per finished request, not per program
    assert DynasorState().mean_tokens("p", 1024.0) == 1024.0


def test_remaining_work_counts_at_least_one_token_per_live_request():
    view = _view([_req("a", "p", 100), _req("b", "p", 200), _req("c", "new", 0)])
    keys = DynasorPolicy().program_keys(view, HISTORY)
    assert keys["p"] == (1, (150 - 100) + 1, 0.0, "p")  # b is past the mean: still 1 token to go
    assert keys["new"] == (1, 400.0, 0.0, "new")
    assert DynasorPolicy().program_keys(view, DynasorState())["new"] == (1, 1024.0, 0.0, "new")  # the prior


def test_a_reported_program_adds_its_remaining_knob_times_the_mean():
    running = [_req("a", "p", 100), _req("b", "p", 200)]
    live = ProgramView("p", ("a", "b"), 0.0, knob=1, max_knob=5)  # 5 - 1 - 2 live = 2 units not issued
    keys = DynasorPolicy().program_keys(_view(running, programs=[live]), HISTORY)
    assert keys["p"] == (1, 51 + 2 * 150.0, 0.0, "p")
    done = ProgramView("p", ("a", "b"), 0.0, knob=1, max_knob=5, done=True)
    assert DynasorPolicy().program_keys(_view(running, programs=[done]), HISTORY)["p"] == (1, 51.0, 0.0, "p")


def test_a_program_is_escalated_once_it_waited_longer_than_the_bound():
    running = [_req("a", "p", 0, arrival=0.0), _req("b", "q", 0, arrival=5.0)]
    at_bound = DynasorPolicy().program_keys(_view(running, now=60.0), HISTORY)  # default bound 60 s
    assert at_bound["p"][0] == 1
    past = DynasorPolicy().program_keys(_view(running, now=60.5), HISTORY)
    assert past["p"] == (0, 0.0, "p") and past["q"][0] == 1


def test_finished_requests_enter_their_programs_history():
    policy = DynasorPolicy()
    _, state = policy.step(_view([_req("a", "p", 30), _req("b", "p", 70), _req("c", "q", 5)]), DynasorState())
    preempted = RequestView("b", 0.0, Phase.REASONING, 10, 0, 70, program_id="p")
    view = SchedulerView(1.0, (preempted,), (_req("c", "q", 6),), 100, 16, 8)
    _, state = policy.step(view, state)  # a finished (30 tokens); b only went back to the queue
    assert state.history == {"p": (1, 30)}


def test_an_escalated_program_is_admitted_ahead_of_a_shorter_one():
    """One free slot, p long (mean 900 tokens) and q short (mean 100): shortest-job-first
    admits q, until p has waited past the bound (60 s) and is escalated ahead of it."""
    state = DynasorState(history={"p": (1, 900), "q": (1, 100)})
    waiting = (RequestView("a", 0.0, Phase.REASONING, 10, 0, 0, program_id="p"),
               RequestView("b", 5.0, Phase.REASONING, 10, 0, 0, program_id="q"))  # fmt: skip
    for now, first in ((10.0, "b"), (60.5, "a")):
        decisions, _ = DynasorPolicy().step(SchedulerView(now, waiting, (), 100, 16, 1), state)
        assert decisions == [Admit(first)]
