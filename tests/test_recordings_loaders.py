"""Recording loaders on recordings from elsewhere: other models, missing optional fields,
empty files and malformed ones. What a loader accepts it reads as the format says; what
it cannot read is an InvalidArgumentError naming the file (and line), never a traceback
from deep inside it, and never a question whose per-sample fields disagree in length."""

import json
import math

import pytest

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.recordings import load_mcts, load_prm_beams, load_samples, make_question


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _beam(completions, scores=None, answer="4", **extra):
    row = {"completions": completions, "answer": answer, **extra}
    if scores is not None:
        row["scores"] = scores
    return row


# PRM beams ------------------------------------------------------------------------------
def test_prm_beam_rewards_follow_the_aggregate_of_each_beams_step_scores(tmp_path):
    path = _jsonl(tmp_path / "b.jsonl", [_beam([r"\boxed{4}", r"\boxed{5}", r"\boxed{4}"],
                                               [[0.9, 0.2, 0.6], [0.5], [0.3, 0.4]], unique_id="q7")])  # fmt: skip
    by = {agg: load_prm_beams(path, aggregate=agg)[0].rewards for agg in ("last", "min", "mean", "product")}
    assert by["last"] == pytest.approx((0.6, 0.5, 0.4))
    assert by["min"] == pytest.approx((0.2, 0.5, 0.3))
    assert by["mean"] == pytest.approx(((0.9 + 0.2 + 0.6) / 3, 0.5, 0.35))
    assert by["product"] == pytest.approx((0.9 * 0.2 * 0.6, 0.5, 0.3 * 0.4))
    q = load_prm_beams(path)[0]
    assert q.qid == "q7" and q.classes == (0, 1, 0) and q.class_correct == (True, False)


def test_prm_beams_without_optional_fields_read_as_missing(tmp_path):
    """No ``scores`` and no ``unique_id`` (another recorder): rewards are NaN, the id is
    the question's index; an empty file has no questions."""
    path = _jsonl(tmp_path / "b.jsonl", [_beam([r"\boxed{1}"], answer="1"), _beam([r"\boxed{2}", "no box"])])
    qs = load_prm_beams(path)
    assert [q.qid for q in qs] == ["0", "1"]
    assert all(math.isnan(r) for q in qs for r in q.rewards)
    assert qs[1].classes == (0, -1) and len(qs[1].rewards) == 2
    (tmp_path / "empty.jsonl").write_text("")
    assert load_prm_beams(tmp_path / "empty.jsonl") == []


def test_a_beam_without_a_finite_step_score_has_a_missing_reward_not_zero(tmp_path):
    """A reward of 0 would be a (bad) score; a beam whose steps are all NaN/None/text has no
    score at all, like one without steps."""
    path = _jsonl(tmp_path / "b.jsonl", [_beam(["a", "b", "c"], [[None, "x"], [], [0.0]])])
    rewards = load_prm_beams(path)[0].rewards
    assert math.isnan(rewards[0]) and math.isnan(rewards[1]) and rewards[2] == 0.0
    path.write_text('{"completions": ["a"], "answer": "1", "scores": [[NaN, Infinity]]}\n')
    assert math.isnan(load_prm_beams(path)[0].rewards[0])


def test_a_beam_scored_by_one_number_takes_that_number(tmp_path):
    path = _jsonl(tmp_path / "b.jsonl", [_beam(["a", "b"], [0.25, [0.5, 0.75]])])
    assert load_prm_beams(path)[0].rewards == (0.25, 0.75)


@pytest.mark.parametrize(
    ("row", "why"),
    [
        (_beam(r"\boxed{4}"), "completions"),  # a string, not a list of completions
        (_beam([r"\boxed{4}", "x"], [[0.5]]), "scores"),  # one score list for two beams
        (_beam(["x"], {"0": [0.5]}), "scores"),
        (_beam(["x"], [{"step": 0.5}]), "scores"),
        ({"completions": ["x"]}, "answer"),
    ],
)
def test_malformed_prm_rows_name_the_file_and_line(tmp_path, row, why):
    path = _jsonl(tmp_path / "b.jsonl", [_beam(["ok"]), row])
    with pytest.raises(InvalidArgumentError, match=rf"b\.jsonl:2: .*{why}"):
        load_prm_beams(path)


# self-consistency samples ---------------------------------------------------------------
def test_sc_samples_from_another_model_without_optional_fields(tmp_path):
    rows = [{"gt": "3", "pred": ["3", "3.0", None, 7]},  # no idx, no scores, no lengths
            {"idx": 9, "gt": "1/2", "pred": ["0.5", "2"], "pred_score": [[0.1, 0.9], None],
             "response": ["a b c", 5]}]  # fmt: skip
    q0, q1 = load_samples(_jsonl(tmp_path / "s.jsonl", rows))
    assert q0.qid == "0" and q0.classes == (0, 0, -1, -1) and q0.class_correct == (True,)
    assert all(math.isnan(r) for r in q0.rewards) and q0.lengths == ()
    assert q1.qid == "9" and q1.class_correct == (True, False)
    assert q1.rewards[0] == 0.9 and math.isnan(q1.rewards[1])
    assert q1.lengths[0] == 3.0 and math.isnan(q1.lengths[1])


