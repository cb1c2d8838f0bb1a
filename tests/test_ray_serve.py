"""Ray Serve on this machine: 3 CPU replicas of a tiny checkpoint behind the OpenAI
ingress, routed by PascalRequestRouter. One local Ray session for the module (starting
Ray and the replicas is most of the time). Needs the ``ray`` extra."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import socket
import time

import pytest

pytest.importorskip("ray.serve", reason="needs the ray extra: pip install 'reasonserve[ray]'")
import httpx
import ray
from ray import serve

from _waits import until
from reasonserve.adapters.ray_serve import (
    EngineReplica,
    Job,
    PhaseAwareClient,
    RayServeConfig,
    ReplicaFailedError,
    build_app,
    router_config,
)
from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint
from reasonserve.policies.router import PascalRouter
from reasonserve.serve.config import ServeConfig

pytestmark = pytest.mark.slow  # a local Ray cluster and Serve app: ~25 s to start on 2 cores

BLOCK = 4
APP = "rs_test"
MAX_TOKENS = 112
# Routing stats come every 0.1 s (stats_period_s): a state the router has not seen within
# this budget it never will. It bounds a failure on a loaded 2-core machine; it gates nothing.
STATS_BUDGET_S = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reference_output(path, prompt, params, eot=None):
    config = EngineConfig(block_size=BLOCK, num_blocks=256, end_of_thinking_token_id=eot)
    return Engine.from_pretrained(path, config).generate([list(prompt)], params)[0]


def _reference(path, prompt, params, eot=None):
    return _reference_output(path, prompt, params, eot).token_ids


async def _router_sees(handle, log: _Decisions, tag: str, what: str, predicate):
    """Route one-token probe requests until the router's decision for one satisfies
    ``predicate``: bounded polling of the stats the router sees (each probe is a real
    request, no sleep); an AssertionError naming ``what`` after STATS_BUDGET_S."""
    client = PhaseAwareClient(handle, None)
    deadline = time.monotonic() + STATS_BUDGET_S
    for i in itertools.count():
        rid = f"probe-{tag}-{i}"
        await client.run(Job(rid, (2,), SamplingParams(max_tokens=1, seed=i)))
        decision, _ = log.of(rid, "place")[-1]
        if predicate(decision):
            return decision
        if time.monotonic() > deadline:
            raise AssertionError(f"the router did not see {what} within {STATS_BUDGET_S} s: {decision}")


def _first_new(tokens, start):
    """A token whose first occurrence is at index >= start (the end of "thinking")."""
    return next(t for i, t in enumerate(tokens) if i >= start and t not in tokens[:i])


class _Decisions(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def of(self, request_id: str, kind: str) -> list:
        """(decision, job as the router saw it) for each routing of ``request_id``."""
        return [(r.decision, r.job) for r in self.records if hasattr(r, "job") and r.job.request_id == request_id
                and r.job.kind == kind]  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    path = make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt"))
    think = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, seed=3, deterministic=True, ignore_eos=True)
    eot = _first_new(_reference(path, (1, 2, 3, 4, 5), think), 80)  # reasoning lasts several stats periods
    port = _free_port()
    # A loaded 2-core machine can take longer than Ray's default to register the raylet.
    monkeypatch_env = pytest.MonkeyPatch()
    monkeypatch_env.setenv("RAY_raylet_start_wait_time_s", "120")
    # ... and Serve's HTTP proxy longer than its 5 s ready check (Serve kills a proxy that
    # misses it, and serve.start then fails with ActorDiedError).
    monkeypatch_env.setenv("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "120")
    monkeypatch_env.setenv("RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S", "60")
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    engine = EngineConfig(block_size=BLOCK, num_blocks=256, end_of_thinking_token_id=eot)
    cfg = RayServeConfig(model=str(path), num_replicas=3, engine=engine, stats_period_s=0.1,
                         stats_max_age_s=1.0, num_cpus_per_replica=0.5,
                         serve=ServeConfig(model_name="tiny", max_tokens_limit=256))  # fmt: skip
    serve.run(build_app(cfg), name=APP, route_prefix="/")
    handler = _Decisions()
    log = logging.getLogger("reasonserve.ray_serve")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    handle = serve.get_deployment_handle("EngineReplica", app_name=APP)
    try:
        fresh = lambda d: d.fallback is None and len(d.loads) == 3
        asyncio.run(_router_sees(handle, handler, "start", "fresh stats of all three replicas", fresh))
        yield {"path": path, "eot": eot, "port": port, "cfg": cfg, "log": handler, "handle": handle}
    finally:
        log.removeHandler(handler)
        serve.shutdown()
        ray.shutdown()
        monkeypatch_env.undo()


def test_placement_follows_the_pure_policy_on_the_stats_it_saw(cluster):
    client = PhaseAwareClient(cluster["handle"], None)
    long = Job("place-long", (7, 8, 9), SamplingParams(max_tokens=120, ignore_eos=True, seed=1))
    short = Job("place-short", (7, 8, 9, 10), SamplingParams(max_tokens=8, ignore_eos=True, seed=2))

    async def body():
        running = asyncio.Event()
        first = asyncio.create_task(client.run(long, lambda tokens, _logprobs: running.set()))
        # The long request runs (it committed tokens); the router counts its blocks from its
        # own placement at once, and from the stats once they show them.
        await asyncio.wait_for(running.wait(), STATS_BUDGET_S)
        second = await client.run(short)  # placed while the long one runs (not after it finished)
        return await first, second

    out_long, out_short = asyncio.run(body())
    decision, seen = cluster["log"].of("place-short", "place")[-1]
    assert decision.fallback is None, decision.fallback
    assert seen == short
    assert decision.chosen == PascalRouter().route(short.view(BLOCK), decision.loads)
    assert out_short.replicas == [decision.chosen]
    held = {load.instance_id: load.kv_blocks_footprint for load in decision.loads}
    assert held[out_long.replicas[0]] > 0 and out_short.replicas[0] != out_long.replicas[0]
    assert len(out_long.token_ids) == 120 and len(out_short.token_ids) == 8


def test_migration_at_the_phase_boundary_keeps_the_output_bit_identical(cluster):
    client = PhaseAwareClient(cluster["handle"], cluster["eot"])
    prompt = (1, 2, 3, 4, 5)
    migrated = 0
    for i, temperature in enumerate((0.0, 0.9)):
        params = SamplingParams(max_tokens=MAX_TOKENS, temperature=temperature, seed=3 + i, deterministic=True,
                                ignore_eos=True, logprobs=2)  # fmt: skip
        reference = _reference_output(cluster["path"], prompt, params, cluster["eot"])
        ref = reference.token_ids
        job = Job(f"mig-{i}", prompt, params)
        out = asyncio.run(client.run(job))
        assert out.token_ids == ref, f"request {i}: output changed across the transition"
        assert out.logprobs == reference.logprobs, f"request {i}: logprobs changed across the transition"
        if cluster["eot"] not in ref:
            continue
        decision, seen = cluster["log"].of(job.request_id, "answer")[-1]
        current = out.replicas[0]
        assert seen.current_replica == current and cluster["eot"] in seen.committed
        assert list(seen.committed) == ref[: len(seen.committed)]
        if decision.fallback is None:
            expected = PascalRouter().route_transition(seen.view(BLOCK), current, decision.loads, seen.blocks(BLOCK),
                                                       stay_blocks_needed=seen.answer_blocks(BLOCK))  # fmt: skip
            assert decision.chosen == expected
        assert out.migrations == (decision.chosen != current)
        assert out.replicas == ([current, decision.chosen] if out.migrations else [current])
        migrated += out.migrations
    assert migrated >= 1, "no request migrated: the test did not exercise migration"



def _replica_stats(app: str = APP) -> list[dict]:
    """Every live replica's routing stats, asked of the replica actors themselves (what the
    replicas measure now, not the router's copy)."""
    prefix = f"SERVE_REPLICA::{app}#EngineReplica#"
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix)]
    return ray.get([ray.get_actor(n, namespace="serve").record_routing_stats.remote() for n in names])


