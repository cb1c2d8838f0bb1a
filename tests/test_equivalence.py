"""Answer equivalence: the cascade, hostile strings, fuzzing."""

import os
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.certainindex import AnswerClasses, Verdict, compare_answers, equivalent, group_answers
from reasonserve.certainindex.answers import _mathexpr as mx
from reasonserve.certainindex.answers._numeric import Huge, exact
from reasonserve.core.errors import InvalidArgumentError

EQUAL = [
    (r"\frac{1}{2}", "0.5"), ("1/2", r"\dfrac12"), (r"(3,\frac{\pi}{2})", r"\left( 3, \frac{\pi}{2} \right)"),
    ("p - q", "p-q"), ("2x+1", "1+2x"), ("x^2-1", "(x-1)(x+1)"), (r"50\%", "0.5"), ("(C)", "C"),
    (r"\text{C}", "c"), (r"2\sqrt{3}", r"\sqrt{12}"), (r"\sqrt[3]{8}", "2"), ("y=2x+1", "y=1+2x"),
    ("1,000", "1000"), ("3.0", "3"), (r"\infty", r"\infty"), (r"\text{Evelyn}", "Evelyn"),
    (r"\frac{\sqrt{3}}{3}", r"\frac{1}{\sqrt{3}}"), ("[1, 2)", "[1,2)"), ("10^{2}", "100"),
    ("30^\\circ", "30"),
    # forms seen in the recorded MATH-500 runs: matrices spaced or not, fractions in cells,
    # "x \in" before an interval, base subscripts, capitalized words
    (r"\begin{pmatrix} -2 \\ -14 \\ -7 \end{pmatrix}", r"\begin{pmatrix}-2\\-14\\-7\end{pmatrix}"),
    (r"\begin{pmatrix} -1/3 \\ 2/3 \end{pmatrix}", r"\begin{pmatrix}-\frac{1}{3}\\\frac{2}{3}\end{pmatrix}"),
    (r"\begin{pmatrix} -1 & 0 \\ 0 & -1 \end{pmatrix}", r"\begin{bmatrix}-1&0\\0&-1\\\end{bmatrix}"),
    (r"x \in [-2,7]", "[-2,7]"), ("4210_{5}", "4210_5"), ("4210_{5}", "4210"), (r"\text{east}", "East"),
    ("(2,4)", r"(2,\,4)"), (r"\frac{11+9a}{20}", r"\frac{9a+11}{20}"), ("1,-2", "-2, 1"), ("1,2,2", "2,1,2"),
    # forms that were false "different": units, ASCII functions, factorial/binomial/mod/over/div,
    # trig, \pm sets, doubled backslashes, assignments, mixed numbers, relations
    ("15", r"15\mbox{ cm}^2"), ("125", r"125\textnormal{ miles}"), ("sqrt(66)", r"\sqrt{66}"),
    (r"\{1\pm\sqrt5,-2\}", r"-2, 1+\sqrt{5}, 1-\sqrt{5}"), (r"2\times5!\times5!", "28800"),
    (r"\binom{6}{2}", "15"), (r"17 \mod 5", "2"), (r"{3 \over 4}", "0.75"), (r"7 \div 2", "3.5"),
    (r"\cot x", r"\frac{\cos x}{\sin x}"), (r"\tan^2(y)+1", r"\frac{1}{\cos^2 y}"), (r"\\sqrt{5}", r"\sqrt{5}"),
    ("abc=-120", "-120"), ("x = 5+5+1 = 11", "x = 11"), (r"(p,q)=(3,2)", "(3, 2)"), (r"15\frac{39}{40}", r"\frac{639}{40}"),
    (r"2\frac{4}{21}", r"\frac{46}{21}"), (r"-2\frac{1}{2}", "-2.5"), ("x < 5", "5 > x"), ("-x > -1", "x < 1"),
    ("2x+4y-3=0", r"y=-\frac{1}{2}x+\frac{3}{4}"), ("x^2/4 + y^2/3 = 1", "x^2/16 + y^2/12 = 1/4"),
    (r"-2 \le x \le 7", "[-2, 7]"), ("x > 5", r"(5, \infty)"), (r"\pm 2021", "{-2021, 2021}"),
    (r"[-1, 0) \cup (1, 2]", r"(1,2] \cup [-1,0)"), (r"\frac{1}{12}", "0.0833333333333333"), ("2.6667", r"\frac{8}{3}"),
    (r"\frac{1}{3}", "0.33"), (r"10^{400}", r"10^{400}"), (r"\frac{10}{10^{400}}", r"10^{-399}"), ("1,000", "1 000"),
    ("1,2,2", "1,1,2"),  # a bare list is a set: repeats count once
]  # fmt: skip
DIFFERENT = [
    ("50", "0.5"), ("[1,2)", "[1,2]"), ("(1,2)", "(2,1)"), ("2x", "3x"), ("A", "B"), ("1", "(1,2)"),
    ("x^2", "x^3"), ("1.001", "1"), ("1.00001", "1"), ("", ""), (None, "1"), ("A", "1"),
    (r"\begin{pmatrix}-1&0\\0&-1\end{pmatrix}", r"\begin{pmatrix}-1&0\\0&1\end{pmatrix}"),
    (r"\begin{pmatrix}1\\2\end{pmatrix}", r"\begin{pmatrix}1&2\end{pmatrix}"),
    (r"\begin{vmatrix}1&2\\3&4\end{vmatrix}", r"\begin{pmatrix}1&2\\3&4\end{pmatrix}"),
    (r"\begin{pmatrix}1\\2\end{pmatrix}", "(1,2)"), ("4210_6", "4210_5"), ("4250", "4210_5"), ("10_2", "2"),
    ("east", "seat"), ("1,-2", "(-2,1)"), ("Monday", "Tuesday"), ("(2,\\infty)", "[2,\\infty)"), ("100", "1"),
    # false "equal" before: neighbouring integers, mixed numbers, huge values, spaced lists
    ("32349", "32,348"), ("13536", "13535"), ("123456789", "123456788"), ("32349", "32, 349"),
    (r"2\frac{4}{21}", r"\frac{8}{21}"), (r"10^{400}", r"10^{500}"), (r"2^{2000}", r"3^{2000}"),
    (r"\infty", r"10^{400}"), (r"10^{400}", r"10^{400}+1"), ("1.99", "2"), ("3.14", "3"), (r"\frac{1}{3}", "0.3"),
    (r"\frac{1}{3}", "0.34"), (r"\pm 2021", "2021"), ("x=1", "y=1"), ("a+3z=0", "0"), ("x < 5", "x > 5"),
    (r"x \geq 5", r"x \leq 5"), ("x < 1", "-x < -1"), ("2x+z=1", "1"), ("(3,1)", r"\{1,3\}"), ("1,2", "1,2,3"),
]  # fmt: skip


