"""Quiet stretches (``SimConfig.skip_quiet_steps``, :mod:`reasonserve.sim.cluster.quiet`): running
the decode steps a policy declares decision-free as one event changes no result. Every
request's timings and counters, the placements, the migrations, the step count and the
end time are compared with one-decision-per-step stepping, on generated workloads (ties
included: identical requests at identical times on several instances), on the PASCAL /
FCFS / RR settings of ``benchmarks/policies.py`` over a slice of the ServeGen trace, and
with reasoning programs that stop requests mid-stretch."""

import dataclasses
import pathlib
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reasonserve.core import PolicyError
from reasonserve.core.policy import quiet_steps
from reasonserve.policies import FCFSPolicy, RoundRobinPolicy
from reasonserve.policies.app_fifo import AppFIFOPolicy
from reasonserve.policies.pascal import PascalPolicy
from reasonserve.policies.router import LeastKVRouter, PascalRouter
from reasonserve.sim import SimConfig, SimRequest, load_lengths, poisson_workload, simulate
from reasonserve.sim.cluster.quiet import QuietRun
from reasonserve.sim.cluster.sequence import SimSequence

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"


class _AskingFCFS(FCFSPolicy):
    """FCFS without its ``quiet_without_waiting`` declaration: asked at every change while
    nothing waits, as before the declaration existed."""

    quiet_without_waiting = False


class _AskingPascal(PascalPolicy):
    """PASCAL without its ``quiet_without_waiting`` declaration."""

    quiet_without_waiting = False


POLICIES = {
    "fcfs": FCFSPolicy,
    "round_robin": lambda: RoundRobinPolicy(quantum=9),
    "pascal": lambda: PascalPolicy(quantum=9, demote_threshold_tokens=70),
    "app_fifo": AppFIFOPolicy,  # no quiet_steps: stepped one decision at a time either way
    "fcfs_asking": _AskingFCFS,  # FCFS and PASCAL declare quiet_without_waiting: also without it
    "pascal_asking": lambda: _AskingPascal(quantum=9, demote_threshold_tokens=70),
}
ROUTERS = {
    "least_kv": LeastKVRouter(),
    "pascal": PascalRouter(),
    "pascal_nonadaptive": PascalRouter(adaptive=False),
}


def _outcome(res):
    seqs = [dataclasses.astuple(s) for s in res.sequences]
    return seqs, res.end_s, res.steps, res.placements, res.migrations


def _both(reqs, cfg, factory, router, **kw):
    """(stepped, quiet) outcomes of the same run."""
    runs = [simulate(reqs, dataclasses.replace(cfg, skip_quiet_steps=skip), factory, router, **kw)
            for skip in (False, True)]  # fmt: skip
    return [_outcome(r) for r in runs]


REQUEST = st.tuples(
    st.sampled_from([0.0, 0.5, 1.0]) | st.floats(0, 3), st.integers(1, 40), st.integers(0, 70),
    st.integers(0, 50), st.integers(1, 3),
).filter(lambda t: t[2] + t[3] >= 1)  # fmt: skip


CONFIGS = st.builds(
    SimConfig,
    num_instances=st.integers(1, 3),
    block_size=st.sampled_from([4, 16]),
    kv_capacity_tokens=st.sampled_from([160, 320, 1024]),
    max_num_seqs=st.integers(1, 6),
    max_num_batched_tokens=st.sampled_from([16, 64, 512]),
    preemption=st.sampled_from(["swap", "recompute"]),
    model=st.just("qwen2.5-7b"),
    quantum_tokens=st.sampled_from([1, 3, 20, 500]),  # a_i's first quantum ends mid-stretch
)


@st.composite
def workloads(draw):
    rows = draw(st.lists(REQUEST, min_size=1, max_size=12))
    reqs = [SimRequest(f"q{i:02d}-{j}", a, p, r, n) for i, (a, p, r, n, copies) in enumerate(rows)
            for j in range(copies)]  # fmt: skip
    return reqs, draw(CONFIGS)


@pytest.mark.parametrize("name", sorted(POLICIES))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.sampled_from(sorted(ROUTERS)))
def test_quiet_stretches_change_no_result_on_generated_workloads(name, work, router):
    reqs, cfg = work
    stepped, quiet = _both(reqs, cfg, POLICIES[name], ROUTERS[router], check_every_step=True)
    assert quiet == stepped


