"""Reasoning programs in the simulator: ``programs.sc`` itself on a ``SimClient`` on the
cluster (:mod:`reasonserve.programs.recorded`) with recorded samples. Certainindex stops
programs early and frees their KV; nothing is lost or duplicated; runs are deterministic;
Dynasor's escalation bounds starvation under SJF; bad input raises typed errors. Recorded
data is only read (and the tests that need it skip) when ``../shared/data`` is there."""

import math
import pathlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reasonserve.certainindex.allocation import ProgramStatus, ThresholdPolicy
from reasonserve.certainindex.estimators.semantic_entropy import SemanticEntropy
from reasonserve.clients.sim import SimCluster
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.core.phase import Phase
from reasonserve.core.views import ProgramView, RequestView, SchedulerView
from reasonserve.policies.app_fifo import AppFIFOPolicy
from reasonserve.policies.dynasor import DynasorPolicy, DynasorState
from reasonserve.policies.lpm import LPMPolicy
from reasonserve.programs.recorded import run_recorded_sc, sc_rounds
from reasonserve.programs.sc import SelfConsistency
from reasonserve.recordings import make_question
from reasonserve.sim import SimConfig
from reasonserve.sim.programs.workload import (
    SCProgram,
    SCRecord,
    difficulty,
    load_sc_records,
    sc_program_workload,
)

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "sc_samples"
CONFIG = SimConfig(
    num_instances=1, hardware="h100", model="qwen2.5-7b", kv_capacity_tokens=2048, max_num_seqs=8
)
ROUNDS = sc_rounds(8, 5, ThresholdPolicy(0.7, detect_at=5, recheck_every=8, max_knob=8))


def _program(pid, arrival, answers, tokens, prompt=24):
    q = make_question(pid, list(answers), [math.nan] * len(answers), "1")
    return SCProgram(pid, arrival, prompt, q, tuple(tokens), difficulty(q))


def _simulate(programs, sc, policy=DynasorPolicy, config=CONFIG, **kwargs):
    """(rows by program id, the SimResult)."""
    res, rows = run_recorded_sc(programs, sc, SimCluster(config, policy, check_every_step=True), **kwargs)
    return {r["program_id"]: r for r in rows}, res


def test_certainindex_stops_a_settled_program_after_detection():
    settled = _program("a", 0.0, "11111222", [30, 40, 50, 60, 70, 80, 90, 100])
    split = _program("b", 0.0, "12345111", [30, 40, 50, 60, 70, 80, 90, 100])  # no 5 of them agree
    rows, res = _simulate([settled, split], ROUNDS)
    a, b = rows["a"], rows["b"]
    assert (a["issued"], a["samples"], a["certainty"]) == (5, 5, 1.0)  # the other 3 never issued
    assert b["issued"] == b["samples"] == 8
    # The certainty read at detect@5 is the replay's estimator on the first 5 answers (in
    # finish order: shortest first), below the threshold; after all 8 it is all of them.
    seen = SemanticEntropy().score([0, 1, 2, 3, 4])
    assert seen < 0.7 and ROUNDS.policy.grant(ProgramStatus(5, seen))
    assert b["certainty"] == SemanticEntropy().score([0, 1, 2, 3, 4, 0, 0, 0])
    assert {s.request_id for s in res.sequences} == {f"a/s{j}" for j in range(5)} | {
        f"b/s{j}" for j in range(8)
    }
    assert a["stopped_early"] and not b["stopped_early"]
    assert a["correct"] and a["tokens"] == 30 + 40 + 50 + 60 + 70


def test_early_stop_cancels_live_samples_and_frees_their_kv():
    eager = sc_rounds(8, allocation=ThresholdPolicy(0.7, detect_at=2, max_knob=8))
    prog = [_program("p", 0.0, "11111111", [20, 25] + [600] * 6)]
    rows, res = _simulate(prog, eager)
    end = rows["p"]["arrival_s"] + rows["p"]["latency_s"]
    stopped = [s for s in res.sequences if s.finish_reason == "stop"]
    assert len(stopped) == 6 and all(s.num_blocks == 0 and s.finished_s == end for s in stopped)
    assert all(s.num_output < 600 for s in stopped)  # cut short, not run out
    _, full = _simulate(prog, sc_rounds(8))
    assert res.end_s < full.end_s / 3  # the freed compute was really not spent


