"""Calibration with cross-validation, and the replay commands on small synthetic data."""

import csv
import dataclasses
import gzip
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.certainindex.calibration import Outcome, choose, cross_validate
from reasonserve.cli import main
from reasonserve.core import InvalidArgumentError
from reasonserve.replay import probes, sc
from reasonserve.replay.probe_rules import OracleRule, TargetOracleRule, TokenWindowRule, WindowRule, evaluate
from reasonserve.replay.probe_runs import Trajectory, _runs, load_run


def _outcome(correct, cost):
    return Outcome(10, correct, cost, 8, 100)


def test_choose_maximizes_savings_within_tolerance():
    table = {"a": _outcome(8, 90), "b": _outcome(8, 60), "c": _outcome(7, 10)}
    best, out = choose(list(table), lambda c, _: table[c], [], tolerance=0.0)
    assert best == "b" and out.savings == pytest.approx(0.4)
    best, _ = choose(list(table), lambda c, _: table[c], [], tolerance=0.1)
    assert best == "c"
    with pytest.raises(InvalidArgumentError):
        choose([], lambda c, _: table[c], [], 0.0)


def test_cross_validation_scores_each_fold_with_a_choice_made_elsewhere():
    seen = []

    def evaluate_(cand, items):
        seen.append((cand, tuple(items)))
        return Outcome(len(items), sum(items) * cand, float(len(items)), sum(items), 2.0 * len(items))

    cv = cross_validate([1, 0], evaluate_, [[1, 1], [0, 1]], tolerance=0.0)
    assert cv.choices == [1, 1]
    assert cv.pooled.n == 4
    with pytest.raises(InvalidArgumentError):
        cross_validate([1], evaluate_, [[1]], 0.0)


def _trajectory(classes, positions, final_class, correct, tokens=1000):
    run_at, current_at = _runs(list(classes))
    return Trajectory(("d", "0", "0"), "m__d__s", "t", tokens, final_class, correct[final_class] if final_class >= 0 else False,
                      True, tuple(positions), tuple(classes), tuple(classes), tuple(correct), run_at, current_at)  # fmt: skip


@settings(max_examples=200)
@given(st.lists(st.integers(-1, 2), min_size=1, max_size=30), st.integers(1, 5), st.sampled_from([0, 256, 1024]))
def test_window_rule_fast_path_equals_the_estimator(classes, window, min_tokens):
    tr = _trajectory(classes, [64 * (i + 1) for i in range(len(classes))], 0, (True, False, False))
    rule = WindowRule(window, 1.0, min_tokens)
    assert rule.first_stop(tr) == rule.first_stop_by_estimator(tr)


def test_oracle_and_evaluate_on_a_hand_trajectory():
    tr = _trajectory([1, 1, 0, 0, 0], [64, 128, 192, 256, 320], 0, (True, False), tokens=400)
    assert OracleRule().first_stop(tr) == (2, 0)
    assert WindowRule(2).first_stop(tr) == (1, 1)  # false consensus on the wrong answer
    out = evaluate(WindowRule(2), [tr])
    assert (out.accuracy, out.baseline_accuracy, out.cost) == (0.0, 1.0, 128)


def test_target_oracle_knows_the_right_answer():
    right_late = _trajectory([1, 1, 0, 0], [64, 128, 192, 256], 0, (True, False), tokens=400)
    assert TargetOracleRule().first_stop(right_late) == (2, 0)
    # Final answer wrong and no probe right: nothing to lose, exit at the first answered probe.
    hopeless = _trajectory([-1, 1, 1], [64, 128, 192], 1, (False, False), tokens=9000)
    assert TargetOracleRule().first_stop(hopeless) == (1, 1)
    # Final answer right although no probe was: run to the end.
    late_only = _trajectory([1, 1], [64, 128], 0, (True, False), tokens=300)
    assert TargetOracleRule().first_stop(late_only) is None
    out = evaluate(TargetOracleRule(), [right_late, hopeless, late_only])
    assert out.correct == 2 and out.cost == 192 + 128 + 300


def test_token_window_means_the_same_span_at_any_probe_interval():
    classes = [1, 1, 0, 0, 0, 0, 0, 0]
    tr64 = _trajectory(classes, [64 * (i + 1) for i in range(8)], 0, (True, False))
    tr128 = _trajectory(classes, [128 * (i + 1) for i in range(8)], 0, (True, False))
    assert tr64.probe_interval() == 64 and tr128.probe_interval() == 128
    assert TokenWindowRule(256).first_stop(tr64) == (5, 0)  # 4 agreeing probes
    assert TokenWindowRule(256).first_stop(tr128) == (1, 1)  # 2 probes: the opening answer already held 256
    assert TokenWindowRule(384).first_stop(tr64) == (7, 0)  # 6 agreeing probes
    assert TokenWindowRule(384).first_stop(tr128) == (4, 0)  # 3 agreeing probes
    # A recorded interval wins over the positions: 256 tokens of 32-token probes = 8 probes.
    assert TokenWindowRule(256).first_stop(dataclasses.replace(tr64, interval=32)) is None
    assert TokenWindowRule(256, min_tokens=448).first_stop(tr64) == (6, 0)
    assert TokenWindowRule(1).first_stop(tr64) == (0, 1)