SETTINGS = {  # benchmarks/policies.py SETUPS
    "fcfs": (FCFSPolicy, LeastKVRouter()),
    "rr": (lambda: RoundRobinPolicy(quantum=500, mode="swap"), LeastKVRouter()),
    "pascal": (lambda: PascalPolicy(quantum=500, demote_threshold_tokens=5000, mode="swap"), PascalRouter()),
}


@pytest.mark.skipif(not (DATA / "serving_traces").is_dir(), reason="needs the shared ServeGen trace")
@pytest.mark.parametrize("name", sorted(SETTINGS))
@pytest.mark.parametrize("rate_rps", [3.75, 7.0])  # the benchmark's medium rate, and an overload
def test_quiet_stretches_change_no_result_in_the_benchmark_settings(name, rate_rps):
    table = load_lengths("servegen", DATA, seed=0)
    kv = 8000  # a small KV so that it binds: preemptions, swaps, migrations
    reqs = [
        r for r in poisson_workload(table, rate_rps, 100, seed=0) if r.prompt_tokens + r.output_tokens <= kv
    ]
    cfg = SimConfig(
        num_instances=8, hardware="h100", model="qwen2.5-32b", preemption="swap", kv_capacity_tokens=kv
    )
    stepped, quiet = _both(reqs, cfg, *SETTINGS[name])
    assert quiet == stepped
    preemptions = [f.name for f in dataclasses.fields(SimSequence)].index("num_preemptions")
    assert sum(s[preemptions] for s in stepped[0]) > 0  # preemptions happened (the hard case was exercised)


class _Recording:
    """A router that logs every question it is asked with the loads it is shown."""

    def __init__(self, inner) -> None:
        self.inner, self.seen = inner, []

    @property
    def name(self) -> str:
        return self.inner.name

    def route(self, request, instances):
        self.seen.append(("route", request, tuple(instances)))
        return self.inner.route(request, instances)

    def route_transition(self, request, current_id, instances, blocks_needed, *, stay_blocks_needed=None):
        self.seen.append(("transition", request, current_id, tuple(instances), blocks_needed))
        return self.inner.route_transition(request, current_id, instances, blocks_needed,
                                           stay_blocks_needed=stay_blocks_needed)  # fmt: skip


def _loads_seen(reqs, cfg, factory, router):
    """(stepped, quiet) router logs, and how many loads a quiet stretch gave in closed form."""
    from reasonserve.sim.cluster.quiet import QuietRun

    closed = []
    load_at = QuietRun.load_at

    def counted(self, *args):
        load = load_at(self, *args)
        closed.append(load is not None)
        return load

    logs = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(QuietRun, "load_at", counted)
        for skip in (False, True):
            rec = _Recording(router)
            simulate(
                reqs, dataclasses.replace(cfg, skip_quiet_steps=skip), factory, rec, check_every_step=True
            )
            logs.append(rec.seen)
    return logs, sum(closed), len(closed)


