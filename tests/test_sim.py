"""Simulator parts: roofline cost model, presets, config errors, pacer/QoE, metrics, traces."""

import gzip
import json

import pytest

from reasonserve.core import InvalidArgumentError
from reasonserve.core.decisions import Admit, Order, Preempt, Stop, TokenBudget
from reasonserve.policies.pacer import TokenPacer
from reasonserve.policies.pascal import PascalPolicy
from reasonserve.policies.router import InstanceLoad, LeastKVRouter, PascalRouter
from reasonserve.sim import (
    HARDWARE,
    MODELS,
    LengthTable,
    RooflineCostModel,
    SimConfig,
    SimRequest,
    load_lengths,
    poisson_workload,
    simulate,
    summarize,
    tail_ttft_by_bin,
)


def test_presets_carry_the_datasheet_numbers():
    assert HARDWARE["h100"].peak_flops == 989e12 and HARDWARE["h100"].memory_bandwidth_bytes_s == 3.35e12
    assert (
        HARDWARE["a100-80g"].memory_bandwidth_bytes_s == 2.039e12 and HARDWARE["h200"].memory_bytes == 141e9
    )
    assert MODELS["qwen2.5-32b"].kv_bytes_per_token == 2 * 64 * 8 * 128 * 2


def test_decode_is_memory_bound_and_prefill_compute_bound():
    cost = RooflineCostModel(HARDWARE["h100"], MODELS["qwen2.5-32b"], step_overhead_s=0.0)
    weights_s = MODELS["qwen2.5-32b"].weight_bytes / (3.35e12 * 0.8)
    assert cost.step_s([(1, 0)]) == pytest.approx(weights_s, rel=1e-3)  # one decode: read the weights
    assert cost.step_s([(1, 4000)] * 8) > cost.step_s([(1, 100)] * 8)  # more KV read, slower
    flops_s = 2 * 32.76e9 * 4096 / (989e12 * 0.6)
    assert cost.step_s([(4096, 0)]) >= flops_s  # a long prefill costs at least its GEMM FLOPs
    assert cost.step_s([(4096, 0)]) > 10 * cost.step_s([(1, 0)])
    slower = RooflineCostModel(HARDWARE["a100-80g"], MODELS["qwen2.5-32b"], step_overhead_s=0.0)
    assert slower.step_s([(1, 1000)] * 16) > cost.step_s([(1, 1000)] * 16)
    assert cost.swap_s(1000) == pytest.approx(1000 * 262144 / 64e9)


def test_kv_capacity_comes_from_the_memory_left_beside_the_weights():
    cfg = SimConfig()
    free = 80e9 * 0.9 - 32.76e9 * 2
    assert cfg.num_blocks == int(free // 262144) // 16
    with pytest.raises(InvalidArgumentError, match="does not fit"):
        SimConfig(hardware="rtx4090", model="qwen2.5-32b")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"num_instances": 0}, "num_instances"), ({"block_size": 0}, "block_size"),
     ({"hardware": "tpu"}, "hardware"), ({"preemption": "drop"}, "preemption"),
     ({"tpot_slo_s": -1.0}, "tpot_slo_s"), ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization")],
)  # fmt: skip
def test_invalid_sim_configs_name_the_field(kwargs, field):
    with pytest.raises(InvalidArgumentError, match=field):
        SimConfig(**kwargs)


@pytest.mark.parametrize(
    ("make", "field"),
    [(lambda: PascalPolicy(quantum=0), "quantum"), (lambda: PascalPolicy(quantum=-5), "quantum"),
     (lambda: PascalPolicy(demote_threshold_tokens=-1), "demote_threshold_tokens"),
     (lambda: TokenPacer(tpot_s=0), "tpot_s"),
     (lambda: PascalRouter().route(None, []), "instances"),
     (lambda: LeastKVRouter().route(None, ()), "instances")],
)  # fmt: skip
def test_invalid_policy_configs_name_the_field(make, field):
    with pytest.raises(InvalidArgumentError, match=field):
        make()


