"""The early-exit interface: observations, decisions, and online == offline replay."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.certainindex.stopping import (
    SIGNALS,
    AgreeSpanRule,
    ProbeObservation,
    StopDecision,
    default_rule,
)
from reasonserve.core import InvalidArgumentError
from reasonserve.core.errors import InvalidTypeError
from reasonserve.replay.probe_rules import TokenWindowRule, evaluate, online_first_stop
from reasonserve.replay.probe_runs import Trajectory, _runs


def _feed(rule, stream):
    state = rule.start()
    return [state.observe(ProbeObservation(*obs)) for obs in stream]


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"position": -1, "answer": "1"}, InvalidArgumentError),
        ({"position": 1.5, "answer": "1"}, InvalidArgumentError),
        ({"position": math.nan, "answer": "1"}, InvalidArgumentError),
        ({"position": True, "answer": "1"}, InvalidArgumentError),
        ({"position": 64, "answer": 3}, InvalidTypeError),
        ({"position": 64, "answer": "1", "text": None}, InvalidTypeError),
        ({"position": 64, "answer": "1", "answer_logprobs": [-0.1]}, InvalidTypeError),
        ({"position": 64, "answer": "1", "answer_logprobs": (math.nan,)}, InvalidArgumentError),
        ({"position": 64, "answer": "1", "answer_logprobs": (0.5,)}, InvalidArgumentError),
        ({"position": 64, "answer": "1", "think_end_logprob": math.inf}, InvalidArgumentError),
        ({"position": 64, "answer": "1", "budget_tokens": 0}, InvalidArgumentError),
        ({"position": 64, "answer": "1", "budget_tokens": 1024.0}, InvalidArgumentError),
        ({"position": 64, "answer": "1", "budget_tokens": True}, InvalidArgumentError),
    ],
)
def test_observation_rejects_bad_fields(kwargs, error):
    with pytest.raises(error):
        ProbeObservation(**kwargs)


def test_agree_span_rule_counts_tokens_and_skips_hesitant_probes():
    rule = AgreeSpanRule(tokens=192, min_tokens=0)  # 3 probes of 64 tokens
    assert rule.requires <= SIGNALS and "probe_text" in rule.requires
    stream = [(64, "5"), (128, "7"), (192, "7", "7} wait"), (256, "7.0"), (320, "7")]
    out = _feed(rule, stream)
    assert [d.stop for d in out] == [False, False, False, False, True]  # the hesitant probe is not counted
    assert out[-1] == StopDecision(True, "7", 1.0)
    assert out[1].certainty == pytest.approx(1 / 3)
    # Without hesitation gating the third probe counts and the rule stops one probe earlier.
    plain = _feed(AgreeSpanRule(tokens=192, min_tokens=0, hesitation=False), stream)
    assert [d.stop for d in plain] == [False, False, False, True, True]
    # No stop before min_tokens; a window of k probes whatever the interval.
    assert not any(d.stop for d in _feed(AgreeSpanRule(tokens=192, min_tokens=400), stream))
    assert [d.stop for d in _feed(AgreeSpanRule(k_probes=2, min_tokens=0, hesitation=False), stream)][:3] == [
        False, False, True]  # fmt: skip


def test_agree_span_rule_validates():
    with pytest.raises(InvalidArgumentError):
        AgreeSpanRule(tokens=-1)
    with pytest.raises(InvalidArgumentError):
        AgreeSpanRule(tokens=0, k_probes=0)
    assert default_rule().name and default_rule().requires <= SIGNALS


def _trajectory(answers, texts, positions, interval=0):
    from reasonserve.certainindex.answers.equivalence import AnswerClasses

    classes = AnswerClasses()
    raw = [classes.add(a) for a in answers]
    hesitant = [any(w in t.split() for w in ("wait", "but")) for t in texts]
    counted = [-1 if h else c for c, h in zip(raw, hesitant, strict=True)]
    run_at, current_at = _runs(counted)
    correct = tuple(classes.representative(c) == "1" for c in range(len(classes)))
    return Trajectory(("d", "0", "0"), "m__d__s", "1", positions[-1] + 10 if positions else 10, -1, False, False,
                      tuple(positions), tuple(counted), tuple(raw), correct, run_at, current_at,
                      interval=interval, answers=tuple(answers), texts=tuple(texts))  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["1", "2", "3", None]), st.sampled_from(["", "x} wait", "x} ok"])), max_size=40),
    st.sampled_from([64, 128]),
    st.sampled_from([64, 192, 640]),
    st.sampled_from([0, 256]),
)
def test_online_rule_equals_the_offline_token_window(probes, interval, span, min_tokens):
    answers = [a for a, _ in probes]
    texts = [t for _, t in probes]
    tr = _trajectory(answers, texts, [interval * (i + 1) for i in range(len(probes))])
    assert online_first_stop(AgreeSpanRule(span, min_tokens), tr) == TokenWindowRule(span, min_tokens).first_stop(tr)
    a = evaluate(AgreeSpanRule(span, min_tokens), [tr])
    b = evaluate(TokenWindowRule(span, min_tokens), [tr])
    assert (a.cost, a.correct) == (b.cost, b.correct)
