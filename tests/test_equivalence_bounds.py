"""Hostile input: every extraction and comparison stays inside a stated time budget.

Comparisons are bounded by counted work (``max_steps``), whatever the machine; what the
budget guards is the rest: extraction and normalization scans and regexes. Each input
runs three times and the fastest run must be under :data:`BUDGET_S`. A linear pass over
these inputs takes at most ~5 ms on an idle 2-core CI box (the budget is 100x that, so
load cannot fail it), while the quadratic re-scans and backtracking regexes these
shapes target take seconds to minutes (:func:`test_the_budget_catches_a_quadratic_scan`).
The comparisons run in worker threads too: nothing relies on signals or the main thread.
"""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from reasonserve.certainindex import Verdict, compare_answers, extract_answer, extract_probe_answer

BUDGET_S = 0.5

HOSTILE = {
    "nested_boxed_open": "\\boxed{" * 5000,
    "nested_boxed_closed": "\\boxed{" * 5000 + "1" + "}" * 5000,
    "boxed_then_braces": "\\boxed{" * 5000 + "{" * 50_000,
    "many_boxes": "\\boxed{1} and " * 14_000,
    "answer_200k": "x" * 200_000,
    "digits_100k": "9" * 100_000,
    "digits_999": "9" * 999,
    "exponent_tower": "10^" * 240 + "10",
    "braced_tower": "2^{" * 150 + "2" + "}" * 150,
    "factorial_tower": "9!" + "!" * 300,
    "deep_parens": "(" * 3000 + "1" + ")" * 3000,
    "unit_spam": "1" + " m" * 490 + " !",
    "unit_words": "1" + " cm" * 330,
    "text_spam": "\\text{" * 160 + "a",
    "dollars": "$" * 100_000,
    "open_delimiters": "\\(" * 50_000,
    "answer_is_spam": "the answer is " * 14_000,
    "final_answer_spam": "Final Answer: " * 14_000,
    "frac_spam": "\\frac" * 5000,
    "pm_spam": "1\\pm" * 249,
    "comma_list": ",".join(str(i) for i in range(330)),
    "union_spam": "\\cup".join(["(1,2)"] * 140),
    "relation_chain": "<".join("x" * 490),
    "equation_chain": "=".join(["x"] * 400),
    "backslashes": "\\\\" * 50_000,
    "mixed_noise": "{[(\\frac\\sqrt^_" * 5000,
    # shapes aimed at the normalization regexes (backtracking on a failing end)
    "conjunction_spam": "1" + " and" * 240 + " x!",
    "text_unit_spam": "1" + "\\text{ a" * 110,
    "approx_spam": "1\\approx" * 120,
    "ordinal_spam": "1^{" * 330,
    "thin_space_spam": "1,\\!" * 240,
    "power_units": "1" + " cm^2" * 190 + "!",
}


def _fastest(fn, repeats=3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_extraction_is_bounded(name):
    text = HOSTILE[name]
    assert _fastest(lambda: extract_answer(text)) < BUDGET_S
    assert _fastest(lambda: extract_probe_answer(text)) < BUDGET_S


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_comparison_is_bounded(name):
    text = HOSTILE[name]
    short = text[:999]  # under the answer-length cap, so the whole cascade runs
    for a, b in ((text, "1"), (short, "1"), (short, short[:-1] + "2"), (short, "(" + short + ")")):
        assert _fastest(lambda a=a, b=b: compare_answers(a, b)) < BUDGET_S, (a[:40], b[:40])


@pytest.mark.parametrize(
    ("a", "b"),
    [  # reordered long lists: exact values settle constants; symbolic ones hit the pair cap
        (",".join(str(i) for i in range(180)), ",".join(f"{i}+0" for i in reversed(range(180)))),
        (",".join(f"x+{i}" for i in range(180)), ",".join(f"{i}+x" for i in reversed(range(180)))),
        (",".join(f"\\sqrt{{{i}}}" for i in range(120)), ",".join(f"\\sqrt{{{i}}}+0" for i in range(120))),
    ],
)
def test_long_unordered_lists_are_bounded(a, b):
    assert _fastest(lambda: compare_answers(a, b)) < BUDGET_S
    assert compare_answers(a, b) is not Verdict.DIFFERENT  # equal, or unknown past the cap


def test_the_budget_catches_a_quadratic_scan():
    """The harness itself can fail: a quadratic re-scan of hostile input is over the budget
    (at 2,500 nested boxes, a quarter of the full input's work: ~2 s idle, the full one ~8 s)."""

    def quadratic_boxed(text):  # the old extraction: a balanced-brace scan from every \boxed
        end = len(text)
        while (at := text.rfind("\\boxed{", 0, end)) != -1:
            depth = 0
            for ch in text[at + 6 :]:
                depth += {"{": 1, "}": -1}.get(ch, 0)
                if depth == 0:
                    break
            end = at

    assert _fastest(lambda: quadratic_boxed("\\boxed{" * 2500), repeats=1) > BUDGET_S


def test_comparisons_in_threads_agree_with_serial_results():
    pairs = [("32349", "32,348"), (r"\frac{1}{2}", "0.5"), ("x^2-1", "(x-1)(x+1)"), (r"10^{400}", r"10^{500}"),
             (r"\{1\pm\sqrt5,-2\}", r"-2,1+\sqrt5,1-\sqrt5"), ("x<5", "5>x"), (HOSTILE["digits_999"], "1")] * 20  # fmt: skip
    serial = [compare_answers(a, b) for a, b in pairs]
    with ThreadPoolExecutor(max_workers=8) as pool:
        threaded = list(pool.map(lambda p: compare_answers(*p), pairs))
    assert threaded == serial
    assert serial[:4] == [Verdict.DIFFERENT, Verdict.EQUAL, Verdict.EQUAL, Verdict.DIFFERENT]
