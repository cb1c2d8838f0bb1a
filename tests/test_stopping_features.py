"""Each early-exit feature on hand-made probe streams."""

import math

import pytest

from reasonserve.certainindex.stopping import ProbeObservation
from reasonserve.certainindex.stopping.features import FEATURE_NAMES, FeatureState, text_features
from reasonserve.core.errors import InvalidArgumentError


def _run(stream):
    state = FeatureState()
    out = [dict(zip(FEATURE_NAMES, state.update(ProbeObservation(**obs)), strict=True)) for obs in stream]
    return state, out


def test_answer_history_features():
    answers = ["5", "5", "7", "7.0", "7"]  # 7.0 is the same answer as 7
    state, out = _run([{"position": 64 * (i + 1), "answer": a} for i, a in enumerate(answers)])
    last = out[-1]
    assert state.current_answer == "7"
    assert last["log_position"] == pytest.approx(math.log1p(320 / 1024))
    assert last["log_run_tokens"] == pytest.approx(math.log1p(192 / 1024))  # held over 3 probes of 64 tokens
    assert last["run_fraction"] == pytest.approx(192 / 320)
    assert last["share"] == pytest.approx(3 / 5)
    assert last["log_distinct"] == pytest.approx(math.log1p(2))
    assert last["change_rate"] == pytest.approx(1 / 5)
    assert last["log_age"] == pytest.approx(math.log1p(128 / 1024))  # 7 first seen at 192
    assert last["run_jump"] == pytest.approx(math.log1p(3 / 3))  # run 3 against the earlier run of 2
    assert last["recent_distinct"] == pytest.approx(2 / 16)
    assert out[1]["change_rate"] == 0 and out[2]["change_rate"] == pytest.approx(1 / 3)
    assert all(o["answered"] == 1 and o["recent_empty"] == 0 for o in out)


def test_empty_probes_count_as_unanswered_and_keep_the_run():
    _, out = _run([{"position": 64, "answer": "3"}, {"position": 128, "answer": None}, {"position": 192, "answer": ""}])
    assert [o["answered"] for o in out] == [1, 0, 0]
    assert out[-1]["recent_empty"] == pytest.approx(2 / 3)
    assert out[-1]["share"] == 1.0 and out[-1]["log_run_tokens"] == pytest.approx(math.log1p(192 / 1024))


def test_run_jump_grows_with_the_run_against_churn():
    churn = ["1", "2", "3", "4", "5", "5", "5", "5", "5", "5"]
    _, out = _run([{"position": 64 * (i + 1), "answer": a} for i, a in enumerate(churn)])
    assert out[-1]["run_jump"] == pytest.approx(math.log1p(6 / 2))
    assert out[-1]["log_distinct"] == pytest.approx(math.log1p(5))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("42} \\]\n\n**Final", (0.0, 1.0, 0.0)),  # the display closes and the answer is restated: ends the thought
        ("42}</think>", (0.0, 1.0, 0.0)),
        ("42}", (0.0, 1.0, 0.0)),  # end of text
        ("42} \\]\n\nWait, let me check", (1.0, 0.0, 1.0)),
        ("42}. But the", (1.0, 0.0, 1.0)),
        ("\\frac{1}{2}} \\]\n\nLet me verify", (0.0, 0.0, 1.0)),  # nested braces: the answer ends at the 3rd }
        ("42 and more", (0.0, 0.0, 0.0)),  # no closing brace: nothing after the answer
        ("hmm 4", (1.0, 0.0, 0.0)),
    ],
)
def test_probe_text_features(text, expected):
    assert text_features(text) == expected


def test_probe_text_features_are_zero_without_text():
    _, out = _run([{"position": 64, "answer": "4"}, {"position": 128, "answer": "4", "text": "4} wait"}])
    assert (out[0]["text_seen"], out[0]["hesitant"], out[0]["reopens"]) == (0, 0, 0)
    assert (out[1]["text_seen"], out[1]["hesitant"], out[1]["reopens"]) == (1, 1, 1)