def test_program_views_carry_knob_certainty_and_done():
    seen = []

    class Spy:
        name = "spy"

        def __init__(self):
            self.inner = DynasorPolicy()

        def decide(self, view):
            seen.extend((view, p) for p in view.programs)
            return self.inner.decide(view)

    progs = [_program(f"q{i}", 0.1 * i, "11111112", [15 + 5 * j for j in range(8)]) for i in range(3)]
    _simulate(progs, ROUNDS, policy=Spy)
    assert seen and any(p.knob > 0 and p.certainty is not None for _, p in seen)
    for view, p in seen:
        live = {r.request_id for r in view.waiting + view.running if r.program_id == p.program_id}
        assert p.max_knob == 8 and p.knob + len(p.request_ids) <= 8 and set(p.request_ids) == live
        assert p.arrival_s == 0.1 * int(p.program_id[1:])


def test_dynasor_reads_remaining_knob_and_program_arrival():
    def req(rid, pid, now):
        return RequestView(rid, now, Phase.PREFILL, 8, 0, 0, blocks_needed=1, enqueued_s=now, program_id=pid)

    now = 200.0
    reqs = (req("x0", "X", now), req("y0", "Y", now), req("z0", "Z", now))
    programs = (ProgramView("X", ("x0",), now, 0, 8), ProgramView("Y", ("y0",), now, 0, 1),
                ProgramView("Z", ("z0",), now - 100.0, 3, 8))  # fmt: skip
    view = SchedulerView(now, reqs, (), 100, 16, 8, 100, programs=programs)
    keys = DynasorPolicy(starvation_bound_s=60.0).program_keys(view, DynasorState())
    assert keys["Y"] < keys["X"]  # X still has 7 unissued samples
    assert keys["Z"][0] == 0  # its newest round is fresh but the program arrived 100 s ago


def _workloads():
    prog = st.tuples(st.text("123", min_size=1, max_size=6), st.floats(0.0, 2.0),
                     st.lists(st.integers(1, 300), min_size=6, max_size=6))  # fmt: skip
    plan = st.builds(lambda cap, first, detect, th, use: sc_rounds(
        cap, min(first, cap), ThresholdPolicy(th, detect_at=detect) if use else None),
        st.integers(1, 6), st.integers(1, 6), st.integers(1, 4), st.floats(0.3, 1.0), st.booleans())  # fmt: skip
    return st.lists(prog, min_size=1, max_size=5), plan, st.sampled_from(["dynasor", "app_fifo", "lpm"])


POLICIES = {"dynasor": DynasorPolicy, "app_fifo": AppFIFOPolicy, "lpm": LPMPolicy}


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(*_workloads())
def test_no_request_lost_or_duplicated_and_deterministic(specs, sc, policy):
    progs = [_program(f"g{i}", t, ans, toks[: len(ans)]) for i, (ans, t, toks) in enumerate(specs)]
    config = SimConfig(num_instances=2, hardware="h100", model="qwen2.5-7b", kv_capacity_tokens=512,
                       max_num_seqs=4)  # fmt: skip
    rows, res = _simulate(progs, sc, POLICIES[policy], config)
    ids = [s.request_id for s in res.sequences]
    issued = {f"{pid}/s{j}" for pid, row in rows.items() for j in range(row["issued"])}
    assert len(ids) == len(set(ids)) and set(ids) == issued  # each issued request, once
    by_id = {p.program_id: p for p in progs}
    for pid, row in rows.items():
        cap = min(sc.max_samples, len(by_id[pid].sample_tokens))
        assert row["latency_s"] >= 0 and row["samples"] <= row["issued"] <= cap
    for s in res.sequences:
        assert s.num_blocks == 0 and s.status == "finished"
        row = rows[s.req.program_id]
        if s.finish_reason == "stop":  # only an early-stopped program's samples, at its stop
            assert row["arrival_s"] + row["latency_s"] == s.finished_s and row["stopped_early"]
        else:
            assert s.finish_reason == "length" and s.num_output == s.req.output_tokens
    rows2, res2 = _simulate(progs, sc, POLICIES[policy], config)
    assert rows2 == rows
    assert [(s.request_id, s.finished_s) for s in res2.sequences] == [
        (s.request_id, s.finished_s) for s in res.sequences
    ]


