"""Dynasor's policy object runs unchanged on the embedded engine: gang scheduling of a
program's requests, approximate SJF across programs, escalation after the bound."""

import pytest

from _recording import Recording
from reasonserve.core.decisions import Admit
from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint
from reasonserve.policies.dynasor import DynasorPolicy


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-dynasor"))


CONFIG = EngineConfig(block_size=4, num_blocks=64, max_num_seqs=2, max_num_batched_tokens=64)


def _run(ckpt, policy, requests):
    """``requests``: (request id, program id) in arrival order; returns the admission order."""
    eng = Engine.from_pretrained(ckpt, CONFIG, policy=policy)
    for i, (rid, pid) in enumerate(requests):
        params = SamplingParams(max_tokens=6, temperature=1.0, seed=7 + i, ignore_eos=True)
        eng.add_request([(3 * i + j) % 200 + 1 for j in range(5)], params, rid, program_id=pid)
    finished = {}
    while eng.has_unfinished():
        for out in eng.step():
            if out.finish_reason is not None:
                finished[out.request_id] = len(out.token_ids)
    eng.check_blocks()
    assert finished == {rid: 6 for rid, _ in requests}  # every request completed, none lost
    return [d.request_id for _, decisions in policy.steps for d in decisions if isinstance(d, Admit)]


def test_gang_runs_a_programs_requests_together(ckpt):
    # Requests arrive interleaved across programs; request-level FIFO would pair a1 with b1.
    order = _run(ckpt, Recording(DynasorPolicy()), [("a1", "A"), ("b1", "B"), ("a2", "A"), ("b2", "B")])
    assert order[:2] == ["a1", "a2"] and sorted(order) == ["a1", "a2", "b1", "b2"]


def test_sjf_runs_the_smaller_program_first(ckpt):
    # Program X (3 requests) arrives before Y (1 request); Y has less remaining work.
    policy = Recording(DynasorPolicy())
    order = _run(ckpt, policy, [("x1", "X"), ("x2", "X"), ("x3", "X"), ("y1", "Y")])
    assert order[0] == "y1"
    keys = policy.inner.program_keys(policy.steps[0][0], policy.inner.state)
    assert keys["Y"] < keys["X"]  # remaining-work estimate 1 x prior < 3 x prior


def test_escalation_restores_arrival_order(ckpt):
    # Past the starvation bound every program is escalated: arrival order, X first.
    policy = Recording(DynasorPolicy(starvation_bound_s=1e-9))
    order = _run(ckpt, policy, [("x1", "X"), ("x2", "X"), ("x3", "X"), ("y1", "Y")])
    assert order[:2] == ["x1", "x2"]
    assert all(
        key[0] == 0 for key in policy.inner.program_keys(policy.steps[-1][0], policy.inner.state).values()
    )
