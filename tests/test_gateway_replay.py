"""End to end on real reasoning: the gateway over an upstream that replays recorded model
output takes the decisions of the offline replay, trajectory for trajectory.

Three recorded probe runs of two models (``../shared/data/probes``, read at run time,
skipped when absent) are served over HTTP by ``_replay_upstream.py`` (chunks of the
recorded lengths, each probe the recorded probe text, the recorded final answer after
the thinking). Each trajectory is one ``/v1/completions`` request to a gateway with the
certified rule at the recording's probe interval and budget. The gateway's exit, answer
and reasoning tokens must equal what ``reasonserve replay probes`` computes for the
shipped rule (:func:`~reasonserve.replay.probe_rules.online_first_stop`, and
:func:`~reasonserve.replay.probe_rules.evaluate` for the run's totals), for every
trajectory replayed. ``REASONSERVE_GATEWAY_REPLAY=all`` replays whole runs (minutes);
by default the first trajectories of each run.

Each request's upstream priority is checked too: a request carries the certainty the
rule read at the program's previous probe (gang: the chunk and the probe sent together
carry the same value), negated for vLLM.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib

import pytest

httpx = pytest.importorskip("httpx", reason="gateway tests need httpx (client extra)")
pytest.importorskip("fastapi", reason="gateway tests need fastapi (serve extra)")

from _gateway import live_gateway  # noqa: E402
from _live_server import TIMEOUT_S, live_app  # noqa: E402
from _replay_upstream import PREFIX, ReplayUpstream, encode  # noqa: E402
from reasonserve.certainindex import equivalent  # noqa: E402
from reasonserve.certainindex.calibration import Outcome  # noqa: E402
from reasonserve.gateway import GatewayConfig  # noqa: E402
from reasonserve.gateway.scheduling import CERTAINTY_LEVELS  # noqa: E402
from reasonserve.programs import DEFAULT_PROBE_SUFFIX  # noqa: E402
from reasonserve.programs.cot import host_default_rule  # noqa: E402
from reasonserve.replay.probe_rules import evaluate, online_first_stop  # noqa: E402
from reasonserve.replay.probe_runs import load_run  # noqa: E402
from reasonserve.serve.config import ServeConfig  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared/data/probes"
RUNS = [
    "qwen3-8b__math500__seed_42__interval128",
    "r1-distill-qwen-7b__math500__seed_42__interval128",
    "r1-distill-qwen-7b__k8rollouts__math500+aime24",
]
PER_RUN = 12  # trajectories per run by default (REASONSERVE_GATEWAY_REPLAY=all: every one)
CONCURRENCY = 8


def _key(tr) -> str:
    return "/".join(tr.key)


def _finals(folder: pathlib.Path) -> dict[str, str | None]:
    out = {}
    for line in (folder / "labels.jsonl").read_text().splitlines():
        label = json.loads(line)
        final = label.get("final_answer")
        out["/".join(str(label[k]) for k in ("dataset", "problem_id", "rollout_id"))] = final and str(final)
    return out


@pytest.fixture(scope="module", params=RUNS)
def run(request):
    folder = DATA / request.param
    if not (folder / "probes.csv.gz").is_file():
        pytest.skip(f"recorded probes not found at {folder}")
    trajs = load_run(folder)
    if os.environ.get("REASONSERVE_GATEWAY_REPLAY") != "all":
        trajs = trajs[:PER_RUN]
    return request.param, trajs, _finals(folder)


async def _ask(client: httpx.AsyncClient, url: str, tr, gate: asyncio.Semaphore) -> dict:
    body = {"prompt": PREFIX + _key(tr), "max_tokens": tr.budget + 64, "thinking_token_budget": tr.budget,
            "early_exit": {"rule": "certified", "probe_interval_tokens": tr.probe_interval()}}  # fmt: skip
    async with gate:
        r = await client.post(url + "/v1/completions", json=body, timeout=TIMEOUT_S * 4)
    assert r.status_code == 200, r.text
    return r.json()


async def _ask_all(url: str, trajs) -> list[dict]:
    gate = asyncio.Semaphore(CONCURRENCY)
    async with httpx.AsyncClient() as client:
        return await asyncio.gather(*(_ask(client, url, tr, gate) for tr in trajs))


def test_gateway_decisions_equal_the_offline_replay(run):
    name, trajs, finals = run
    rule = host_default_rule()
    upstream = ReplayUpstream({_key(t): t for t in trajs}, finals, tuple(encode(DEFAULT_PROBE_SUFFIX)))
    with live_app(upstream.app(), ServeConfig()) as (_, port):
        # no escalation here: a long run on a busy machine would earn it (tested on its own)
        cfg = GatewayConfig(f"http://127.0.0.1:{port}", upstream_kind="vllm", served_model_name="replay",
                            starvation_bound_s=1e9, limits=ServeConfig(max_tokens_limit=40_000))  # fmt: skip
        with live_gateway(cfg) as (url, _):
            replies = asyncio.run(_ask_all(url, trajs))
    correct = cost = exits = 0
    for tr, reply in zip(trajs, replies, strict=True):
        info, tokens = reply["reasonserve"], reply["usage"]["completion_tokens_details"]["reasoning_tokens"]
        stop = online_first_stop(rule, tr)
        if stop is None:
            assert info["exit"] in ("finished", "budget") and tokens == tr.tokens_used, (name, tr.key)
            right = bool(info["answer"]) and equivalent(info["answer"], tr.target)
            assert right == tr.final_correct, (name, tr.key, info["answer"])
        else:
            i, cid = stop
            assert (info["exit"], tokens, info["num_probes"]) == ("early", tr.positions[i], i + 1), (
                name,
                tr.key,
            )
            assert tr.class_of(info["answer"]) == cid, (name, tr.key)
            right = tr.class_correct[cid]
            exits += 1
        correct += right
        cost += tokens
    offline = evaluate(rule, trajs)
    assert Outcome(len(trajs), correct, cost, offline.baseline_correct, offline.baseline_cost) == offline
    assert exits > 0  # the early-exit branch was compared
    _check_priorities(upstream, trajs, rule)


def _check_priorities(upstream: ReplayUpstream, trajs, rule) -> None:
    """The chunk and the probe sent at position p carry the certainty the rule read at the
    probe before p (0 before the first), in vLLM's convention (negated)."""
    before: dict[tuple[str, int], float] = {}
    for tr in trajs:
        state, read = rule.start(), 0.0
        for position, obs in zip(tr.positions, tr.observations(), strict=True):
            before[(_key(tr), position)] = read
            read = state.observe(obs).certainty
    checked = 0
    for key, kind, position, priority in upstream.seen:
        if kind in ("chunk", "probe") and position > 0:
            assert -priority == round(before[(key, position)] * CERTAINTY_LEVELS), (key, kind, position)
            checked += 1
    assert checked > 0