def test_qoe_is_one_when_paced_and_drops_after_a_stall():
    pacer = TokenPacer(tpot_s=0.1)
    assert pacer.qoe([0.1 * k for k in range(50)]) == pytest.approx(1.0)
    burst_then_pause = [0.01 * k for k in range(30)] + [2.5 + 0.01 * k for k in range(20)]
    assert pacer.qoe(burst_then_pause) == pytest.approx(1.0)  # the buffer covers the pause
    stalled = [0.1 * k for k in range(10)] + [10.0 + 0.1 * k for k in range(10)]
    assert pacer.qoe(stalled) < 0.8
    assert pacer.behind(0.0, 5, 2.0) and not pacer.behind(0.0, 21, 2.0)
    assert pacer.buffered([0.0, 0.01, 0.02], 0.05) == 2


def test_tail_rule_by_reasoning_bins():
    rows = [{"reasoning_tokens": 10, "ttft_s": float(i)} for i in range(8)]  # < 10 samples: max
    rows += [{"reasoning_tokens": 300, "ttft_s": float(i)} for i in range(15)]  # < 20: P90
    rows += [{"reasoning_tokens": 600, "ttft_s": 1.0} for _ in range(4)]  # < 5: left out
    rows += [{"reasoning_tokens": 900, "ttft_s": float(i)} for i in range(200)]  # P99
    assert tail_ttft_by_bin(rows) == {0: 7.0, 256: 13.0, 768: 197.0}


def test_router_algorithm_1_skips_instances_missing_their_slo():
    loads = [InstanceLoad("0", 10, False), InstanceLoad("1", 50, True), InstanceLoad("2", 30, True)]
    assert PascalRouter().route(None, loads) == "2"
    assert LeastKVRouter().route(None, loads) == "0"
    assert PascalRouter().route(None, [InstanceLoad("0", 10, False), InstanceLoad("1", 5, False)]) == "1"


def test_a_lone_request_runs_at_the_roofline_speed():
    cfg = SimConfig(num_instances=1)
    req = SimRequest("a", 0.0, 100, 50, 20)
    res = simulate([req], cfg, PascalPolicy)
    (seq,) = res.sequences
    cost = cfg.cost_model()
    expected = cost.step_s([(100, 0)]) + sum(cost.step_s([(1, 100 + k)]) for k in range(69))
    assert seq.finished_s == pytest.approx(expected)
    assert len(seq.answer_times) == 20 and seq.end_of_thinking_s < seq.answer_times[0]
    summary = summarize(res)
    assert summary["ttft_s"]["max"] == pytest.approx(seq.answer_times[0])
    assert summary["slo_violation_rate"] == 0.0  # ~25 ms per token beats the 100 ms target


def _write_fake_traces(root):
    sg = root / "serving_traces" / "servegen_deepseek_r1"
    sg.mkdir(parents=True)
    window = {
        "input_tokens": "{50: 0.5, 70: 0.5}",
        "output_tokens": "{100: 1.0}",
        "reason_ratio": "{0.6: 1.0}",
    }
    (sg / "chunk-0-dataset.json").write_text(json.dumps({"0": window}))
    rt = root / "reasoning_traces"
    rt.mkdir()
    lines = [{"full_text": "<think>" + "x" * 65 + "</think>" + "y" * 20, "tokens_used": 100},
             {"full_text": "<think>never closed", "tokens_used": 50}]  # fmt: skip
    with gzip.open(rt / "qwen3-8b_fulltext_dev_split.jsonl.gz", "wt") as f:
        f.write("\n".join(json.dumps(x) for x in lines))


def test_length_tables_from_trace_files(tmp_path):
    _write_fake_traces(tmp_path)
    sg = load_lengths("servegen", tmp_path, num_rows=50)
    assert {r[0] for r in sg.rows} == {50, 70} and all(r[1:] == (60, 40) for r in sg.rows)
    q = load_lengths("qwen3", tmp_path, prompt_tokens=64)
    assert q.rows == ((64, 80, 20), (64, 49, 1))  # unclosed: all reasoning, 1-token answer
    with pytest.raises(InvalidArgumentError, match="source"):
        load_lengths("alpaca", tmp_path)
    with pytest.raises(InvalidArgumentError, match="data_dir"):
        load_lengths("servegen", tmp_path / "nowhere")


