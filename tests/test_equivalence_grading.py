"""The optional Math-Verify reference grader: worker process, hard timeout, replay hook."""

import threading

import pytest

from reasonserve.certainindex.answers.grading import ReferenceGrader, reference_grader_available
from reasonserve.core.errors import InvalidArgumentError

pytestmark = pytest.mark.skipif(not reference_grader_available(), reason="needs the [grading] extra")


@pytest.fixture(scope="module")
def grader():
    with ReferenceGrader(timeout_s=10) as g:
        yield g


def test_reference_grades_like_math_verify(grader):
    assert grader.grade(r"\frac{1}{2}", "0.5") is True
    assert grader.grade("32349", "32348") is False
    assert grader(r"(1,\frac{9}{2})", "(1,4.5)") is True  # equivalent()-shaped call
    assert grader.grade("", "1") is False


def test_reference_grader_works_off_the_main_thread(grader):
    out = []
    worker = threading.Thread(target=lambda: out.append(grader.grade("x^2-1", "(x-1)(x+1)")))
    worker.start()
    worker.join(timeout=60)
    assert out == [True]  # Math-Verify's own SIGALRM timeout would fail off the main thread


def test_timeout_kills_the_worker_and_the_next_pair_gets_a_fresh_one(grader):
    assert grader.grade("1", "1") is True  # warm: the worker has imported sympy
    before = grader.num_timeouts
    grader.timeout_s = 1e-4
    try:
        heavy = "+".join(f"x^{{{i}}}" for i in range(60))
        assert grader.grade(heavy, heavy[::-1]) is None
        assert grader.num_timeouts == before + 1
    finally:
        grader.timeout_s = 10
    assert grader.grade("2", "2") is True


def test_bad_timeout_is_rejected():
    with pytest.raises(InvalidArgumentError):
        ReferenceGrader(timeout_s=0)


def test_replay_loader_grades_with_the_given_grader(tmp_path, grader):
    import csv
    import gzip
    import json

    from reasonserve.replay.probe_runs import load_run

    folder = tmp_path / "run"
    folder.mkdir()
    with gzip.open(folder / "probes.csv.gz", "wt", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["dataset", "problem_id", "rollout_id", "token_position", "probe_answer", "probe_text", "is_certain"])
        w.writerows([["m", 0, 0, 64, "", r"\frac{1}{2}} \]", True], ["m", 0, 0, 128, "", "7} \\]", True]])
    label = {"problem_id": 0, "rollout_id": 0, "dataset": "m", "target": "0.5", "final_answer": "7",
             "final_correct": False, "tokens_used": 300, "finished_naturally": True}  # fmt: skip
    (folder / "labels.jsonl").write_text(json.dumps(label) + "\n")
    (default,) = load_run(folder)
    assert default.class_correct == (True, False) and not default.final_correct
    (graded,) = load_run(folder, grade=grader)
    assert graded.class_correct == (True, False) and not graded.final_correct
    (lenient,) = load_run(folder, grade=lambda answer, target: True)  # the hook is what grades
    assert lenient.class_correct == (True, True) and lenient.final_correct
