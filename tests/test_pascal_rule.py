"""PASCAL's queue rule at the demotion threshold (§V-A: "reasoning requests *exceeding* 5000
tokens are demoted"), worked by hand with the paper's settings: a sequence of exactly the
threshold stays in the high queue; one token more is demoted, and its quantum in the low
queue counts only the tokens past the threshold (a prompt already past it counts from
admission)."""

import pytest

from reasonserve.core.decisions import Preempt
from reasonserve.core.phase import Phase
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies import PascalPolicy
from reasonserve.policies.pascal.rule import HIGH, LOW, in_low_queue, place

LIMIT = 5000


def _reasoning(prompt: int, output: int, used: int) -> RequestView:
    return RequestView("r", 0.0, Phase.REASONING, prompt, prompt + output, output, quantum_used=used)


@pytest.mark.parametrize(
    ("prompt", "output", "used", "placed"),
    [
        (4000, 1000, 800, (HIGH, 800)),  # exactly the threshold: not exceeding it
        (4000, 1001, 800, (LOW, 1)),  # one past: its low-queue quantum counts 1 token
        (5000, 30, 800, (LOW, 30)),  # a prompt of exactly the threshold: was high until then
        (5000, 0, 800, (HIGH, 800)),
        (5001, 30, 800, (LOW, 800)),  # a prompt past it: low from admission
        (4000, 1400, 100, (LOW, 100)),  # admitted after its demotion: counts from admission
    ],
)
def test_demotion_is_strictly_past_the_threshold(prompt, output, used, placed):
    r = _reasoning(prompt, output, used)
    assert place(r, LIMIT) == placed
    assert in_low_queue(False, prompt + output, LIMIT) == (placed[0] == LOW)
    policy = PascalPolicy()  # the paper's settings: threshold 5000, quantum 500
    assert (policy.queue(r), policy.quantum_used(r)) == placed


def test_answering_requests_count_their_answer_tokens():
    r = RequestView("a", 0.0, Phase.ANSWERING, 100, 160, 60, quantum_used=60, num_answer_tokens=12)
    assert place(r, LIMIT) == (LOW, 12)
    assert place(r._replace(num_answer_tokens=None), LIMIT) == (LOW, 60)  # the host does not count them


def test_a_running_request_yields_its_turn_after_the_papers_500_token_quantum():
    policy = PascalPolicy()
    within, spent = _reasoning(100, 10, 499), _reasoning(100, 10, 500)
    assert policy.rank_key(within, running=True)[:2] == (HIGH, 0)
    assert policy.rank_key(spent, running=True)[:2] == (HIGH, 1)  # behind the waiting requests
    assert policy.rank_key(spent, running=False)[:2] == (HIGH, 0)  # waiting: no quantum used yet


def _answering(rid: str, paced_until: float) -> RequestView:
    return RequestView(rid, 0.0, Phase.ANSWERING, 10, 610, 600, num_blocks=2, blocks_needed=1, quantum_used=600,
                       num_answer_tokens=600, paced_until_s=paced_until)  # fmt: skip


def test_of_two_expired_answering_requests_the_one_with_more_paced_tokens_yields():
    """Controlled preemption (§IV-C): with room for one, the reader who runs dry later
    (latest ``paced_until_s``) is preempted, whatever the running order."""
    for order in ((_answering("x", 5.0), _answering("y", 1.0)), (_answering("y", 1.0), _answering("x", 5.0))):
        view = SchedulerView(0.0, (), order, 0, 16, 8)
        assert PascalPolicy().decide(view) == [Preempt("x", "swap")]
