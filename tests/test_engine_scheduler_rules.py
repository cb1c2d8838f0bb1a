"""The engine scheduler's bookkeeping of turns, read off the views a policy gets: a request
admitted (again) starts a fresh quantum, and one preempted re-enters the waiting queue at
the back, its turn taken from the preemption (the engine's clock), not its arrival."""

import pytest

from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint
from reasonserve.policies import RoundRobinPolicy


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("sched_rules"), hidden_size=64, intermediate_size=128)


class _Recording:
    """Round-robin, keeping every view it was shown."""

    def __init__(self, quantum: int) -> None:
        self.inner, self.views = RoundRobinPolicy(quantum=quantum), []

    def decide(self, view):
        self.views.append(view)
        return self.inner.decide(view)


def test_turns_restart_at_admission_and_at_preemption(ckpt):
    now = [0.0]
    policy = _Recording(quantum=3)
    eng = Engine.from_pretrained(ckpt, EngineConfig(max_num_seqs=1, mode="batch_invariant"), policy=policy,
                                 clock=lambda: now[0])  # fmt: skip
    params = SamplingParams(max_tokens=10, temperature=0.0)
    for prompt in ([1, 2, 3], [4, 5, 6]):
        eng.add_request(prompt, params)
    while eng.has_unfinished():
        now[0] += 1.0
        eng.step()
    readmitted = preempted = 0
    for before, after in zip(policy.views, policy.views[1:], strict=False):
        was_running = {r.request_id for r in before.running}
        was_preempted = {r.request_id for r in before.waiting if r.num_output_tokens > 0}
        for r in after.running:
            if r.request_id in was_preempted:  # admitted again (its KV swapped back in)
                readmitted += 1
                assert r.quantum_used == 1  # one decode since its admission
        for r in after.waiting:
            if r.request_id in was_running:
                preempted += 1
                assert r.enqueued_s == after.now_s - 1.0 > r.arrival_s  # the step that preempted it
    assert readmitted > 0 and preempted > 0


def test_a_program_arrives_with_its_first_request(ckpt):
    """A program's arrival is its earliest member's: programs are ordered by first arrival,
    so a program that gains a late member keeps its place ahead of one that came between."""
    now = [0.0]
    eng = Engine.from_pretrained(ckpt, EngineConfig(mode="batch_invariant"), clock=lambda: now[0])
    params = SamplingParams(max_tokens=4, temperature=0.0)
    for t, rid, pid in ((1.0, "p1", "P"), (2.0, "q1", "Q"), (3.0, "p2", "P")):
        now[0] = t
        eng.add_request([1, 2, 3], params, request_id=rid, program_id=pid)
    programs = eng.scheduler.view().programs
    assert [(p.program_id, p.request_ids, p.arrival_s) for p in programs] == [
        ("P", ("p1", "p2"), 1.0),
        ("Q", ("q1",), 2.0),
    ]


def test_cached_tokens_are_the_prompt_tokens_the_first_admission_found(ckpt):
    """``num_cached_tokens`` counts prompt tokens served from the prefix cache, so it never
    exceeds the prompt: a request preempted with recompute and admitted again re-reads KV it
    computed itself, which is not counted again (vLLM's rule: the first scheduling's hits)."""
    eng = Engine.from_pretrained(ckpt, EngineConfig(block_size=4, num_blocks=64, max_num_seqs=1,
                                                    mode="batch_invariant"),
                                 policy=RoundRobinPolicy(quantum=3, mode="recompute"))  # fmt: skip
    eng.generate([[1, 2, 3, 4, 9]], SamplingParams(max_tokens=1, temperature=0.0))  # caches [1, 2, 3, 4]
    params = SamplingParams(max_tokens=10, temperature=0.0)
    eng.add_request([1, 2, 3, 4, 5, 6, 7, 8], params, request_id="a")
    eng.add_request([20, 21, 22], params, request_id="b")
    done = {}
    while eng.has_unfinished():
        done.update((out.request_id, out.metrics) for out in eng.step() if out.finish_reason)
    assert done["a"].num_preemptions > 0 and done["b"].num_preemptions > 0  # turns: both were readmitted
    assert (done["a"].num_cached_tokens, done["b"].num_cached_tokens) == (4, 0)  # one block of a's 8 tokens


def test_cached_tokens_never_exceed_the_prompt_of_a_migrated_request(ckpt):
    """A request resumed with output committed elsewhere may find that output's KV cached
    too; only its prompt's tokens count (here all 8: the cache holds 12 of its 16 tokens)."""
    eng = Engine.from_pretrained(ckpt, EngineConfig(block_size=4, num_blocks=64, mode="batch_invariant"))
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    first = eng.generate([prompt], SamplingParams(max_tokens=9, temperature=0.0))[0]  # 16 tokens of KV stay
    eng.add_request(prompt, SamplingParams(max_tokens=10, temperature=0.0), request_id="moved",
                    committed_output=first.token_ids[:8])  # fmt: skip
    done = {}
    while eng.has_unfinished():
        done.update((out.request_id, out.metrics) for out in eng.step() if out.finish_reason)
    assert done["moved"].num_cached_tokens == len(prompt)