def test_poisson_workload_is_seeded_and_has_the_requested_rate():
    table = LengthTable(((10, 5, 5),), "fixture")
    a, b = poisson_workload(table, 4.0, 2000, seed=3), poisson_workload(table, 4.0, 2000, seed=3)
    assert a == b and a != poisson_workload(table, 4.0, 2000, seed=4)
    assert 2000 / a[-1].arrival_s == pytest.approx(4.0, rel=0.1)
    progs = poisson_workload(table, 1.0, 10, seed=0, programs_of=4)
    assert [r.program_id for r in progs] == ["p000000"] * 4 + ["p000001"] * 4 + ["p000002"] * 2
    with pytest.raises(InvalidArgumentError, match="rate_per_s"):
        poisson_workload(table, 0.0, 5, seed=0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"request_id": 7}, "request_id must be a str"),
        ({"prompt_tokens": 2.5}, "prompt_tokens must be an integer"),
        ({"reasoning_tokens": True}, "reasoning_tokens must be an integer"),
        ({"answer_tokens": "3"}, "answer_tokens must be an integer"),
        ({"arrival_s": float("nan")}, "arrival_s must be a finite number"),
        ({"arrival_s": float("inf")}, "arrival_s must be a finite number"),
        ({"arrival_s": "1.0"}, "arrival_s must be a finite number"),
        ({"arrival_s": 10**400}, "arrival_s must be a finite number"),
        ({"program_id": 3}, "program_id must be a str or None"),
        ({"prompt_tokens": 0}, "token counts"),
    ],
)
def test_sim_requests_check_their_field_types(kwargs, match):
    fields = {"request_id": "a", "arrival_s": 0.0, "prompt_tokens": 5, "reasoning_tokens": 3, "answer_tokens": 2}
    with pytest.raises(InvalidArgumentError, match=match):
        SimRequest(**{**fields, **kwargs})


def test_sim_requests_store_built_in_types_and_simulate_as_such():
    """Numpy counts become ints, an int arrival a float, a list of hashes a tuple: the
    compiled simulator modules read the fields as those types."""
    import numpy as np

    odd = SimRequest("a", 1, np.int64(40), np.int32(30), np.int16(10), prefix_hashes=[3, 4])
    assert type(odd.prompt_tokens) is int and type(odd.reasoning_tokens) is int and type(odd.answer_tokens) is int
    assert type(odd.arrival_s) is float and odd.prefix_hashes == (3, 4)
    plain = SimRequest("a", 1.0, 40, 30, 10, prefix_hashes=(3, 4))
    assert odd == plain
    config = SimConfig(num_instances=1, model="qwen2.5-7b")
    assert simulate([odd], config, PascalPolicy).sequences[0].finished_s == simulate(
        [plain], config, PascalPolicy
    ).sequences[0].finished_s


def _hostile_run(make):
    """One instance whose policy returns ``make(view)`` once a request runs (FCFS otherwise)."""
    from reasonserve.policies import FCFSPolicy

    class Hostile(FCFSPolicy):
        quiet_without_waiting = False

        def decide(self, view):
            return make(view) if view.running else super().decide(view)

    reqs = [SimRequest(f"r{i}", 0.01 * i, 20, 12, 6) for i in range(3)]
    return simulate(reqs, SimConfig(num_instances=1, model="qwen2.5-7b"), Hostile)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda v: [Stop(5)], "not a str"),
        (lambda v: [Admit(None)], "not a str"),
        (lambda v: [Order(["nobody"])], "not running"),
        (lambda v: [Order([3])], "tuple of request ids"),
        (lambda v: [Order("r0")], "tuple of request ids"),
        (lambda v: [TokenBudget(
            v.running[0].request_id, 2.5)], "not an int >= 0"),
        (lambda v: [TokenBudget(
            v.running[0].request_id, True)], "not an int >= 0"),
        (lambda v: [Preempt(
            v.running[0].request_id, 3)], "has mode 3"),
    ],
)
def test_hostile_decision_fields_are_policy_errors(make, match):
    """A policy's decisions with fields of the wrong type are PolicyErrors naming them, in
    the compiled modules as in the sources (never a TypeError from a declared type)."""
    from reasonserve.core import PolicyError

    with pytest.raises(PolicyError, match=match):
        _hostile_run(make)


