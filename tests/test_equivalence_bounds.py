"""Hostile input: extraction and comparison work grows linearly with the input.

Work is counted, never timed: :func:`_work` counts the Python trace events (lines, calls,
returns) a call runs, the same on a fast machine, a slow or a loaded one. Each hostile
shape is built at ``k`` and at ``4 k`` repeats; the work at ``4 k`` must stay within
:data:`LINEAR` times the work at ``k`` (plus a constant for fixed costs), where a
quadratic re-scan does 16 times the work (:func:`test_the_bound_catches_a_quadratic_scan`).
Comparisons are also bounded by their own step budget (``max_steps``).

What trace events do not see is work inside one C call (a regex's backtracking, a
``str`` method's scan): the shapes aimed at the normalization regexes still catch a
Python-level re-scan of them, not a backtracking pattern (``benchmarks/certainindex.py``
reports the slowest hostile input's time). The comparisons run in worker threads too:
nothing relies on signals or the main thread.
"""

import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from reasonserve.certainindex import Verdict, compare_answers, extract_answer, extract_probe_answer

#: Work at 4 k repeats may be at most this many times the work at k (linear: 4; n log n: a
#: little more; a quadratic scan: 16).
LINEAR = 6
FIXED = 200  # trace events of fixed costs (a cache miss, a first-call import)

# name: (the input of k repeats, k); the full sizes the shapes were written for are 10-40x.
HOSTILE = {
    "nested_boxed_open": (lambda k: "\\boxed{" * k, 250),
    "nested_boxed_closed": (lambda k: "\\boxed{" * k + "1" + "}" * k, 250),
    "boxed_then_braces": (lambda k: "\\boxed{" * k + "{" * (10 * k), 250),
    "many_boxes": (lambda k: "\\boxed{1} and " * k, 250),
    "answer_long": (lambda k: "x" * k, 4000),
    "digits_long": (lambda k: "9" * k, 4000),
    "exponent_tower": (lambda k: "10^" * k + "10", 60),
    "braced_tower": (lambda k: "2^{" * k + "2" + "}" * k, 40),
    "factorial_tower": (lambda k: "9!" + "!" * k, 75),
    "deep_parens": (lambda k: "(" * k + "1" + ")" * k, 200),
    "unit_spam": (lambda k: "1" + " m" * k + " !", 120),
    "unit_words": (lambda k: "1" + " cm" * k, 80),
    "text_spam": (lambda k: "\\text{" * k + "a", 40),
    "dollars": (lambda k: "$" * k, 4000),
    "open_delimiters": (lambda k: "\\(" * k, 2000),
    "answer_is_spam": (lambda k: "the answer is " * k, 250),
    "final_answer_spam": (lambda k: "Final Answer: " * k, 250),
    "frac_spam": (lambda k: "\\frac" * k, 250),
    "pm_spam": (lambda k: "1\\pm" * k, 60),
    "comma_list": (lambda k: ",".join(str(i) for i in range(k)), 80),
    "union_spam": (lambda k: "\\cup".join(["(1,2)"] * k), 35),
    "relation_chain": (lambda k: "<".join("x" * k), 120),
    "equation_chain": (lambda k: "=".join(["x"] * k), 100),
    "backslashes": (lambda k: "\\\\" * k, 2000),
    "mixed_noise": (lambda k: "{[(\\frac\\sqrt^_" * k, 250),
    # shapes aimed at the normalization regexes (backtracking on a failing end)
    "conjunction_spam": (lambda k: "1" + " and" * k + " x!", 60),
    "text_unit_spam": (lambda k: "1" + "\\text{ a" * k, 30),
    "approx_spam": (lambda k: "1\\approx" * k, 30),
    "ordinal_spam": (lambda k: "1^{" * k, 80),
    "thin_space_spam": (lambda k: "1,\\!" * k, 60),
    "power_units": (lambda k: "1" + " cm^2" * k + "!", 45),
}


