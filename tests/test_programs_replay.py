"""The live CoT program and the offline replay take the same stopping decisions.

Recorded probe streams (``../shared/data/probes``, read at run time, skipped when
absent) are served to :class:`CoTWithProbe` by a replay client: chunks of the recorded
lengths, and each probe answered with the recorded probe text. The program's exit
position and answer must equal what the replay path
(:func:`reasonserve.replay.probe_rules.online_first_stop`) finds on the same trajectory,
for agree-span rules of several spans (the shipped rule's class; its own span never
exits inside these 3072-token recordings) and a last-k baseline.
"""

from __future__ import annotations

import asyncio
import csv
import gzip
import json
import pathlib

import pytest

from reasonserve.certainindex.answers import extract_probe_answer
from reasonserve.certainindex.stopping import AgreeSpanRule
from reasonserve.clients import Capabilities, GenerateResult, ProbeResult
from reasonserve.programs import CoTWithProbe
from reasonserve.replay.probe_rules import online_first_stop
from reasonserve.replay.probe_runs import load_run

RUN = pathlib.Path(__file__).resolve().parents[2] / "shared/data/probes/qwen3-8b__math500__seed_42__interval128"
NUM_TRAJECTORIES = 40


class ReplayClient:
    """Serves one recorded trajectory: chunk k ends at probe k's token position (the
    last one at ``tokens_used``, finishing); probe k answers the recorded probe text."""

    capabilities = Capabilities(token_ids=True)

    def __init__(self, tr) -> None:
        self.tr, self.chunks, self.probes = tr, 0, 0
        self.ends = [*tr.positions, tr.tokens_used]

    async def generate(self, req):
        k = self.chunks
        self.chunks += 1
        start = self.ends[k - 1] if k else 0
        last = k == len(self.ends) - 1
        ids = tuple(range(self.ends[k] - start))
        tail = self.tr.tails[k] if self.tr.tails and k < len(self.tr.tails) else ""
        return GenerateResult(req.request_id, tail, ids, "stop" if last else "length", prompt_token_ids=(1,))

    async def probe(self, prefix, suffix, max_tokens, *, request_id=None):
        k = self.probes
        self.probes += 1
        assert len(prefix) - 1 == self.tr.positions[k]  # the probe sees exactly the recorded prefix
        return ProbeResult(self.tr.texts[k], None, "length")

    def stream(self, req):
        raise NotImplementedError

    async def abort(self, request_id):
        return None

    async def score(self, prompt, responses):
        raise NotImplementedError


@pytest.fixture(scope="module")
def trajectories(tmp_path_factory):
    if not (RUN / "probes.csv.gz").is_file():
        pytest.skip(f"recorded probes not found at {RUN}")
    labels = [json.loads(line) for line in (RUN / "labels.jsonl").read_text().splitlines()[:NUM_TRAJECTORIES]]
    keys = {(str(x["dataset"]), str(x["problem_id"]), str(x["rollout_id"])) for x in labels}
    small = tmp_path_factory.mktemp("run") / RUN.name
    small.mkdir()
    (small / "labels.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    (small / "meta.json").write_text((RUN / "meta.json").read_text())
    with gzip.open(RUN / "probes.csv.gz", "rt", newline="") as src, gzip.open(small / "probes.csv.gz", "wt") as dst:
        reader = csv.DictReader(src)
        writer = csv.DictWriter(dst, fieldnames=reader.fieldnames)
        writer.writeheader()
        writer.writerows(r for r in reader if (r["dataset"], r["problem_id"], r["rollout_id"]) in keys)
    out = [tr for tr in load_run(small)
           if tr.positions and all(extract_probe_answer(t) == a for t, a in zip(tr.texts, tr.answers, strict=True))]  # fmt: skip
    assert len(out) >= 20
    return out


RULES = [
    AgreeSpanRule(tokens=384, min_tokens=256),
    AgreeSpanRule(tokens=1024, min_tokens=1024),
    AgreeSpanRule(k_probes=3, min_tokens=0, hesitation=False),
]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_live_program_exits_where_the_replay_does(trajectories, rule):
    cot = CoTWithProbe(chunk_tokens=128, max_tokens=100_000, rule=rule)
    exits = 0
    for tr in trajectories:
        out = asyncio.run(asyncio.wait_for(cot.run(ReplayClient(tr), (1,)), 30))
        replay = online_first_stop(rule, tr)
        if replay is None:
            assert out.trace.exit == "finished", tr.key
            assert out.trace.tokens_generated == tr.tokens_used
            continue
        i, cid = replay
        exits += 1
        assert out.trace.exit == "early", tr.key
        assert out.trace.tokens_generated == tr.positions[i] and out.trace.num_probes == i + 1, tr.key
        assert tr.class_of(out.answer) == cid, tr.key
    assert 0 < exits < len(trajectories)  # both branches were compared
