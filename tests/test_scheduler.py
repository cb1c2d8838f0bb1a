"""The scheduler applies policy objects: bad policies and decisions get typed errors with the
state unchanged; custom policies, Order/TokenBudget/Stop are honoured; under generated
workloads no request is lost or duplicated and block accounting stays exact."""

import itertools
import random
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.core import PolicyError
from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint
from reasonserve.engine.outputs import FINISH_REASONS
from reasonserve.policies import (
    Admit,
    FCFSPolicy,
    Migrate,
    Order,
    Preempt,
    RoundRobinPolicy,
    Stop,
    TokenBudget,
)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return Engine.from_pretrained(make_tiny_checkpoint(tmp_path_factory.mktemp("sched"))).model


@dataclass
class Scripted:
    """Returns a fixed list of decisions, then defers to FCFS."""

    decisions: list
    name: str = "scripted"

    def decide(self, view):
        out, self.decisions = self.decisions, []
        return out or FCFSPolicy().decide(view)


def _state(eng):
    return ([s.request_id for s in eng.waiting], [s.request_id for s in eng.running], eng.blocks.num_free,
            [list(s.block_table) for s in eng.running])  # fmt: skip


def test_a_policy_without_decide_is_rejected_by_name(model):
    class NoDecide:
        name = "broken"

    with pytest.raises(PolicyError, match=r"broken.*decide"):
        Engine(model, policy=NoDecide())


@pytest.mark.parametrize(
    ("decision", "message"),
    [
        (Admit("nope"), "unknown request id"),
        (Preempt("w"), "needs a running request"),
        (Admit("r"), "needs a waiting request"),
        (Preempt("r", mode="teleport"), "mode"),
        (Migrate("r", "instance-2"), "multi-instance"),
        (Order(("r", "r")), "repeats"),
        (TokenBudget("r", -1), "tokens"),
        ("admit everything", "is not a decision"),
    ],
)
def test_bad_decisions_raise_naming_the_policy_and_leave_the_state_unchanged(model, decision, message):
    policy = Scripted([])
    eng = Engine(model, EngineConfig(block_size=4, num_blocks=16), policy=policy)
    eng.add_request([1, 2, 3], SamplingParams(max_tokens=8), request_id="r")
    eng.step()
    eng.add_request([4, 5, 6], SamplingParams(max_tokens=8), request_id="w")
    before = _state(eng)
    policy.decisions = [Stop("r"), decision]  # the valid Stop must not be applied either
    with pytest.raises(PolicyError, match=message) as err:
        eng.step()
    assert "scripted" in str(err.value) and repr(decision) in str(err.value)
    assert _state(eng) == before
    eng.check_blocks()


def test_admissions_over_kv_capacity_are_rejected(model):
    policy = Scripted([])
    eng = Engine(model, EngineConfig(block_size=4, num_blocks=6, max_num_seqs=8), policy=policy)
    for i in range(3):
        eng.add_request([1] * 7, SamplingParams(max_tokens=1), request_id=f"q{i}")  # 2 blocks each
    before = _state(eng)
    policy.decisions = [Admit("q0"), Admit("q1"), Admit("q2"), Admit("q0")]
    with pytest.raises(PolicyError, match="already moves"):
        eng.step()
    policy.decisions = [Admit("q0"), Admit("q1"), Admit("q2")]
    eng2 = Engine(model, EngineConfig(block_size=4, num_blocks=5, max_num_seqs=8), policy=policy)
    for i in range(3):
        eng2.add_request([1] * 7, SamplingParams(max_tokens=1), request_id=f"q{i}")
    with pytest.raises(PolicyError, match="KV blocks"):
        eng2.step()
    assert _state(eng) == before and eng2.blocks.num_free == 5


def test_a_custom_policy_object_decides_admission_order(model):
    @dataclass(frozen=True)
    class NewestFirst:
        name: str = "newest-first"

        def decide(self, view):
            order = sorted(view.waiting, key=lambda r: (-r.arrival_s, r.request_id))
            seats = view.max_num_seqs - len(view.running)
            return [Admit(r.request_id) for r in order[:seats]]

    now = [0.0]

    def clock():
        now[0] += 1.0
        return now[0]

    eng = Engine(model, EngineConfig(max_num_seqs=1), policy=NewestFirst(), clock=clock)
    for i in range(3):
        eng.add_request([1, 2], SamplingParams(max_tokens=2, temperature=0.0), request_id=f"r{i}")
    done = []
    while eng.has_unfinished():
        done += [o.request_id for o in eng.step()]
    assert done == ["r2", "r1", "r0"]
    assert eng.policy.name == "newest-first"


def test_order_token_budget_and_stop_are_honoured(model):
    policy = Scripted([])
    eng = Engine(model, EngineConfig(block_size=4, num_blocks=64, mode="batch_invariant"), policy=policy)
    for rid in ("a", "b", "c"):
        eng.add_request([1, 2, 3], SamplingParams(max_tokens=20, temperature=0.0), request_id=rid)
    eng.step()
    outputs = {s.request_id: len(s.output) for s in eng.running}
    policy.decisions = [Order(("c", "b", "a")), TokenBudget("b", 0), Stop("a", reason="enough")]
    done = eng.step()
    assert [(o.request_id, o.finish_reason, o.stop_reason) for o in done] == [("a", "stop", "enough")]
    after = {s.request_id: len(s.output) for s in eng.running}
    assert after == {"b": outputs["b"], "c": outputs["c"] + 1}  # b paused for the step
    eng.check_blocks()


