"""The shipped learned rule takes the same decisions in the live CoT program as in replay.

``tests/test_programs_replay.py`` checks agree-span rules; here the shipped
:func:`default_rule` (logistic score over the probe stream, the probe text and the
budget, plus the exit at the last probe before the budget) runs inside
:class:`CoTWithProbe`, served recorded trajectories of both models by a replay client,
with ``max_tokens`` the recording's budget. Its exit position and answer must equal
what ``reasonserve replay probes`` finds through
:func:`~reasonserve.replay.probe_rules.online_first_stop` on the same trajectory.
A rule that reads the reasoning text is checked the same way on text-probed traces
(each chunk carries the reasoning since the previous probe, as ``replay cot`` does).
"""

from __future__ import annotations

import asyncio
import pathlib
from dataclasses import replace

import pytest

from reasonserve.certainindex.answers import extract_probe_answer
from reasonserve.certainindex.stopping import default_rule
from reasonserve.certainindex.stopping.features import FEATURE_NAMES
from reasonserve.certainindex.stopping.learned import LogisticStopRule
from reasonserve.programs import CoTWithProbe
from reasonserve.replay.cot import trace_trajectory
from reasonserve.replay.probe_rules import online_first_stop
from reasonserve.replay.probe_runs import load_run
from test_programs_replay import ReplayClient

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared/data/probes"
RUNS = ("qwen3-8b__math500__seed_42__interval128", "r1-distill-qwen-7b__math500__seed_42__interval128")
PER_RUN = 60


@pytest.fixture(scope="module")
def recorded():
    if not all((DATA / run / "probes.csv.gz").is_file() for run in RUNS):
        pytest.skip(f"recorded probes not found under {DATA}")
    out = []
    for run in RUNS:
        out += [tr for tr in load_run(DATA / run)[:PER_RUN] if tr.positions and all(
            extract_probe_answer(t) == a for t, a in zip(tr.texts, tr.answers, strict=True))]  # fmt: skip
    assert len(out) >= 80 and all(tr.budget == 3072 for tr in out)
    return out


def _live(rule, tr, max_tokens: int):
    cot = CoTWithProbe(chunk_tokens=128, max_tokens=max_tokens, rule=rule)
    return asyncio.run(asyncio.wait_for(cot.run(ReplayClient(tr), (1,)), 30))


def _compare(rule, trajectories, max_tokens) -> tuple[int, int]:
    """Program vs replay on every trajectory; returns (exits, trajectories run to their end)."""
    exits = ends = 0
    for tr in trajectories:
        out = _live(rule, tr, max_tokens(tr))
        stop = online_first_stop(rule, tr)
        if stop is None:  # the replay runs it to the end: so must the program
            expected = (out.trace.exit in ("finished", "budget"), tr.tokens_used)
            assert expected == (True, out.trace.tokens_generated), tr.key
        else:  # same probe, same tokens, same answer
            got = (out.trace.exit, out.trace.tokens_generated, out.trace.num_probes, tr.class_of(out.answer))
            assert got == ("early", tr.positions[stop[0]], stop[0] + 1, stop[1]), tr.key
        exits, ends = exits + (stop is not None), ends + (stop is None)
    return exits, ends


def test_the_shipped_rule_exits_in_the_program_where_replay_does(recorded):
    rule = default_rule()
    assert {"probe_text", "budget"} <= rule.requires  # the program hands both over
    exits, ends = _compare(rule, recorded, lambda tr: tr.budget)
    assert exits > 20 and ends > 0  # both branches compared
    # The budget exit is among the compared exits: some stop at the last probe before 3072.
    assert any(online_first_stop(rule, tr) is not None and tr.positions[online_first_stop(rule, tr)[0]] + 128
               >= 3072 > tr.positions[online_first_stop(rule, tr)[0]] for tr in recorded)  # fmt: skip


def test_a_different_budget_changes_the_program_and_the_replay_alike(recorded):
    """The program reads its budget from ``max_tokens``: a wrong budget breaks the equality."""
    rule = default_rule()
    moved = [tr for tr in recorded if _live(rule, tr, 100_000).trace.tokens_generated != _live(
        rule, tr, tr.budget).trace.tokens_generated]  # fmt: skip
    assert moved  # the budget is a signal the program really passes


def test_a_rule_reading_the_reasoning_text_exits_in_the_program_where_replay_does():
    weights = [0.0] * len(FEATURE_NAMES)
    weights[FEATURE_NAMES.index("tail_verifies")] = 8.0
    weights[FEATURE_NAMES.index("tail_hesitation")] = -0.5
    weights[FEATURE_NAMES.index("log_run_tokens")] = 1.0
    n = len(FEATURE_NAMES)
    rule = LogisticStopRule(tuple(weights), (0.0,) * n, (1.0,) * n, bias=-4.0, threshold=0.9, budget_exit=False)
    assert rule.requires == frozenset({"answers", "reasoning_text"})
    filler = " ".join(f"w{i}" for i in range(150))
    trajectories = []
    for k in range(12):
        verify = "So the answer is 7. Let me verify: 7 checks out." if k % 2 else "Hmm, wait, the answer is 7?"
        text = f"<think> {filler} {verify} {filler} wait hmm {filler} </think> \\boxed{{7}}"
        tr = trace_trajectory(("d", str(k), "0"), "r", text, "7", "7", interval_tokens=64)
        # the client answers each probe with a text whose probe answer is the recorded one
        trajectories.append(replace(tr, texts=tuple(f"{a}}} \\]" if a else "" for a in tr.answers)))
    exits, ends = _compare(rule, trajectories, lambda tr: 100_000)
    assert exits >= 6 and ends >= 1  # verified traces exit, hesitant ones run on