def _work(fn) -> int:
    """Python trace events (call, line, return, exception) while ``fn()`` runs."""
    events = 0

    def tracer(frame, event, arg):
        nonlocal events
        events += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return events


def _assert_linear(run, shape, k: int, what: str) -> None:
    small, large = _work(lambda: run(shape(k))), _work(lambda: run(shape(4 * k)))
    assert large <= LINEAR * small + FIXED, f"{what}: {small} events at k={k}, {large} at 4k"


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_extraction_work_is_linear(name):
    shape, k = HOSTILE[name]
    _assert_linear(extract_answer, shape, k, f"extract_answer({name})")
    _assert_linear(extract_probe_answer, shape, k, f"extract_probe_answer({name})")


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_comparison_work_is_linear(name):
    shape, k = HOSTILE[name]
    pairs = (lambda t: (t, "1"), lambda t: (t, t[:-1] + "2"), lambda t: (t, "(" + t + ")"))
    for i, pair in enumerate(pairs):
        _assert_linear(lambda t, pair=pair: compare_answers(*pair(t)), shape, k, f"pair {i} of {name}")


@pytest.mark.parametrize(
    ("a", "b"),
    [  # reordered long lists: exact values settle constants; symbolic ones hit the pair cap
        (lambda k: ",".join(str(i) for i in range(k)), lambda k: ",".join(f"{i}+0" for i in reversed(range(k)))),
        (lambda k: ",".join(f"x+{i}" for i in range(k)), lambda k: ",".join(f"{i}+x" for i in reversed(range(k)))),
        (lambda k: ",".join(f"\\sqrt{{{i}}}" for i in range(k)), lambda k: ",".join(f"\\sqrt{{{i}}}+0" for i in range(k))),
    ],
)
def test_long_unordered_lists_are_bounded(a, b):
    """Past the pair cap the work stops growing with the list (45 -> 180 elements)."""
    small, large = (_work(lambda k=k: compare_answers(a(k), b(k))) for k in (45, 180))
    assert large <= LINEAR * small + FIXED, (small, large)
    assert compare_answers(a(180), b(180)) is not Verdict.DIFFERENT  # equal, or unknown past the cap


def test_the_bound_catches_a_quadratic_scan():
    """The harness itself can fail: the old extraction's quadratic re-scan of nested boxes
    does ~16x the work at 4x the input, past the linear bound."""

    def quadratic_boxed(text):  # the old extraction: a balanced-brace scan from every \boxed
        end = len(text)
        while (at := text.rfind("\\boxed{", 0, end)) != -1:
            depth = 0
            for ch in text[at + 6 :]:
                depth += {"{": 1, "}": -1}.get(ch, 0)
                if depth == 0:
                    break
            end = at

    shape, _ = HOSTILE["nested_boxed_open"]
    with pytest.raises(AssertionError, match="events at k="):
        _assert_linear(quadratic_boxed, shape, 100, "quadratic_boxed")
    _assert_linear(extract_answer, shape, 100, "extract_answer")  # the real one, same input


def test_comparisons_in_threads_agree_with_serial_results():
    pairs = [("32349", "32,348"), (r"\frac{1}{2}", "0.5"), ("x^2-1", "(x-1)(x+1)"), (r"10^{400}", r"10^{500}"),
             (r"\{1\pm\sqrt5,-2\}", r"-2,1+\sqrt5,1-\sqrt5"), ("x<5", "5>x"), ("9" * 999, "1")] * 20  # fmt: skip
    serial = [compare_answers(a, b) for a, b in pairs]
    with ThreadPoolExecutor(max_workers=8) as pool:
        threaded = list(pool.map(lambda p: compare_answers(*p), pairs))
    assert threaded == serial
    assert serial[:4] == [Verdict.DIFFERENT, Verdict.EQUAL, Verdict.EQUAL, Verdict.DIFFERENT]
