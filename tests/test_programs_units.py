"""Pure pieces of the programs: Rebase's width split, the weighted vote, config checks."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reasonserve.certainindex.answers.equivalence import AnswerClasses
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.programs import MCTS, BeamSearchPRM, CoTWithProbe, Rebase, SelfConsistency, StepConfig
from reasonserve.programs._search import Node, weighted_vote
from reasonserve.programs.rebase import allocate


class NeedsLogprobs:
    name, requires = "needs-logprobs", frozenset({"answers", "logprobs"})

    def start(self):
        raise AssertionError("never started: the program refuses it")


scores = st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=12)


@given(scores, st.integers(0, 40), st.floats(0.05, 5))
def test_rebase_split_sums_to_the_budget_and_favours_higher_rewards(values, budget, temperature):
    counts = allocate(values, budget, temperature)
    assert sum(counts) == budget and all(c >= 0 for c in counts)
    for i in range(len(values)):
        for j in range(len(values)):
            if values[i] > values[j] + 1e-9:
                assert counts[i] >= counts[j] - 1  # rounding moves at most one child


def test_rebase_split_examples():
    assert allocate([1.0, 1.0], 4, 1.0) == [2, 2]
    assert allocate([10.0, 0.0], 4, 0.1) == [4, 0]
    assert allocate([], 3, 1.0) == []
    assert allocate([0.0, math.log(1.5)], 3, 1.0) == [1, 2]  # shares 1.2, 1.8: the larger remainder wins
    assert allocate([math.log(1.5), 0.0], 3, 1.0) == [2, 1]


def test_weighted_vote_counts_reward_weight_not_heads():
    def done(text, score):
        return Node(text, 1, terminal=True, score=score)

    nodes = [done("\\boxed{1}", 0.0), done("\\boxed{1}", 0.0), done("\\boxed{2}", 3.0)]
    answer, share = weighted_vote(nodes, AnswerClasses(), temperature=1.0)
    assert answer == "2" and share > 0.8  # e^3 > 2 e^0
    answer, _ = weighted_vote(nodes, AnswerClasses(), temperature=100.0)
    assert answer == "1"  # at a high temperature the vote is a head count


@pytest.mark.parametrize(
    "make",
    [
        lambda: CoTWithProbe(chunk_tokens=0),
        lambda: CoTWithProbe(probe_suffix=""),
        lambda: CoTWithProbe(rule=NeedsLogprobs()),
        lambda: SelfConsistency(samples_per_step=0),
        lambda: SelfConsistency(policy=object()),
        lambda: Rebase(width=0),
        lambda: Rebase(temperature=0.0),
        lambda: MCTS(expansions=0),
        lambda: MCTS(c_puct=float("nan")),
        lambda: BeamSearchPRM(beam_width=0),
        lambda: StepConfig(step_tokens=0),
        lambda: StepConfig(step_delimiter=""),
        # sampling settings are checked when the program is built, not at its first request
        lambda: CoTWithProbe(temperature=float("nan")),
        lambda: CoTWithProbe(seed=-1),
        lambda: CoTWithProbe(stop=("",)),
        lambda: SelfConsistency(top_p=0.0),
        lambda: SelfConsistency(seed=2**63),
        lambda: SelfConsistency(priority=1.5),
        lambda: StepConfig(temperature=-1.0),
        lambda: StepConfig(seed=True),
        lambda: StepConfig(step_delimiter=5),
    ],
)
def test_bad_program_configs_are_typed_errors(make):
    with pytest.raises(InvalidArgumentError):
        make()


def test_self_consistency_seeds_wrap_at_the_top_of_the_seed_range():
    program = SelfConsistency(seed=2**63 - 1)
    assert [program._request("q", i).seed for i in range(3)] == [2**63 - 1, 0, 1]