def _starvation_case(bound, gap, stream_s):
    """A big program L (4 samples) behind a stream of 1-sample programs that alone keeps a
    one-seat instance busy: approximate SJF always prefers the small ones. (The 32B model's
    steps are long: few steps, each program about 0.3 s.)"""
    progs = [_program("S000", 0.0, "1", [12]), _program("L", 0.001, "1111", [18] * 4)]
    progs += [_program(f"S{i:03d}", i * gap, "1", [12]) for i in range(1, int(stream_s / gap))]
    config = SimConfig(num_instances=1, hardware="h100", model="qwen2.5-32b", kv_capacity_tokens=4096,
                       max_num_seqs=1)  # fmt: skip
    _, res = _simulate(progs, sc_rounds(4), lambda: DynasorPolicy(starvation_bound_s=bound), config)
    first = min(s.first_token_s for s in res.sequences if s.req.program_id == "L")
    return first - 0.001, max(s.finished_s for s in res.sequences)


@settings(max_examples=50, deadline=None)
@given(st.floats(0.3, 1.5), st.floats(0.15, 0.28))  # a small program takes about 0.31 s: the stream fills the seat
def test_escalation_bounds_starvation_under_sjf(bound, gap):
    wait, _ = _starvation_case(bound, gap, stream_s=bound + 3.0)
    assert wait <= bound + 0.2  # escalated at the first step after the bound, then admitted
    starved, end = _starvation_case(1e6, gap, stream_s=bound + 3.0)  # no escalation: waits for the stream
    assert starved > bound + 2.0 and starved > end - 3.0


def test_invalid_programs_and_plans_raise_typed_errors():
    for bad in (
        lambda: sc_rounds(0),
        lambda: sc_rounds(4, first_round=0),
        lambda: sc_rounds(4, allocation=1),
        lambda: SelfConsistency(reward="mean"),
    ):
        with pytest.raises(InvalidArgumentError):
            bad()
    q = make_question("q", ["1", "2"], [math.nan] * 2, "1")
    with pytest.raises(InvalidArgumentError):
        SCProgram("p", 0.0, 8, q, (10,))  # one length for two samples
    with pytest.raises(InvalidArgumentError):
        _simulate([_program("p", 0.0, "1", [5]), _program("p", 1.0, "1", [5])], sc_rounds(1))
    with pytest.raises(InvalidArgumentError):
        sc_program_workload([], 1.0, 3, 0)


def test_same_seed_same_questions_at_every_rate():
    p = _program("q", 0.0, "12", [5, 6])
    records = [SCRecord(p.question, p.sample_tokens, p.prompt_tokens, True)] * 3
    slow, fast = sc_program_workload(records, 1.0, 20, 3), sc_program_workload(records, 4.0, 20, 3)
    assert [p.question.qid for p in slow] == [p.question.qid for p in fast]
    assert all(abs(a.arrival_s - 4 * b.arrival_s) < 1e-9 for a, b in zip(slow, fast, strict=True))


@pytest.mark.skipif(
    not (DATA / "qwen25math_math_cot_100_8samples_rm.jsonl").is_file(), reason="no recorded data"
)
def test_recorded_sc_files_load_with_lengths_and_difficulty():
    import json

    qwen = load_sc_records(DATA / "qwen25math_math_cot_100_8samples_rm.jsonl")
    assert len(qwen) == 100 and all(len(r.sample_tokens) == 8 and not r.tokens_recorded for r in qwen)
    rows = [json.loads(line) for line in (DATA / "qwen25math_math_cot_100_8samples_rm.jsonl").open()]
    recorded = [1 if all(r["score"]) else 3 if not any(r["score"]) else 2 for r in rows]
    agree = sum(difficulty(r.question) == d for r, d in zip(qwen, recorded, strict=True))
    assert agree >= 95  # our grading vs the recording's own correctness flags
    r1 = DATA / "r1-distill-qwen-7b_k8rollouts_math500+aime24.jsonl"
    if r1.is_file():
        first = json.loads(r1.open().readline())
        rec = load_sc_records(r1)[0]
        assert rec.tokens_recorded and list(rec.sample_tokens) == first["tokens"]