def test_sc_scores_and_lengths_that_do_not_fit_read_as_missing(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(
        '{"gt": "1", "pred": ["1", "2", "3"], "pred_score": [Infinity, "x", 0.5], "tokens": [10, 20],'
        ' "response": ["a b", "c", "d e f"]}\n{"gt": "1", "pred": ["1"], "tokens": [NaN]}\n'
    )
    q0, q1 = load_samples(path)
    assert math.isnan(q0.rewards[0]) and math.isnan(q0.rewards[1]) and q0.rewards[2] == 0.5
    assert q0.lengths == (2.0, 1.0, 3.0)  # two token counts for three samples: the words instead
    assert len(q1.lengths) == 1 and math.isnan(q1.lengths[0])


def test_make_question_refuses_rewards_of_another_length():
    with pytest.raises(InvalidArgumentError, match="rewards"):
        make_question("q", ["1", "2"], [0.5], "1")
    assert make_question("q", ["1", "2"], [0.5, 0.1], "1").classes == (0, 1)


# rStar MCTS answer sheets ---------------------------------------------------------------
def _sheets(tmp_path, answer, rollouts, qid="Question 0000"):
    root = tmp_path / "run" / "answer_sheets"
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{qid} - Answer.json").write_text(answer if isinstance(answer, str) else json.dumps(answer))
    if rollouts is not None:
        text = rollouts if isinstance(rollouts, str) else json.dumps(rollouts)
        (root / f"{qid} - Rollout Solutions.json").write_text(text)
    return tmp_path / "run"


def _rollout(rid, text, key="direct_answer", steps=("0",)):
    trace = {s: {"ost_step": {}} for s in steps}
    trace[steps[-1]] = {key: text}
    return {"rollout_id": rid, "trace": trace}


def test_mcts_rollouts_read_the_last_node_in_rollout_order(tmp_path):
    rollouts = [
        _rollout(2, "{'text': 'so the answer is (C)', 'value': 0.25}", steps=("0", "1", "10")),
        _rollout(0, "{'text': 'The answer is: B', 'value': 1e-3}"),
        _rollout(1, r"{'text': 'we get \boxed{B}', 'value': -0.5}", key="subanswer"),
        {"rollout_id": 3, "trace": {}},  # ended without an answer
    ]
    (q,) = load_mcts(_sheets(tmp_path, {"gold_answer": "B"}, rollouts))
    assert q.qid == "Question 0000"
    assert q.classes == (0, 0, 1, -1) and q.class_correct == (True, False)
    assert q.rewards[:3] == (1e-3, -0.5, 0.25) and math.isnan(q.rewards[3])


def test_the_last_choice_and_the_last_value_of_the_final_node_count(tmp_path):
    text = "{'text': 'The answer is (A)? No: the answer is D', 'value': 0.2, 'next': {'value': 0.9}}"
    (q,) = load_mcts(_sheets(tmp_path, {"gold_answer": "D"}, [_rollout(0, text)]))
    assert q.classes == (0,) and q.class_correct == (True,) and q.rewards == (0.9,)


def test_a_malformed_node_value_is_missing_not_a_crash(tmp_path):
    rollouts = [_rollout(0, "{'text': 'The answer is A', 'value': 1.2.3}"),
                _rollout(1, "{'text': 'The answer is A', 'value': ...}"),
                _rollout(2, "{'text': 'The answer is A', 'value': 0.5}")]  # fmt: skip
    (q,) = load_mcts(_sheets(tmp_path, {"gold_answer": "A"}, rollouts))
    assert math.isnan(q.rewards[0]) and math.isnan(q.rewards[1]) and q.rewards[2] == 0.5


def test_an_empty_answer_sheets_folder_has_no_questions(tmp_path):
    (tmp_path / "run" / "answer_sheets").mkdir(parents=True)
    assert load_mcts(tmp_path / "run") == []


@pytest.mark.parametrize(
    ("answer", "rollouts", "why"),
    [
        ("{not json", [], "Answer.json"),
        ("[" * 100_000, [], "Answer.json"),
        ({"problem": "x"}, [], "gold_answer"),
        ({"gold_answer": "A"}, None, "Rollout Solutions"),  # the rollouts file is missing
        ({"gold_answer": "A"}, {"rollout_id": 0}, "Rollout Solutions"),  # not a list
        ({"gold_answer": "A"}, ["x"], "Rollout Solutions"),
        ({"gold_answer": "A"}, [{"rollout_id": "first", "trace": {}}], "rollout_id"),
        ({"gold_answer": "A"}, [{"rollout_id": 0, "trace": {"last": {}}}], "trace"),
        ({"gold_answer": "A"}, [{"rollout_id": 0, "trace": ["x"]}], "trace"),
        ({"gold_answer": "A"}, [{"rollout_id": 0, "trace": {"0": "x"}}], "trace"),
    ],
)
def test_malformed_answer_sheets_name_the_file(tmp_path, answer, rollouts, why):
    with pytest.raises(InvalidArgumentError, match=rf"Question 0000.*{why}|{why}.*Question 0000"):
        load_mcts(_sheets(tmp_path, answer, rollouts))