def test_reasoning_text_features():
    stream = [
        {"position": 64, "answer": "7", "reasoning_tail": "Wait, hmm. Alternatively we could add them up here."},
        {"position": 128, "answer": "7", "reasoning_tail": "So the answer is 7. Let me verify: 3 + 4 = 7."},
        {"position": 192, "answer": "8", "reasoning_tail": "So the answer is 7. Let me verify: 3 + 4 = 7."},
        {"position": 256, "answer": "8", "reasoning_tail": "That fails. Let me try another approach."},
        {"position": 320, "answer": "8", "reasoning_tail": "We get \\boxed{8}, which checks out."},
    ]
    _, out = _run(stream)
    assert out[0]["tail_seen"] == 1 and out[0]["tail_hesitation"] == pytest.approx(100 * 3 / 9)
    assert out[1]["tail_verifies"] == 1  # "answer is 7" then a check, and the probe says 7
    assert out[2]["tail_verifies"] == 0  # the probe says 8: the verified answer is not the probe's
    assert out[3]["tail_new_approach"] == 1 and out[1]["tail_new_approach"] == 0
    assert out[4]["tail_verifies"] == 1  # a boxed 8, then "checks out"
    _, bare = _run([{"position": 64, "answer": "7"}])
    assert bare[0]["tail_seen"] == 0 and bare[0]["tail_hesitation"] == 0


def test_logprob_features_for_hosts_that_give_them():
    obs = {"position": 64, "answer": "12", "answer_logprobs": (math.log(0.5), math.log(0.5)),
           "think_end_logprob": math.log(0.25)}  # fmt: skip
    _, out = _run([obs, {"position": 128, "answer": "12"}])
    assert out[0]["logprob_seen"] == 1
    assert out[0]["answer_confidence"] == pytest.approx(0.5)  # geometric mean token probability (DEER)
    assert out[0]["think_end_prob"] == pytest.approx(0.25)
    assert (out[1]["logprob_seen"], out[1]["answer_confidence"], out[1]["think_end_prob"]) == (0, 0, 0)
    _, only_end = _run([{"position": 64, "answer": "1", "think_end_logprob": 0.0}])
    assert only_end[0]["think_end_prob"] == 1.0 and only_end[0]["answer_confidence"] == 0


def test_mode_gap_is_the_current_answers_lag_behind_the_most_frequent():
    _, out = _run([{"position": 64 * (i + 1), "answer": a} for i, a in enumerate(["5", "5", "5", "7", "5"])])
    assert [o["mode_gap"] for o in out] == [0, 0, 0, pytest.approx(-2 / 4), 0]


def test_budget_features_and_the_last_probe_before_the_budget():
    state = FeatureState()
    stream = [ProbeObservation(p, "3", budget_tokens=320) for p in (64, 128, 192, 256)]
    out = [dict(zip(FEATURE_NAMES, state.update(obs), strict=True)) for obs in stream[:3]]
    assert [o["budget_seen"] for o in out] == [1, 1, 1]
    assert out[2]["budget_fraction"] == pytest.approx(192 / 320)
    assert not state.at_budget_end(stream[2])  # 192 + 64 < 320: one more probe fits
    state.update(stream[3])
    assert state.at_budget_end(stream[3])  # 256 + 64 reaches the budget
    unknown = FeatureState()
    x = dict(zip(FEATURE_NAMES, unknown.update(ProbeObservation(10_000, "3")), strict=True))
    assert (x["budget_seen"], x["budget_fraction"]) == (0, 0)
    assert not unknown.at_budget_end(ProbeObservation(10_000, "3"))
    over = FeatureState()  # past the budget (a host that overshoots): the share is capped at 1
    assert dict(zip(FEATURE_NAMES, over.update(ProbeObservation(900, "3", budget_tokens=640)),
                    strict=True))["budget_fraction"] == 1.0  # fmt: skip


def test_hostile_text_is_bounded():
    _, out = _run([{"position": 64, "answer": "{" * 50_000, "text": "{" * 200_000 + "}", "reasoning_tail": "wait " * 100_000}])
    assert out[0]["text_seen"] == 1 and math.isfinite(out[0]["tail_hesitation"])


@pytest.mark.parametrize("positions", [(5000, 100), (5000, 10000, 100), (3000, 0)])
def test_a_decreasing_position_is_a_typed_error_not_a_math_domain_error(positions):
    state = FeatureState()
    for p in positions[:-1]:
        state.update(ProbeObservation(p, "7", "7}", "so"))
    with pytest.raises(InvalidArgumentError, match="must not decrease"):
        state.update(ProbeObservation(positions[-1], "7", "7}", "so"))
    equal = FeatureState()  # the same position twice is allowed
    assert equal.update(ProbeObservation(64, "7")) and equal.update(ProbeObservation(64, "7"))