@pytest.mark.parametrize(("a", "b"), EQUAL)
def test_equal_pairs(a, b):
    assert equivalent(a, b) and equivalent(b, a)


@pytest.mark.parametrize(("a", "b"), DIFFERENT)
def test_different_pairs(a, b):
    assert not equivalent(a, b) and not equivalent(b, a)


def test_hostile_strings_never_execute_or_hang(tmp_path):
    marker = tmp_path / "pwned"
    hostile = [
        f"__import__('os').system('touch {marker}')",
        "10^10^10^10",
        "9" * 100_000,
        "{" * 50_000,
        "(" * 500 + "1" + ")" * 500,
        "x" * 399 + "^" + "9" * 50,
        "\\frac" * 5000,
        "１０^１０^１０",  # fullwidth digits
        "eval(compile('1','a','eval'))",
    ]
    for h in hostile:
        for other in ("0", h, "1e400"):
            assert compare_answers(h, other) in (Verdict.EQUAL, Verdict.DIFFERENT, Verdict.UNKNOWN)
    assert not marker.exists()
    assert not pathlib.Path(os.getcwd(), "pwned").exists()


def test_bare_lists_match_in_any_order_and_long_ones_stay_bounded():
    items = [f"\\frac{{{i}}}{{7}}" for i in range(1, 60)]
    shuffled = items[::-1]
    assert equivalent(",".join(items), ",".join(shuffled))
    assert not equivalent(",".join(items), ",".join([*shuffled[:-1], "x"]))
    assert not equivalent(",".join(items), "(" + ",".join(shuffled) + ")")  # a tuple is ordered
    # under the 1,000-character cap, ~32k possible pairwise value checks: the exact values
    # settle it in linear time, and the pair-check cap and the work budget bound the rest
    numbers, sums = [str(i) for i in range(180)], [f"{i}+0" for i in reversed(range(180))]
    assert compare_answers(",".join(numbers), ",".join(sums)) is Verdict.EQUAL
    symbolic, respelled = [f"x^{i}+{i}" for i in range(2, 62)], [f"{i}+x^{i}" for i in reversed(range(2, 62))]
    assert compare_answers(",".join(symbolic), ",".join(respelled)) is Verdict.UNKNOWN  # ~1,800 pair checks