@pytest.mark.parametrize("name", ["fcfs", "pascal"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.sampled_from(sorted(ROUTERS)), st.sampled_from([0.001, 0.1, 10.0]))
def test_routers_see_the_same_loads_with_quiet_stretches(name, work, router, tpot):
    """Every load a router reads mid-stretch (closed form or settled: a tiny ``tpot`` makes
    readers starve, so the full pass decides) equals the one stepping shows it."""
    reqs, cfg = work
    (stepped, quiet), _, _ = _loads_seen(
        reqs, dataclasses.replace(cfg, tpot_slo_s=tpot), POLICIES[name], ROUTERS[router]
    )
    assert quiet == stepped


@pytest.mark.skipif(not (DATA / "serving_traces").is_dir(), reason="needs the shared ServeGen trace")
def test_routers_see_the_same_loads_in_the_pascal_setting_mostly_in_closed_form():
    table = load_lengths("servegen", DATA, seed=0)
    reqs = [r for r in poisson_workload(table, 7.0, 60, seed=0) if r.prompt_tokens + r.output_tokens <= 8000]
    cfg = SimConfig(num_instances=8, model="qwen2.5-32b", preemption="swap", kv_capacity_tokens=8000)
    (stepped, quiet), closed, asked = _loads_seen(reqs, cfg, *SETTINGS["pascal"])
    assert quiet == stepped
    assert len(stepped) >= 2 * len(reqs) - 10  # every arrival, and (almost) every end of thinking
    assert closed > asked / 2  # the shortcut is taken, not only its fallback


class _Pinned:
    """Places request ``x-k`` on instance ``k``; answering phases stay."""

    name = "pinned"

    def route(self, request, instances):
        return request.request_id.rsplit("-", 1)[1]

    def route_transition(self, request, current_id, instances, blocks_needed, *, stay_blocks_needed=None):
        return current_id


@pytest.mark.parametrize("first_thinks", [50, 20])
def test_a_transition_sees_the_virtual_steps_of_lower_instances_at_its_time(first_thinks):
    """Ties across instances: three identical batches step at identical times; instance 2's
    request ends its thinking at T (a real step) while instance 1 (and 0, when it thinks
    50 tokens) is mid-stretch with a virtual step at T. The transition's load reads count
    the lower instances' steps at T (the event loop runs ties in instance order), as
    stepping does; the prompt length moves T across KV block boundaries."""
    for prompt in range(8, 60):
        reqs = [SimRequest("a-0", 0.0, prompt, first_thinks, 70 - first_thinks),
                SimRequest("a-1", 0.0, prompt, 50, 20), SimRequest("a-2", 0.0, prompt, 20, 50)]  # fmt: skip
        cfg = SimConfig(num_instances=3, model="qwen2.5-7b", kv_capacity_tokens=4096)
        runs = []
        for skip in (False, True):
            rec = _Recording(_Pinned())
            res = simulate(reqs, dataclasses.replace(cfg, skip_quiet_steps=skip), FCFSPolicy, rec)
            runs.append((rec.seen, _outcome(res)))
        assert runs[1] == runs[0], prompt


def _sc(pid, arrival, tokens):
    from reasonserve.recordings import make_question
    from reasonserve.sim.programs.workload import SCProgram, difficulty

    q = make_question(pid, ["1"] * len(tokens), [float("nan")] * len(tokens), "1")
    return SCProgram(pid, arrival, 24, q, tuple(tokens), difficulty(q))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.floats(0, 1), st.lists(st.integers(5, 200), min_size=3, max_size=6)),
                min_size=1, max_size=4), st.sampled_from(["fcfs", "pascal"]))  # fmt: skip
def test_program_stops_mid_stretch_change_no_result(specs, name):
    from reasonserve.certainindex.allocation import ThresholdPolicy
    from reasonserve.clients.sim import SimCluster
    from reasonserve.programs.recorded import run_recorded_sc, sc_rounds

    progs = [_sc(f"g{i}", t, toks) for i, (t, toks) in enumerate(specs)]
    sc = sc_rounds(6, 3, ThresholdPolicy(0.7, detect_at=2, max_knob=6))
    cfg = SimConfig(num_instances=2, model="qwen2.5-7b", kv_capacity_tokens=1024, max_num_seqs=6)
    outcomes = []
    for skip in (False, True):
        cluster = SimCluster(dataclasses.replace(cfg, skip_quiet_steps=skip), POLICIES[name],
                             check_every_step=True)  # fmt: skip
        res, rows = run_recorded_sc(progs, sc, cluster)
        outcomes.append((_outcome(res), rows))
    assert outcomes[1] == outcomes[0]


class _Counting:
    """PASCAL, counting its decide() calls."""

    def __init__(self, hook: bool = True) -> None:
        self.inner, self.calls, self.name = PascalPolicy(), 0, "pascal"
        if hook:
            self.quiet_steps = self.inner.quiet_steps

    def decide(self, view):
        self.calls += 1
        return self.inner.decide(view)


def test_a_quiet_batch_is_decided_once_not_once_per_token():
    reqs = [SimRequest("a", 0.0, 40, 300, 100), SimRequest("b", 0.0, 40, 350, 50)]
    counts = {}
    for skip in (False, True):
        policy = _Counting()
        cfg = SimConfig(num_instances=1, kv_capacity_tokens=4096, model="qwen2.5-7b", skip_quiet_steps=skip)
        simulate(reqs, cfg, lambda p=policy: p)
        counts[skip] = policy.calls
    assert counts[False] > 400 and counts[True] <= 8  # admit, prefill, then one per phase change/finish