@pytest.mark.parametrize(
    ("config", "match"),
    [({"max_num_seqs": 2}, "makes 3 running requests; max_num_seqs is 2"),
     ({"kv_capacity_tokens": 96, "block_size": 16}, r"needs \d+ KV blocks in all with the running requests' growth; 6 are free")],
)  # fmt: skip
def test_plans_over_the_capacity_are_policy_errors(config, match):
    """The shared capacity rule (core/hosting.py, every host checks it) refuses a
    plan that admits past the seats or the blocks, with the rule's own message."""
    from reasonserve.core import PolicyError
    from reasonserve.policies import FCFSPolicy

    class Greedy(FCFSPolicy):  # admits every waiting request, fitting or not
        def decide(self, view):
            return [Admit(r.request_id) for r in view.waiting]

    reqs = [SimRequest(f"r{i}", 0.0, 40, 12, 6) for i in range(3)]
    with pytest.raises(PolicyError, match=match):
        simulate(reqs, SimConfig(num_instances=1, model="qwen2.5-7b", **config), Greedy)


def test_decision_fields_of_other_integer_and_sequence_types_are_read_as_such():
    import numpy as np

    ordered = _hostile_run(lambda v: [Order([r.request_id for r in v.running])])  # a list, not a tuple
    budgeted = _hostile_run(lambda v: [TokenBudget(v.running[0].request_id, np.int64(4))])
    plain = _hostile_run(lambda v: [TokenBudget(v.running[0].request_id, 4)])
    assert len(ordered.sequences) == 3 and budgeted.end_s == plain.end_s and budgeted.steps == plain.steps


def test_sim_results_pickle_and_copy():
    import copy
    import pickle

    from reasonserve.policies import FCFSPolicy

    res = simulate([SimRequest("r0", 0.0, 20, 12, 6)], SimConfig(num_instances=1, model="qwen2.5-7b"), FCFSPolicy)
    for other in (pickle.loads(pickle.dumps(res)), copy.copy(res), copy.deepcopy(res)):
        assert other.end_s == res.end_s and other.steps == res.steps and other.placements == res.placements
        assert repr(other.sequences) == repr(res.sequences)


def test_a_cached_prefix_skips_its_prefill_but_holds_its_blocks():
    """A request whose first 4000 prompt tokens a prefix cache holds computes only the other
    96 in its prefill step (an earlier first token: a long prefill is compute-bound), and
    holds KV blocks for all 4096."""
    from reasonserve.policies import FCFSPolicy

    config = SimConfig(num_instances=1, model="qwen2.5-7b", block_size=16, skip_quiet_steps=False)
    seen = []

    class Recorder(FCFSPolicy):
        def decide(self, view):
            seen.append([(r.request_id, r.num_computed_tokens, r.num_blocks) for r in view.running])
            return super().decide(view)

    runs = {}
    for cached in (0, 4000):
        seen.clear()
        res = simulate([SimRequest("r", 0.0, 4096, 4, 0, cached_tokens=cached)], config, Recorder)
        runs[cached] = res.sequences[0].first_token_s
        assert seen[1] == [("r", 4096, 256)]  # after the prefill step: every prompt token, 256 blocks
    cost = config.cost_model()
    assert runs[0] == cost.step_s([(4096, 0)]) and runs[4000] == cost.step_s([(96, 4000)]) < runs[0]
    with pytest.raises(InvalidArgumentError, match="cached_tokens"):
        SimRequest("r", 0.0, 128, 4, 0, cached_tokens=128)