def test_token_breakdown_shares_sum_to_one():
    a = _trajectory([0], [64], 0, (True,), tokens=100)
    b = dataclasses.replace(_trajectory([0], [64], 0, (False,), tokens=300), finished=False)
    out = probes.token_breakdown([a, b])
    assert out["end not recorded, right"]["token_share"] == 0.25
    assert out["hit the budget, wrong"] == {"trajectories": 1, "token_share": 0.75, "mean_tokens": 300.0}


def _write_probe_run(folder, n_problems=12, seed=0):
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    labels, rows = [], []
    for p in range(n_problems):
        target = str(p + 1)
        wrong = str(p + 100)
        settle = rng.randint(2, 8)
        n = settle + rng.randint(2, 10)
        for i in range(n):
            ans = wrong if i < settle else target
            rows.append(["math500", p, 0, 64 * (i + 1), ans, "", True])
        labels.append({"problem_id": p, "rollout_id": 0, "dataset": "math500", "target": target,
                       "final_answer": target, "final_correct": True, "tokens_used": 64 * n + 30,
                       "finished_naturally": True})  # fmt: skip
    with gzip.open(folder / "probes.csv.gz", "wt", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["dataset", "problem_id", "rollout_id", "token_position", "probe_answer", "probe_text", "is_certain"])
        w.writerows(rows)
    (folder / "labels.jsonl").write_text("\n".join(json.dumps(x) for x in labels) + "\n")
    (folder / "meta.json").write_text("{}")


def test_replay_probes_on_synthetic_runs(tmp_path):
    for i, name in enumerate(["m1__math500__seed_1", "m2__math500__seed_1", "m1__amc23__seed_2"]):
        _write_probe_run(tmp_path / "probes" / name, seed=i)
    trajs = load_run(tmp_path / "probes" / "m1__math500__seed_1")
    assert len(trajs) == 12 and all(t.final_correct for t in trajs)
    assert {t.interval for t in trajs} == {0} and {t.probe_interval() for t in trajs} == {64}  # meta: {}
    (tmp_path / "probes" / "m1__amc23__seed_2" / "meta.json").write_text('{"probe_interval_tokens": 128}')
    assert {t.interval for t in load_run(tmp_path / "probes" / "m1__amc23__seed_2")} == {128}
    out = tmp_path / "report.json"
    assert main(["replay", "probes", "--data", str(tmp_path), "--json", str(out), "--png", str(tmp_path / "p.png")]) == 0
    report = json.loads(out.read_text())
    for key in ("baseline_accuracy", "accuracy", "baseline_cost", "cost", "savings"):
        assert key in report
    assert report["baseline_accuracy"] == 1.0
    assert report["rules"]["oracle (context)"]["accuracy"] == 1.0
    assert 0 < report["rules"]["oracle (context)"]["savings"] < 1
    # Every probe after `settle` is right, so knowing the target saves at least as much.
    target = report["rules"]["target oracle (context)"]
    assert target["accuracy"] == 1.0 and target["savings"] >= report["rules"]["oracle (context)"]["savings"]
    assert report["token_breakdown"]["finished, right"]["token_share"] == 1.0
    assert (tmp_path / "p.png").stat().st_size > 0


