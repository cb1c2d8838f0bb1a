"""Hosts that return log-probabilities: DEER-style answer confidence and P(``</think>``).

The development recordings have no log-probabilities, so the shipped rule gives them
weight 0. A host that records them adds the columns ``answer_logprobs`` (a JSON list)
and ``think_end_logprob`` to ``probes.csv.gz``; replay hands them to the rules, the
training fits on them, and the rule fitted there reads them online exactly as offline.
"""

import csv
import gzip
import json
import math
import random

import numpy as np
import pytest

from reasonserve.certainindex.stopping import ProbeObservation
from reasonserve.certainindex.stopping.features import FEATURE_NAMES
from reasonserve.core import InvalidArgumentError
from reasonserve.replay import stop_training
from reasonserve.replay.probe_rules import evaluate, online_first_stop
from reasonserve.replay.probe_runs import load_run
from test_stopping_learned import one_feature_rule

HEADER = ["dataset", "problem_id", "rollout_id", "token_position", "probe_answer", "probe_text", "is_certain",
          "answer_logprobs", "think_end_logprob"]  # fmt: skip


def _write_run(folder, n_problems=80, seed=0):
    """Answers churn at random between the target and wrong ones; only the log-probabilities tell:
    P(</think>) and the answer tokens' confidence are high exactly when the probe answer is right."""
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    rows, labels = [], []
    for p in range(n_problems):
        target, n = str(p + 1), rng.randint(8, 20)
        for i in range(n):
            right = rng.random() < 0.4
            answer = target if right else str(rng.randint(100, 110))
            confidence = rng.uniform(0.85, 0.99) if right else rng.uniform(0.2, 0.6)
            end = rng.uniform(0.5, 0.9) if right else rng.uniform(0.001, 0.05)
            lps = json.dumps([math.log(confidence)] * 2)
            rows.append(["math500", p, 0, 64 * (i + 1), answer, "", True, lps, repr(math.log(end))])
        labels.append({"problem_id": p, "rollout_id": 0, "dataset": "math500", "target": target,
                       "final_answer": target, "tokens_used": 64 * n + 30})  # fmt: skip
    with gzip.open(folder / "probes.csv.gz", "wt", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(HEADER)
        w.writerows(rows)
    (folder / "labels.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    (folder / "meta.json").write_text("{}")
    return folder


def test_recorded_logprobs_reach_the_rules_as_a_host_gives_them(tmp_path):
    trajs = load_run(_write_run(tmp_path / "m1__math500__s1"))
    obs = trajs[0].observations()
    assert all(o.answer_logprobs is not None and len(o.answer_logprobs) == 2 for o in obs)
    assert all(o.think_end_logprob is not None and o.think_end_logprob < 0 for o in obs)


def test_a_rule_fitted_on_recorded_logprobs_reads_them_and_online_equals_offline(tmp_path):
    trajs = load_run(_write_run(tmp_path / "m1__math500__s1", n_problems=400, seed=1))
    items = stop_training.streams(trajs)
    rule = stop_training.fit_rule(items, tolerance=0.02)
    assert "logprobs" in rule.requires
    weights = dict(zip(FEATURE_NAMES, rule.weights, strict=True))
    assert weights["think_end_prob"] > 0.5 and weights["answer_confidence"] > 0.5
    assert [online_first_stop(rule, t) for t in trajs] == [
        None if (j := int(np.searchsorted(stop_training._scores(rule, s), rule.threshold))) >= len(s.current)
        else (j, int(s.current[j])) for s in items]  # fmt: skip
    outcome = evaluate(rule, trajs)
    assert outcome.savings > 0.3 and outcome.accuracy_loss <= 0.02  # the signal is there, and it is used
    # Without the log-probabilities the same trajectories give the rule nothing to go on.
    blind = [t.__class__(**{**{f: getattr(t, f) for f in t.__slots__}, "answer_logprobs": (),
                            "think_end_logprobs": ()}) for t in trajs]  # fmt: skip
    assert evaluate(rule, blind).savings < outcome.savings / 2


def test_a_rule_on_p_think_end_alone_exits_when_the_model_would_end_its_thought():
    rule = one_feature_rule("think_end_prob")
    assert rule.requires == frozenset({"answers", "logprobs"})
    state = rule.start()
    decisions = [state.observe(ProbeObservation(64 * (i + 1), "5", think_end_logprob=math.log(p)))
                 for i, p in enumerate((0.01, 0.3, 0.7))]  # fmt: skip
    assert [d.stop for d in decisions] == [False, False, True] and decisions[-1].answer == "5"
    assert not rule.start().observe(ProbeObservation(64, "5")).stop  # not given: P reads 0


@pytest.mark.parametrize(
    "column, value",
    [
        ("answer_logprobs", "[0.5]"),
        ("answer_logprobs", "[NaN]"),
        ("answer_logprobs", '["x"]'),
        ("answer_logprobs", "{}"),
        ("answer_logprobs", "[-0.1"),
        ("think_end_logprob", "nan"),
        ("think_end_logprob", "0.3"),
        ("think_end_logprob", "abc"),
    ],
)
def test_a_malformed_logprob_names_the_file_row_and_column(tmp_path, column, value):
    folder = _write_run(tmp_path / "m1__math500__s1", n_problems=3)
    with gzip.open(folder / "probes.csv.gz", "at", newline="") as fh:
        row = dict(zip(HEADER, ["math500", 0, 0, 64, "1", "", True, "", ""], strict=True))
        row[column] = value
        csv.writer(fh).writerow([row[h] for h in HEADER])
    with pytest.raises(InvalidArgumentError, match=rf"probes\.csv\.gz:\d+: {column}: "):
        load_run(folder)


def test_empty_logprob_fields_are_not_recorded(tmp_path):
    folder = _write_run(tmp_path / "m1__math500__s1", n_problems=2)
    with gzip.open(folder / "probes.csv.gz", "at", newline="") as fh:
        csv.writer(fh).writerow(["math500", 0, 0, 32, "1", "", True, "", ""])
    first = load_run(folder)[0].observations()[0]
    assert first.position == 32 and first.answer_logprobs is None and first.think_end_logprob is None