def test_a_policy_without_quiet_steps_is_asked_every_step():
    policy = _Counting(hook=False)
    simulate(
        [SimRequest("a", 0.0, 40, 30, 10)], SimConfig(num_instances=1, model="qwen2.5-7b"), lambda: policy
    )
    assert policy.calls == 41  # the prefill step (which also samples the first token), then 40 decodes


def test_a_policy_quiet_without_waiting_is_not_asked_while_nothing_waits_and_the_batch_fits():
    """Declared: asked for the admission only (stepped: every step, as any policy); not
    declared: asked once per stretch as before; the results are the same."""
    reqs = [SimRequest("a", 0.0, 40, 300, 100), SimRequest("b", 0.0, 40, 350, 50)]
    cfg = SimConfig(num_instances=1, kv_capacity_tokens=4096, model="qwen2.5-7b")
    calls, outcomes = {}, {}
    for idle in (False, True):
        for skip in (False, True):
            policy = _Counting()
            policy.quiet_without_waiting = idle
            outcomes[idle, skip] = _outcome(
                simulate(reqs, dataclasses.replace(cfg, skip_quiet_steps=skip), lambda p=policy: p)
            )
            calls[idle, skip] = policy.calls
    assert calls[True, True] == 1 and calls[False, True] >= 4 and calls[True, False] == calls[False, False] > 400
    assert len(set(map(repr, outcomes.values()))) == 1


def test_a_policy_quiet_without_waiting_is_asked_when_the_batch_does_not_fit():
    """Nothing waits, but the growth of the running batch does not fit its free blocks:
    the host must ask (the policy preempts there); a stepped run agrees."""
    reqs = [SimRequest(str(i), 0.0, 20, 60, 40) for i in range(3)]
    cfg = SimConfig(num_instances=1, kv_capacity_tokens=160, block_size=4, model="qwen2.5-7b")
    assert PascalPolicy.quiet_without_waiting is True  # the declaration this test is about
    stepped, quiet = _both(reqs, cfg, PascalPolicy, LeastKVRouter())
    assert quiet == stepped
    assert any(seq[-3] > 0 for seq in quiet[0])  # preempted at least once


@pytest.mark.parametrize("flag", [1, "yes", None])
def test_a_bad_quiet_without_waiting_is_a_policy_error(flag):
    policy = _Counting()
    policy.quiet_without_waiting = flag
    with pytest.raises(PolicyError, match="quiet_without_waiting"):
        simulate([SimRequest("a", 0.0, 40, 30, 10)], SimConfig(num_instances=1, model="qwen2.5-7b"), lambda: policy)


def test_a_bad_quiet_steps_answer_is_a_policy_error():
    class Bad(_Counting):
        def __init__(self) -> None:
            super().__init__(hook=False)

        def quiet_steps(self, view):
            return 0

    with pytest.raises(PolicyError, match="quiet_steps"):
        simulate([SimRequest("a", 0.0, 40, 30, 10)], SimConfig(num_instances=1, model="qwen2.5-7b"), Bad)


@pytest.mark.parametrize("answer", [0, -3, True, 2.0, None, "5", 7])
def test_every_bad_quiet_steps_value_is_a_policy_error(answer):
    """A wrong type or value is refused, never used; so is an attribute that is not a method
    (7 as the attribute itself: it was called and raised a TypeError)."""
    policy = _Counting(hook=False)
    policy.quiet_steps = lambda view: answer
    if answer == 7 and not isinstance(answer, bool):
        assert quiet_steps(policy, None) == 7
        policy.quiet_steps = 7
    with pytest.raises(PolicyError, match="quiet_steps"):
        quiet_steps(policy, None)