def test_recorded_probe_text_is_read_with_our_probe_rule(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    rows = [  # the recorder's probe_answer is lossy where the raw text shows more
        ["math500", 0, 0, 64, "p", "a + b + p} \\]\n\nWait", True],
        ["math500", 0, 0, 128, "12^{", "12^{\\text{th}}} \\]", True],
        ["math500", 0, 0, 192, "7", "", True],  # no text recorded: the recorded answer
        ["math500", 0, 0, 256, "9", "9", True],  # text without a closing brace: no answer
    ]
    with gzip.open(folder / "probes.csv.gz", "wt", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["dataset", "problem_id", "rollout_id", "token_position", "probe_answer", "probe_text", "is_certain"])
        w.writerows(rows)
    label = {"problem_id": 0, "rollout_id": 0, "dataset": "math500", "target": "12", "final_answer": "12",
             "final_correct": True, "tokens_used": 300, "finished_naturally": True}  # fmt: skip
    (folder / "labels.jsonl").write_text(json.dumps(label) + "\n")
    (tr,) = load_run(folder)
    assert tr.raw_classes == (0, 1, 2, -1)
    assert [tr.class_correct[c] for c in tr.raw_classes[:3]] == [False, True, False]  # 12^{th} is 12


def test_load_run_rejects_a_folder_without_probes(tmp_path):
    with pytest.raises(InvalidArgumentError, match=r"probes\.csv\.gz"):
        load_run(tmp_path)


def _write_sc(path, n=20, seed=0):
    rng = random.Random(seed)
    with open(path, "w") as fh:
        for q in range(n):
            gt = str(q)
            preds = [gt if rng.random() < 0.7 else str(q + 50 + rng.randint(0, 2)) for _ in range(8)]
            scores = [[4.0 if p == gt else 1.0] for p in preds]
            fh.write(json.dumps({"idx": q, "gt": gt, "pred": preds, "pred_score": scores}) + "\n")


def test_replay_sc_on_synthetic_samples(tmp_path):
    path = tmp_path / "s.jsonl"
    _write_sc(path)
    report = sc.replay_sc(path)
    rules = report["rules"]
    assert rules["first sample"]["cost"] == 1.0 and rules["majority of all (baseline)"]["cost"] == 8.0
    for key in ("baseline_accuracy", "accuracy", "baseline_cost", "cost", "savings"):
        assert key in report
    # Rewards here identify a correct first sample exactly, so calibration must use them.
    assert "reward>=" in report["chosen"]
    assert report["cost"] < 8.0
    gated = next(v for k, v in rules.items() if k.startswith("reward >= median"))
    assert gated["accuracy"] >= rules["first sample"]["accuracy"]
    out = tmp_path / "sc.json"
    assert main(["replay", "sc", "--samples", str(path), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["questions"] == 20


def test_sc_loader_rejects_malformed_rows(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"idx": 0, "pred": ["1"]}) + "\n")
    with pytest.raises(InvalidArgumentError, match="gt"):
        sc.load_samples(path)


def test_run_folders_needs_something(tmp_path):
    with pytest.raises(InvalidArgumentError):
        probes.run_folders(None, str(tmp_path / "nothing*"), tmp_path)


def test_cot_text_probing_reads_complete_answers_only(tmp_path):
    from reasonserve.replay import cot

    words = " ".join(["step"] * 70)
    text = f"<think> {words} so the answer is 7. {words} maybe \\boxed{{8}} {words} </think> \\boxed{{8}}"
    tr = cot.trace_trajectory(("d", "0", "0"), "r", text, "8", "8", interval_tokens=64)
    assert tr.positions[0] == 64 and tr.tokens_used > 200
    answers = [tr.current_at[i] for i in range(len(tr.positions))]
    assert answers[0] == -1  # nothing complete in the first 64 tokens
    assert tr.class_correct[answers[-1]] and not tr.class_correct[answers[1]]  # 7, later 8
    path = tmp_path / "t.jsonl"
    rows = [{"full_text": text, "target": "8", "final_answer": "8", "problem_id": i} for i in range(6)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert len(cot.load_traces(path)) == 6
    out = tmp_path / "cot.json"
    assert main(["replay", "cot", "--traces", str(path), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["baseline_accuracy"] == 1.0


def test_prm_and_mcts_loaders(tmp_path):
    from reasonserve.recordings import search as search_runs

    beams = tmp_path / "b.jsonl"
    rows = [{"answer": str(i), "completions": [f"\\boxed{{{i}}}", f"\\boxed{{{i + 1}}}", "no answer"],
             "scores": [[0.9, 0.8], [0.5, 0.2], []]} for i in range(6)]  # fmt: skip
    beams.write_text("\n".join(json.dumps(r) for r in rows))
    qs = search_runs.load_prm_beams(beams, aggregate="min")
    assert qs[0].classes == (0, 1, -1) and qs[0].class_correct == (True, False)
    assert qs[0].rewards[0] == pytest.approx(0.8) and qs[0].rewards[2] != qs[0].rewards[2]  # NaN
    sheets = tmp_path / "rstar" / "answer_sheets"
    sheets.mkdir(parents=True)
    for q in range(5):
        (sheets / f"Question {q:04d} - Answer.json").write_text(json.dumps({"gold_answer": "B"}))
        rollouts = [{"rollout_id": 1, "trace": {"0": {"direct_answer": "{'text': 'The answer is B.', 'value': 0.5}"}}},
                    {"rollout_id": 0, "trace": {"0": {"ost_step": "{}"}}}]  # fmt: skip
        (sheets / f"Question {q:04d} - Rollout Solutions.json").write_text(json.dumps(rollouts))
    qs = search_runs.load_mcts(tmp_path / "rstar")
    assert qs[0].classes == (-1, 0) and qs[0].class_correct == (True,) and qs[0].rewards[1] == 0.5
    assert main(["replay", "mcts", "--run", str(tmp_path / "rstar")]) == 0
    assert main(["replay", "prm", "--beams", str(beams)]) == 0