def test_sim_cli_runs_sc_programs_from_a_samples_file(tmp_path, capsys):
    import json

    from reasonserve.cli import main

    rows = [{"gt": "1", "pred": ["1"] * 5 + ["2"] * 3, "tokens": [30 + j for j in range(8)]},
            {"gt": "2", "pred": ["1", "2", "3", "4", "2", "2", "5", "2"], "tokens": [50] * 8}]  # fmt: skip
    (tmp_path / "sc.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    base = ["sim", "--data", str(tmp_path), "--sc-file", "sc.jsonl", "--requests", "6", "--rate", "2",
            "--instances", "1", "--model", "qwen2.5-7b", "--policy", "dynasor"]  # fmt: skip
    out = tmp_path / "out.json"
    assert main([*base, "--sc-threshold", "0.7", "--out", str(out)]) == 0
    progs = json.loads(out.read_text())["programs"]
    assert progs["programs"] == 6 and 5 <= progs["samples_per_program"] < 8 and progs["stopped_early"] > 0
    assert main([*base, "--out", str(out)]) == 0  # no threshold: every sample runs
    assert json.loads(out.read_text())["programs"]["samples_per_program"] == 8
    assert main([*base, "--sc-threshold", "0.7", "--sc-detect-at", "9"]) == 2
    assert "sc-detect-at" in capsys.readouterr().err


def test_program_metrics_deadline_is_scale_times_difficulty_times_base():
    from reasonserve.sim.programs.metrics import attainment, p90_scale, program_summary

    def row(lat, d):
        return {"latency_s": lat, "difficulty": d, "tokens": 10, "samples": 1, "stopped_early": False,
                "correct": True}  # fmt: skip

    rows = [row(10.0, 1), row(30.0, 3), row(50.0, 2), row(None, 1)] + [row(1.0, 1)] * 6
    assert attainment(rows, 0.1, 100.0) == 0.8  # 10 <= 10, 30 <= 30, 50 > 20, unfinished never
    assert p90_scale(rows, 100.0) == 0.25  # the 9th smallest need: 50 / (2 x 100)
    assert program_summary(rows, 100.0, (0.1,))["attainment"] == {"0.1": 0.8}
    with pytest.raises(InvalidArgumentError):
        attainment(rows, 0.1, 0.0)


def test_reward_certainindex_and_sequential_rounds():
    from reasonserve.certainindex.estimators.reward import RewardCertainty

    def prog(pid, rewards):
        q = make_question(pid, ["1"] * 4, rewards, "1")
        return SCProgram(pid, 0.0, 16, q, (20, 30, 40, 50), 1)

    one_by_one = SelfConsistency(samples_per_step=1, max_samples=4, policy=ThresholdPolicy(0.4, detect_at=3))
    progs = [prog("good", [0.9, 0.8, 0.7, 0.1]), prog("poor", [0.1, 0.1, 0.1, 0.9])]
    rows, res = _simulate(progs, one_by_one, reward=RewardCertainty("mean"))
    assert rows["good"]["issued"] == 3 and rows["good"]["certainty"] == pytest.approx(0.8)
    assert rows["poor"]["issued"] == 4
    by_id = {s.request_id: s for s in res.sequences}
    for j in range(1, 4):  # one rollout at a time: each starts when the one before finished
        assert by_id[f"poor/s{j}"].req.arrival_s == by_id[f"poor/s{j - 1}"].finished_s
    entropy, _ = _simulate(progs, one_by_one)  # without the rewards: every answer agrees, certain at 3
    assert entropy["poor"]["issued"] == 3 and entropy["poor"]["certainty"] == 1.0


@pytest.mark.skipif(not (DATA.parent / "mcts").is_dir(), reason="no recorded data")
def test_search_recordings_load_as_programs():
    from reasonserve.sim.programs.workload import load_search_records

    mcts = load_search_records("mcts", DATA.parent / "mcts" / "rstar_amc2024_llama31_8b_instruct")
    assert len(mcts) == 22 and all(len(r.sample_tokens) == len(r.question.classes) == 16 for r in mcts)
    beams = DATA.parent / "prm_beams" / "beam_Llama-3.1-8B-Instruct-AWQ_n3_math500q500.jsonl"
    if beams.is_file():
        prm = load_search_records("prm", beams)
        assert len(prm) == 500 and all(len(r.sample_tokens) == 3 for r in prm)
    with pytest.raises(InvalidArgumentError):
        load_search_records("rebase", beams)


@pytest.mark.parametrize(("tokens", "correct"), [((10, 40), False), ((40, 10), True)])
def test_a_tied_vote_goes_to_the_answer_that_finished_first(tokens, correct):
    # Sample 0 answers 2 (wrong), sample 1 answers 1 (right): one vote each.
    rows, _ = _simulate([_program("p", 0.0, "21", tokens)], sc_rounds(2))
    assert rows["p"]["samples"] == 2 and rows["p"]["correct"] is correct