def test_round_robin_rotates_seats_with_its_quantum(model):
    params = SamplingParams(max_tokens=12, temperature=0.0)
    eng = Engine(model, EngineConfig(block_size=4, num_blocks=64, max_num_seqs=1, mode="batch_invariant"),
                 policy=RoundRobinPolicy(quantum=4, mode="swap"))  # fmt: skip
    ids = [eng.add_request([i + 1, 2, 3], params) for i in range(2)]
    seen, done = [], {}
    while eng.has_unfinished():
        done |= {o.request_id: o for o in eng.step()}
        seen += [s.request_id for s in eng.running]
    switches = sum(1 for x, y in itertools.pairwise(seen) if x != y)
    assert switches >= 3  # the single seat alternated several times
    reference = Engine(model, EngineConfig(mode="batch_invariant")).generate([[1, 2, 3], [2, 2, 3]], params)
    assert [done[i].token_ids for i in ids] == [o.token_ids for o in reference]
    assert sum(done[i].metrics.num_swaps for i in ids) >= 2


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), rr=st.booleans(), mode=st.sampled_from(["recompute", "swap"]))
def test_generated_workloads_lose_nothing_and_keep_blocks_exact(model, seed, rr, mode):
    """Tiny cache (preemption happens), random aborts; run twice: identical outcomes."""

    def run():
        rng = random.Random(seed)
        policy = RoundRobinPolicy(quantum=rng.randint(1, 6), mode=None) if rr else FCFSPolicy()
        config = EngineConfig(block_size=4, num_blocks=12, max_num_seqs=4, max_num_batched_tokens=9,
                              preemption=mode, mode="batch_invariant")  # fmt: skip
        eng = Engine(model, config, policy=policy)
        ids = [eng.add_request([rng.randrange(256) for _ in range(rng.randint(1, 12))],
                               SamplingParams(max_tokens=rng.randint(1, 12), temperature=0.0)) for _ in range(8)]  # fmt: skip
        returned, steps = [], 0
        while eng.has_unfinished():
            returned += eng.step()
            steps += 1
            assert steps < 500, "no progress"
            eng.check_blocks()
            if rng.random() < 0.05 and eng.running:
                returned.append(eng.abort(eng.running[-1].request_id))
        assert sorted(o.request_id for o in returned) == sorted(ids)  # each exactly once
        assert all(o.finish_reason in FINISH_REASONS for o in returned)
        assert eng.blocks.num_free == 12
        return [(o.request_id, o.finish_reason, o.token_ids) for o in returned], eng.metrics()

    first, again = run(), run()
    assert first == again


def test_a_policy_that_never_preempts_cannot_stall_the_engine(model):
    """Two requests fill the cache and both need a block: the liveness rule preempts one."""

    @dataclass(frozen=True)
    class AdmitOnly:
        name: str = "admit-only"

        def decide(self, view):
            free = view.free_blocks - sum(r.blocks_needed for r in view.running)
            out = []
            for r in sorted(view.waiting, key=lambda r: r.request_id):
                if r.blocks_needed <= free and len(view.running) + len(out) < view.max_num_seqs:
                    out.append(Admit(r.request_id))
                    free -= r.blocks_needed
            return out

    eng = Engine(model, EngineConfig(block_size=4, num_blocks=4, mode="batch_invariant"), policy=AdmitOnly())
    params = SamplingParams(max_tokens=7, temperature=0.0)
    for rid in ("a", "b"):
        eng.add_request([1, 2, 3, 4], params, request_id=rid)  # 1 block each at admission, 3 at the end
    done, steps = [], 0
    while eng.has_unfinished():
        done += eng.step()
        steps += 1
        assert steps < 200
        eng.check_blocks()
    assert sorted((o.request_id, o.finish_reason, len(o.token_ids)) for o in done) == [("a", "length", 7),
                                                                                         ("b", "length", 7)]  # fmt: skip
    assert eng.metrics().num_preemptions > 0


def test_views_carry_programs_prefix_hashes_blocks_and_quantum(model):
    seen = []

    @dataclass
    class Recorder:
        name: str = "recorder"

        def decide(self, view):
            seen.append(view)
            return FCFSPolicy().decide(view)

    eng = Engine(model, EngineConfig(block_size=4, num_blocks=64), policy=Recorder())
    shared = list(range(1, 9))  # two full 4-token blocks
    eng.add_request([*shared, 50], SamplingParams(max_tokens=4), request_id="a", program_id="sc-1")
    eng.add_request([*shared, 60], SamplingParams(max_tokens=4), request_id="b", program_id="sc-1")
    eng.add_request([7, 7], SamplingParams(max_tokens=4, priority=3), request_id="c")
    eng.step()
    eng.step()
    view = seen[-1]
    assert [(p.program_id, p.request_ids) for p in view.programs] == [("sc-1", ("a", "b"))]
    by_id = {r.request_id: r for r in view.running}
    assert by_id["a"].prefix_hashes == by_id["b"].prefix_hashes and len(by_id["a"].prefix_hashes) == 2
    assert by_id["c"].prefix_hashes == () and by_id["c"].priority == 3
    assert by_id["a"].quantum_used == 9 and by_id["a"].num_blocks == 3 and by_id["a"].program_id == "sc-1"
    assert view.total_blocks == 64 and view.free_blocks == 64 - 3 - 3 - 1