def test_a_cancelled_request_is_aborted_on_its_replica(cluster):
    """A client that goes away (its task cancelled) frees the request's KV on the replica:
    every replica's own stats soon show no request and no block held (the request asked
    for 900 tokens; it had committed a handful)."""
    client = PhaseAwareClient(cluster["handle"], None)
    sent: list[int] = []
    job = Job("cancel-me", (5, 5, 5), SamplingParams(max_tokens=900, ignore_eos=True, seed=4))

    async def body():
        task = asyncio.create_task(client.run(job, lambda tokens, _logprobs: sent.extend(tokens)))
        await until(lambda: len(sent) >= 5 or task.done(), "the first tokens of cancel-me")
        assert not task.done(), task.result()
        assert sum(s["num_live"] for s in _replica_stats()) >= 1  # the replicas do see it running
        task.cancel()

        def freed() -> bool:
            return all(s["num_live"] == 0 and s["kv_blocks_footprint"] == 0 for s in _replica_stats())

        await until(freed, "every replica without requests or blocks", timeout_s=STATS_BUDGET_S)

    asyncio.run(body())


def test_the_openai_ingress_serves_completions_through_the_replicas(cluster):
    url = f"http://127.0.0.1:{cluster['port']}/v1/completions"
    body = {"model": "tiny", "prompt": [1, 2, 3, 4, 5], "max_tokens": MAX_TOKENS, "temperature": 0, "seed": 3,
            "deterministic": True, "ignore_eos": True, "return_token_ids": True, "logprobs": 2}  # fmt: skip
    reply = httpx.post(url, json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, seed=3, deterministic=True, ignore_eos=True,
                            logprobs=2)  # fmt: skip
    reference = _reference_output(cluster["path"], (1, 2, 3, 4, 5), params, cluster["eot"])
    assert choice["token_ids"] == reference.token_ids
    # the engine's logprobs, through the replicas (floored at -9999 as the server reports them)
    assert choice["logprobs"]["token_logprobs"] == [max(e.logprob, -9999.0) for e in reference.logprobs]
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=60) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    streamed = [lp for c in chunks for ch in c["choices"] if ch["logprobs"] for lp in ch["logprobs"]["token_logprobs"]]
    assert streamed == choice["logprobs"]["token_logprobs"]
    bad = httpx.post(url, json={**body, "max_tokens": "many"}, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "max_tokens"


def test_stale_stats_fall_back_to_the_default_ranking_and_say_why(cluster):
    class StaleStatsReplica(EngineReplica):
        def record_routing_stats(self) -> dict:
            return {**super().record_routing_stats(), "reported_at_s": time.time() - 60.0}

    cfg = cluster["cfg"]
    stale = serve.deployment(StaleStatsReplica, name="Stale", num_replicas=1, ray_actor_options={"num_cpus": 0.5},
                             request_router_config=router_config(cfg))  # fmt: skip
    handle = serve.run(stale.bind(cfg), name="rs_stale", route_prefix=None)
    stale_stats = lambda d: d.fallback is not None and "stale" in d.fallback
    asyncio.run(_router_sees(handle, cluster["log"], "stale", "the stale replica's stats", stale_stats))
    client = PhaseAwareClient(handle, None)
    job = Job("stale-1", (4, 5, 6), SamplingParams(max_tokens=6, ignore_eos=True, seed=5))
    out = asyncio.run(client.run(job))
    serve.delete("rs_stale")
    decision, _ = cluster["log"].of("stale-1", "place")[-1]
    assert "stale" in decision.fallback and decision.loads == ()
    warnings = [r.getMessage() for r in cluster["log"].records if r.levelno == logging.WARNING]
    assert any("default ranking" in m and "stale" in m for m in warnings), warnings
    assert len(out.token_ids) == 6 and out.finish_reason == "length"


def _actor_of(replica_id: str):
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if replica_id in a["name"]]
    assert len(names) == 1, names
    return ray.get_actor(names[0], namespace="serve")


