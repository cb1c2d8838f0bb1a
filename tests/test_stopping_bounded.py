"""A rule state's cost per probe is bounded, also on runs that churn through answers.

An answer seen before (after normalization) is a dictionary lookup; a new one is
compared with the representatives of at most ``MAX_COMPARED`` answer classes (the
latest), so a state never does more than that many equivalence checks per probe.
"""

import pytest

from reasonserve.certainindex.answers import equivalence
from reasonserve.certainindex.answers.equivalence import AnswerClasses
from reasonserve.certainindex.stopping import MAX_COMPARED, AgreeSpanRule, ProbeObservation, default_rule
from reasonserve.certainindex.stopping.features import FeatureState
from reasonserve.core import InvalidArgumentError


@pytest.fixture
def calls(monkeypatch):
    """Counts the equivalence checks ``AnswerClasses.add`` makes."""
    count = [0]
    real = equivalence.equivalent

    def counted(a, b, **kw):
        count[0] += 1
        return real(a, b, **kw)

    monkeypatch.setattr(equivalence, "equivalent", counted)
    return count


def test_a_new_answer_is_compared_with_at_most_max_compared_classes(calls):
    capped, free = AnswerClasses(max_compared=4), AnswerClasses()
    per_add = []
    for i in range(60):
        before = calls[0]
        capped.add(str(1000 + i))
        per_add.append(calls[0] - before)
    assert max(per_add) == 4 and per_add[:5] == [0, 1, 2, 3, 4]
    before = calls[0]
    for i in range(60):
        free.add(str(1000 + i))
    assert calls[0] - before == sum(range(60))  # unbounded: every class, every time
    # Below the bound nothing changes; an equal spelling is found at any age by lookup.
    assert [capped.add(str(1000 + i)) for i in range(60)] == list(range(60))
    assert capped.add("1/2") == 60 and capped.add("0.5") == 60  # within the latest 4: same class
    for i in range(5):
        capped.add(str(2000 + i))
    assert capped.add("2/4") == 66  # equal to class 60 only, now out of reach: a new class


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "4"])
def test_max_compared_is_validated(bad):
    with pytest.raises(InvalidArgumentError, match="max_compared"):
        AnswerClasses(max_compared=bad)


@pytest.mark.parametrize("state", [FeatureState, lambda: default_rule().start(), lambda: AgreeSpanRule().start()],
                         ids=["features", "shipped rule", "agree span"])  # fmt: skip
def test_rule_states_do_at_most_max_compared_checks_per_probe_on_a_churning_run(calls, state):
    s = state()
    worst = 0
    for i in range(MAX_COMPARED + 200):
        before = calls[0]
        obs = ProbeObservation(64 * (i + 1), str(10_000 + i), budget_tokens=10**9)
        s.update(obs) if isinstance(s, FeatureState) else s.observe(obs)
        worst = max(worst, calls[0] - before)
    assert worst == MAX_COMPARED