def test_closed_form_decode_timing_is_bit_identical_only_when_claimed():
    cost = SimConfig(model="qwen2.5-32b").cost_model()
    contexts = [100, 2000, 5000, 1]
    assert cost.decode_iterations_exact(4, sum(contexts), 50)
    steps = [cost.step_s([(1, c + i) for c in contexts]) for i in range(50)]
    assert cost.decode_iterations_s(4, sum(contexts), 50) == steps  # exactly, not approximately
    long = [cost.step_s([(1, c + i) for c in contexts]) for i in range(300)]  # numpy's path
    assert cost.decode_iterations_s(4, sum(contexts), 300) == long
    odd = dataclasses.replace(cost, model=dataclasses.replace(cost.model, num_params=32.76e9 + 0.3))
    assert not odd.decode_iterations_exact(4, sum(contexts), 50)


@pytest.mark.parametrize("start_s", [0.0, 1e-3, 0.0211, 3.7, 812.123456789])
def test_a_stretch_stamps_its_steps_as_stepping_does(start_s):
    """Each step event is at ``s + ((s + d) - s)`` after the one at ``s``; from a start past
    its longest step a stretch takes the running sum of the durations (the same float by
    Sterbenz's lemma: ``(s + d) - s`` is exact when ``s >= d``), before it the loop."""
    durations = [0.0203 + 1e-4 * (i % 7) for i in range(90)]
    run = QuietRun([], start_s, durations)
    ends, times, now = [], [], start_s
    for d in durations:
        ends.append(now + d)
        now = now + (ends[-1] - now)
        times.append(now)
    assert run.ends == ends and run.times == times



@settings(max_examples=300, deadline=None)
@given(st.sampled_from([1, 4, 16]), st.lists(st.tuples(st.integers(0, 90), st.integers(-1, 2)), min_size=1,
                                              max_size=6), st.integers(1, 120), st.integers(0, 40))  # fmt: skip