def test_killed_replicas_resume_or_fail_cleanly_and_are_never_chosen_again(cluster):
    """Two requests on two replicas; both replicas are killed mid-request. The one with a
    retry budget resumes elsewhere from its committed tokens: the same bits as an
    undisturbed run (nothing lost, nothing sent twice). The one without fails with
    ReplicaFailedError. New requests never go to a dead replica."""
    params = SamplingParams(max_tokens=160, temperature=0.8, seed=11, deterministic=True, ignore_eos=True)
    ref = _reference(cluster["path"], (9, 8, 7), params)
    sent: list[int] = []
    resilient = PhaseAwareClient(cluster["handle"], None, max_retries=2)
    fragile = PhaseAwareClient(cluster["handle"], None, max_retries=0)

    async def body():
        a = asyncio.create_task(resilient.run(Job("kill-a", (9, 8, 7), params), lambda t, _lp: sent.extend(t)))
        b = asyncio.create_task(fragile.run(Job("kill-b", (9, 8, 7, 6), params)))
        await until(lambda: len(sent) >= 10 or a.done(), "the first tokens of kill-a")
        victims = {d.chosen for name in ("kill-a", "kill-b") for d, _ in cluster["log"].of(name, "place")}
        for replica_id in victims:
            ray.kill(_actor_of(replica_id), no_restart=True)
        results = await asyncio.gather(a, b, return_exceptions=True)
        return victims, results

    victims, (out_a, err_b) = asyncio.run(body())
    assert len(victims) == 2
    assert isinstance(err_b, ReplicaFailedError) and "failed 1 times" in str(err_b)
    assert not isinstance(out_a, BaseException), out_a
    assert out_a.resumes == 1 and out_a.token_ids == ref and sent == ref[: len(sent)]
    assert out_a.replicas[-1] not in victims
    client = PhaseAwareClient(cluster["handle"], None)
    for i in range(4):
        out = asyncio.run(client.run(Job(f"after-{i}", (3, 3), SamplingParams(max_tokens=4, seed=i))))
        assert out.replicas[0] not in victims
        ranking = cluster["log"].of(f"after-{i}", "place")[-1][0].ranking
        assert not victims & set(ranking)


def test_the_serve_run_builder_rejects_bad_arguments_by_name():
    from reasonserve.adapters.ray_serve.app import from_args
    from reasonserve.core.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="replicas must be an integer"):
        from_args({"model": "m", "replicas": "two"})
    with pytest.raises(InvalidArgumentError, match="model required"):
        from_args({"replicas": "2"})
    with pytest.raises(InvalidArgumentError, match="unknown \\['gpus'\\]"):
        from_args({"model": "m", "gpus": "8"})
    with pytest.raises(InvalidArgumentError, match="router"):
        from_args({"model": "m", "router": "random"})


def test_the_router_takes_only_the_kwargs_it_knows():
    from reasonserve.adapters.ray_serve import PascalRequestRouter
    from reasonserve.core.errors import InvalidArgumentError

    router = PascalRequestRouter.__new__(PascalRequestRouter)  # Ray builds it; only its state here
    router.initialize_state(migrate=False, block_size=8)
    assert router.policy == PascalRouter(migrate=False) and router.block_size == 8
    assert router.max_stats_age_s == 0.6
    with pytest.raises(InvalidArgumentError, match="unknown \\['adaptve'\\]"):
        router.initialize_state(adaptve=False)