def test_huge_values_are_unknown_never_equal():
    with pytest.raises(Huge):
        exact(mx.parse("10^10^10"))  # refused before a 10-billion-digit integer is built
    for huge in ("10^10^10", "9^{9^{9}}", "1000!", "1001!", r"\binom{100000}{50000}", "10^{310}*1.0"):
        assert compare_answers(huge, "5") is not Verdict.EQUAL
        assert compare_answers(huge, r"\infty") is not Verdict.EQUAL
    assert compare_answers("1001!", "1002!") is Verdict.UNKNOWN  # over the factorial cap
    assert compare_answers(r"10^{400}", r"10^{500}") is Verdict.DIFFERENT  # exact, not inf == inf


def test_integers_and_rationals_compare_exactly():
    for n in (10**6, 10**12, 10**30):
        assert not equivalent(str(n), str(n + 1)) and equivalent(str(n), f"{n}.0")
    assert equivalent(r"\frac{1}{3}+\frac{1}{6}", "0.5") and not equivalent(r"\frac{1}{3}", r"\frac{333333}{1000000}")


def test_a_spent_work_budget_is_unknown_at_the_same_step_every_time():
    """The verdict is a function of counted steps: one step fewer than a comparison needs
    is UNKNOWN, on any machine, and the count does not change between runs."""
    pair = ("x^2+2x+1", "(x+1)^2")
    needed = [next(s for s in range(1, 500) if compare_answers(*pair, max_steps=s) is Verdict.EQUAL)
              for _ in range(3)]  # fmt: skip
    assert needed[0] == needed[1] == needed[2] > 1
    assert compare_answers(*pair, max_steps=needed[0] - 1) is Verdict.UNKNOWN
    assert compare_answers(*pair, max_steps=1) is Verdict.UNKNOWN
    for bad in (0, -5, 1.5, True, "100"):
        with pytest.raises(InvalidArgumentError, match="max_steps"):
            compare_answers("1", "1", max_steps=bad)
    with pytest.raises(InvalidArgumentError, match="max_steps"):
        AnswerClasses(max_steps=0)


def test_verdicts_read_no_clock(monkeypatch):
    """Every clock raises: comparisons still run and give their verdicts (the budget is
    counted work, so a slow or loaded machine cannot turn EQUAL into UNKNOWN). Fresh
    answers, so no memoized parse hides the work."""
    import time as time_module

    def no_clock():
        raise AssertionError("the equivalence cascade read a clock")

    for name in ("thread_time", "process_time", "monotonic", "perf_counter", "time"):
        monkeypatch.setattr(time_module, name, no_clock)
    assert compare_answers("x^2+4x+4+0q", "(x+2)^2+0q") is Verdict.EQUAL
    assert compare_answers(r"\{1,2,7,11\}", r"\{7,11,1,2\}") is Verdict.EQUAL
    assert compare_answers("3y+1 < 4", "1+3y < 4") is Verdict.EQUAL
    assert compare_answers("x^2+4x+6", "(x+2)^2") is Verdict.DIFFERENT


def test_parser_limits():
    with pytest.raises(mx.ExprError):
        mx.parse("1+" * 300 + "1")  # over MAX_CHARS
    with pytest.raises(mx.ExprError):
        mx.parse(r"\unknowncommand{1}")


def test_grouping_into_classes():
    assert group_answers(["1/2", "0.5", "", r"\frac{1}{2}", "3", None, "3.0"]) == [0, 0, -1, 0, 1, -1, 1]
    classes = AnswerClasses()
    assert classes.add("x+1") == 0 and classes.add("1+x") == 0 and len(classes) == 1


@settings(max_examples=1500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("0123456789+-*/^(){}[],.=xyz \\fracsqtpi%$")), max_size=60),
       st.text(max_size=40))  # fmt: skip
def test_fuzzed_comparisons_return_a_verdict_and_are_symmetric_for_equality(a, b):
    v1 = compare_answers(a, b)
    v2 = compare_answers(b, a)
    assert isinstance(v1, Verdict) and isinstance(v2, Verdict)
    assert (v1 is Verdict.EQUAL) == (v2 is Verdict.EQUAL)
    assert compare_answers(a, a) in (Verdict.EQUAL, Verdict.DIFFERENT)  # DIFFERENT only when empty


@settings(max_examples=300, deadline=None)
@given(st.integers(-50, 50), st.integers(1, 50))
def test_fractions_equal_their_decimal(p, q):
    assert equivalent(f"\\frac{{{p}}}{{{q}}}", repr(p / q))