def test_block_growth_in_closed_form_is_the_per_request_count(size, reqs, most, free):
    """``_Growth``: the blocks k more iterations take (each request's token of iteration k
    included) and the first k past ``free``, as a per-request count of the blocks beyond
    those held; requests holding their next token's block and up to one more (closed
    form), and holding fewer or more (the threshold list)."""
    from reasonserve.sim.cluster.quiet import _Growth
    from reasonserve.sim.cluster.sequence import SimSequence

    seqs = []
    for computed, slack in reqs:
        s = SimSequence(SimRequest(str(len(seqs)), 0.0, 1, 1, 1), 0.0)
        s.num_computed, s.num_blocks = computed, max(0, -(-(computed + 1) // size) + slack)
        seqs.append(s)

    def extra(k):
        return sum(max(0, -(-(s.num_computed + k + 1) // size) - s.num_blocks) for s in seqs)

    growth = _Growth(seqs, size, most)
    assert [growth.at(k) for k in range(most)] == [extra(k) for k in range(most)]
    over = next((k for k in range(most) if extra(k) > free), None)
    first = growth.first_over(free)
    assert first == over or (over is None and growth.thresholds is None and first >= most)


FRACTIONAL = {"bytes_per_param": 1.1}  # kv_bytes_per_token 31539.2...: not an integer


def _decode_formula(cost, batch, context_sum, iterations):
    """Each iteration's step time straight from its context sum (what 63aa80f computed)."""
    m, hw = cost.model, cost.hardware
    attn, kv = 4 * m.num_layers * m.hidden_size, m.kv_bytes_per_token
    out = []
    for i in range(iterations):
        context = context_sum + i * batch
        compute = (2 * m.num_params * batch + attn * (context + batch / 2)) / (hw.peak_flops * cost.compute_efficiency)
        memory = (kv * (context + batch) + m.weight_bytes) / (hw.memory_bandwidth_bytes_s * cost.bandwidth_efficiency)
        out.append((compute if compute >= memory else memory) + cost.step_overhead_s)
    return out


@pytest.mark.parametrize("num_params", [1e6, 5e7, 7.62e9])
@pytest.mark.parametrize("iterations", [1, 16, 63, 64, 200])
def test_decode_iterations_are_each_iterations_own_formula_with_a_fractional_kv(num_params, iterations):
    """A running sum of a float ``kv * batch`` rounds away from ``kv * (context + batch)``
    (the loop below numpy's threshold once kept one); coarse steps use these times unchecked."""
    base = SimConfig(model="qwen2.5-7b").cost_model()
    model = dataclasses.replace(base.model, num_params=num_params, **FRACTIONAL)
    cost = dataclasses.replace(base, model=model)
    for batch, context in [(1, 0), (3, 1000), (17, 123457), (64, 190001)]:
        assert cost.decode_iterations_s(batch, context, iterations) == _decode_formula(cost, batch, context, iterations)


def test_closed_form_decode_timing_is_not_claimed_exact_for_a_fractional_kv():
    cost = SimConfig(model="qwen2.5-7b").cost_model()
    odd = dataclasses.replace(cost, model=dataclasses.replace(cost.model, num_params=1e6, **FRACTIONAL))
    assert cost.decode_iterations_exact(4, 7000, 50)
    assert not odd.decode_iterations_exact(4, 7000, 50)  # step_s's per-sequence float sums round


def test_quiet_stretches_change_no_result_with_a_fractional_kv(monkeypatch):
    """A model whose KV bytes per token is not an integer: its stretches are stepped per
    step (``decode_iterations_exact`` False), so exact == stepped bit for bit."""
    from reasonserve.cost import model_spec

    spec = dataclasses.replace(model_spec.MODELS["qwen2.5-7b"], name="odd-kv", num_params=1e6, **FRACTIONAL)
    monkeypatch.setitem(model_spec.MODELS, "odd-kv", spec)
    rng = random.Random(3)
    reqs = [SimRequest(f"r{i}", i * 0.01, rng.randint(1, 3000), rng.randint(1, 900), rng.randint(1, 40))
            for i in range(40)]  # fmt: skip
    cfg = SimConfig(num_instances=1, model="odd-kv", kv_capacity_tokens=400_000, max_num_seqs=64)
    stepped, quiet = _both(reqs, cfg, FCFSPolicy, None)
    assert quiet == stepped


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 60), st.integers(0, 20)), max_size=7),
       st.integers(1, 6), st.integers(0, 12), st.sampled_from([1, 4, 16]))  # fmt: skip
def test_the_host_skips_decide_exactly_on_the_views_the_declaration_names(rows, seats, free, size):
    """``quiet_without_waiting``'s contract (core.policy): nothing waits, ``len(running) <=
    max_num_seqs`` and the running views' ``blocks_needed`` sum to at most ``free_blocks``.
    The simulator's own check must be that condition on the view it would have built
    (more seats taken than allowed included, which no run reaches)."""
    from reasonserve.sim.cluster.instance import SimInstance
    from reasonserve.sim.cluster.sequence import SimSequence

    cfg = SimConfig(num_instances=1, model="qwen2.5-7b", block_size=size, max_num_seqs=seats)
    inst = SimInstance("0", cfg, cfg.cost_model(), FCFSPolicy())
    for i, (prompt, out, held) in enumerate(rows):
        s = SimSequence(SimRequest(f"r{i}", 0.0, prompt, 30, 40), 0.0)
        s.status, s.num_output, s.num_blocks = "running", out, held
        s.num_computed = max(0, prompt + out - 1)
        inst.running.append(s)
    inst.free_blocks = free
    view = inst.view(0.0)
    named = len(view.running) <= view.max_num_seqs and sum(r.blocks_needed for r in view.running) <= free
    assert inst._batch_fits() == named


@pytest.mark.parametrize("iterations", [63, 64, 300])
@pytest.mark.parametrize("context", [7000, 2**48])  # 2**48: kv * context overflows numpy's int64
def test_decode_iterations_take_numpy_from_64_iterations_below_int64_overflow_only(monkeypatch, iterations,
                                                                                   context):
    """numpy's branch from 64 iterations gives each iteration's own formula; where the KV
    bytes would overflow int64 the Python loop (exact ints) must give them instead."""
    from reasonserve.cost import roofline as cost_model

    cost = SimConfig(model="qwen2.5-7b").cost_model()
    taken, arange = [], np.arange
    monkeypatch.setattr(cost_model.np, "arange", lambda *a, **k: taken.append(a) or arange(*a, **k))
    assert cost.decode_iterations_s(5, context, iterations) == _decode_formula(cost, 5, context, iterations)
    numpy_case = iterations >= 64 and context < 2**40
    assert bool(taken) == numpy_case
