"""Answer equivalence, one case per rule of the cascade in the module docstring of
``certainindex/answers/equivalence.py``, worked by hand at the edges a one-line change
would move: empty answers, percents, choice letters, words of four letters or more,
numerals with a base subscript, and the incremental grouping's comparison window."""

import pytest

from reasonserve.certainindex.answers.equivalence import AnswerClasses, Verdict, compare_answers
from reasonserve.certainindex.answers.extract import MAX_ANSWER_CHARS

EQUAL, DIFFERENT = Verdict.EQUAL, Verdict.DIFFERENT


@pytest.mark.parametrize(
    ("a", "b", "verdict"),
    [
        ("", "5", DIFFERENT),  # an empty answer is never equivalent (not merely unknown)
        (None, "0", DIFFERENT),
        ("", "", DIFFERENT),
        ("100%", "1", EQUAL),  # a percent side: 100% is 1, though both read as integers
        ("50%", "0.5", EQUAL),
        ("7%", "7", EQUAL),
        ("B", "1*B", DIFFERENT),  # a choice letter equals only the same letter
        ("(C)", "c", EQUAL),
        ("(C)", "3", DIFFERENT),
        ("abc", "bca", EQUAL),  # three letters: a product of variables
        ("East", "east", EQUAL),  # four or more: a word, case ignored
        ("East", "tsaE", DIFFERENT),  # ... never a product
        ("1Z_{36}", "1Z", EQUAL),  # base 36 digits; the base on one side only
        ("A1_{16}", "A1", EQUAL),
        ("4210_{5}", "4210_5", EQUAL),
        ("4210_{5}", "4210_{6}", DIFFERENT),  # both bases given: they must agree
    ],
)
def test_each_rule_of_the_cascade(a, b, verdict):
    assert compare_answers(a, b) is verdict
    assert compare_answers(b, a) is verdict


def test_grouping_compares_a_new_spelling_with_the_latest_classes_only():
    """``max_compared`` bounds the classes a new answer is compared with: 0.5 matches 1/2
    only when 1/2's class is among the latest ``max_compared``."""
    answers = ["1/2", "3", "0.5", "1/2"]
    assert [AnswerClasses(max_compared=1).add(a) for a in [None]] == [-1]
    one, two, every = AnswerClasses(max_compared=1), AnswerClasses(max_compared=2), AnswerClasses()
    assert [one.add(a) for a in answers] == [0, 1, 2, 0]  # a seen spelling is looked up, not compared
    assert [two.add(a) for a in answers] == [0, 1, 0, 0]
    assert [every.add(a) for a in answers] == [0, 1, 0, 0]
    assert len(one) == 3 and one.representative(2) == "0.5"


def test_an_answer_over_the_size_limit_is_unknown_on_either_side():
    long = "1+" * (MAX_ANSWER_CHARS // 2) + "1"
    assert compare_answers("5", long) is Verdict.UNKNOWN
    assert compare_answers(long, "5") is Verdict.UNKNOWN
    assert compare_answers(long, long) is EQUAL  # the same string is still the same answer
