"""PASCAL's router vs Ray Serve's default power-of-two-choices on 3 replicas of a tiny
random checkpoint, with the simulator's prediction for the same setting beside it.

Workload: ServeGen's DeepSeek-R1 lengths (prompt, reasoning, answer; read from
``../shared/data`` at run time) divided by ``--scale`` and arriving as a seeded Poisson
process. A random model cannot decide when to stop reasoning, so each replica's engine
emits the end-of-thinking token at the trace's reasoning length (through the engine's
token-override seam, on a request id that carries the position) and never elsewhere.
Every replica runs the PASCAL intra-instance policy (quantum and demotion divided by
the same scale); only the router differs: ``pascal`` (Algorithm 1 + Algorithm 2 with
adaptive migration), ``pascal-nomigrate`` (Algorithm 1 only, PASCAL's NoMigration
ablation) or ``pow2`` (Ray Serve's default; the answering phase stays).

The simulator gets the same requests, 3 instances with the replicas' KV capacity and a
step-time profile fitted from this machine's engine (``reasonserve.cost.profile``); its
"pow2" is two random instances, the smaller KV footprint (its loads carry no queue
length). Both run on the same machine, loaded by other work: compare rows of one run.

    python benchmarks/ray_serve.py              # 120 requests per router
    python benchmarks/ray_serve.py --quick      # 40 requests per router
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import random
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import torch

from _harness import RESULTS, machine
from reasonserve.cost.engine_steps import measure_engine_steps
from reasonserve.cost.profile import fit_profile
from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint
from reasonserve.policies.pacer import TokenPacer
from reasonserve.policies.pascal import PascalPolicy
from reasonserve.policies.router import PascalRouter
from reasonserve.sim import SimConfig, load_lengths, poisson_workload, simulate, summarize
from reasonserve.sim.metrics import percentile
from reasonserve.sim.workloads.requests import LengthTable

ROOT = pathlib.Path(__file__).resolve().parents[1]
EOT = 255  # the tiny checkpoint's last token id plays </think>
BLOCK, NUM_BLOCKS, MAX_SEQS = 4, 192, 16
TPOT_S, TTFAT_S, QOE_SLO = 0.1, 0.25, 0.95  # PASCAL's targets (SPEC §3)


class ScriptedPhases:
    """Engine token override: the end-of-thinking token exactly at the position the
    request id names (``...@<position>``), and nowhere else."""

    def __call__(self, request_id: str, position: int, token: int) -> int:
        forced = int(request_id.rsplit("@", 1)[1]) if "@" in request_id else -1
        if position == forced:
            return EOT
        return token if token != EOT else EOT - 1


def scaled_table(scale: int, data: str, seed: int) -> LengthTable:
    table = load_lengths("servegen", data, seed=seed, num_rows=5000)
    rows = tuple((min(64, max(4, p // scale)), min(256, max(8, r // scale)), min(192, max(4, a // scale)))
                 for p, r, a in table.rows)  # fmt: skip
    caps = "prompt 4..64, reasoning 8..256, answer 4..192"
    return LengthTable(rows, f"{table.source}, lengths / {scale} ({caps})")


@dataclass
class Run:
    router: str
    rows: list[dict]
    makespan_s: float
    migrations: int
    handoff_s: list[float]


async def _drive(handle, router: str, requests, seed: int) -> tuple[list, float]:
    from reasonserve.adapters.ray_serve import Job, PhaseAwareClient

    client = PhaseAwareClient(handle, EOT, migrate=router == "pascal")  # pascal-nomigrate never asks
    rng = random.Random(seed)  # the same prompts and seeds for every router
    jobs = []
    for req in requests:
        prompt = tuple(rng.randrange(1, EOT) for _ in range(req.prompt_tokens))
        params = SamplingParams(max_tokens=req.output_tokens, temperature=1.0, seed=rng.getrandbits(32),
                                ignore_eos=True)  # fmt: skip
        jobs.append(Job(f"{req.request_id}@{req.prompt_tokens + req.reasoning_tokens - 1}", prompt, params))
    start = time.monotonic()

    async def one(req, job):
        await asyncio.sleep(max(0.0, start + req.arrival_s - time.monotonic()))
        arrival = time.monotonic()
        return req, arrival, await client.run(job)

    done = await asyncio.gather(*(one(r, j) for r, j in zip(requests, jobs, strict=True)))
    return done, time.monotonic() - start


def _row(req, arrival: float, out, pacer: TokenPacer) -> dict:
    i = out.eot_index
    answer = out.token_times[i + 1 :] if i is not None else out.token_times
    first_answer = answer[0] if answer else out.token_times[-1]
    return {"reasoning_tokens": req.reasoning_tokens, "ttft_s": first_answer - arrival,
            "ttfat_s": first_answer - out.token_times[i] if i is not None else 0.0,
            "qoe": pacer.qoe(answer), "tokens": len(out.token_ids)}  # fmt: skip


def run_real(router: str, path: pathlib.Path, requests, args) -> Run:
    from ray import serve

    from reasonserve.adapters.ray_serve import RayServeConfig, replica_deployment

    engine = EngineConfig(block_size=BLOCK, num_blocks=NUM_BLOCKS, max_num_seqs=MAX_SEQS,
                          end_of_thinking_token_id=EOT)  # fmt: skip
    cfg = RayServeConfig(model=str(path), num_replicas=3, engine=engine, router=router.split("-")[0],
                         stats_period_s=0.2, stats_max_age_s=1.0, num_cpus_per_replica=0.5,
                         quantum_tokens=500 // args.scale)  # fmt: skip
    kwargs = {"policy": _policy(args.scale), "fast_path_fault": ScriptedPhases()}
    name = f"bench_{router.replace('-', '_')}"
    handle = serve.run(replica_deployment(cfg, kwargs), name=name, route_prefix=None)
    time.sleep(1.0)  # a first round of routing stats
    done, makespan = asyncio.run(_drive(handle, router, requests, args.seed))
    serve.delete(name)
    pacer = TokenPacer(TPOT_S)
    rows = [_row(req, arrival, out, pacer) for req, arrival, out in done]
    handoffs = [h for _, _, out in done for h in out.handoff_s]
    return Run(router, rows, makespan, sum(out.migrations for _, _, out in done), handoffs)


def _policy(scale: int) -> PascalPolicy:
    return PascalPolicy(quantum=500 // scale, demote_threshold_tokens=5000 // scale, mode="recompute")


def _summary(rows: list[dict], makespan_s: float) -> dict:
    ttft = [r["ttft_s"] for r in rows]
    return {"ttft_p50_s": percentile(ttft, 50), "ttft_p90_s": percentile(ttft, 90),
            "ttft_p99_s": percentile(ttft, 99), "ttft_max_s": max(ttft),
            "ttfat_attainment": sum(r["ttfat_s"] <= TTFAT_S for r in rows) / len(rows),
            "answer_slo_violation_rate": sum(r["qoe"] < QOE_SLO for r in rows) / len(rows),
            "throughput_tokens_s": sum(r["tokens"] for r in rows) / makespan_s}  # fmt: skip


class _SimPow2:
    """Power of two choices for the simulator: two random instances, the smaller KV
    footprint; the answering phase stays."""

    name = "pow2"

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def route(self, request, instances) -> str:
        pair = self.rng.sample(list(instances), min(2, len(instances)))
        return min(pair, key=lambda i: (i.kv_blocks_footprint, i.instance_id)).instance_id

    def route_transition(self, request, current_id, instances, blocks_needed, stay_blocks_needed=None) -> str:
        return current_id


def profile(path: pathlib.Path, table: LengthTable, seed: int):
    """Step times of one engine on this machine (one torch thread, as in a replica), over
    batches like the workload's, after a warm-up pass that is not kept."""
    engine = Engine.from_pretrained(path, EngineConfig(block_size=BLOCK, num_blocks=NUM_BLOCKS,
                                                       max_num_seqs=MAX_SEQS))  # fmt: skip
    engine.generate([[1, 2, 3, 4]] * 4, SamplingParams(max_tokens=32, ignore_eos=True, seed=0))
    rng = random.Random(seed)
    rows_all = []
    for batch in (1, 4, 8, 16):
        draws = [table.draw(rng) for _ in range(batch)]
        prompts = [[rng.randrange(1, EOT) for _ in range(p)] for p, _, _ in draws]
        params = [SamplingParams(max_tokens=min(64, r + a), ignore_eos=True, seed=i)
                  for i, (_, r, a) in enumerate(draws)]  # fmt: skip
        rows_all += measure_engine_steps(engine, prompts, params)[0]
    return fit_profile(rows_all, "tiny qwen2 checkpoint (2 layers, hidden 64), this machine, 1 engine")


def run_sim(router: str, requests, table, seed: int, scale: int) -> dict:
    cfg = SimConfig(num_instances=3, block_size=BLOCK, max_num_seqs=MAX_SEQS, max_num_batched_tokens=512,
                    kv_capacity_tokens=NUM_BLOCKS * BLOCK, preemption="recompute", profile=table)  # fmt: skip
    routers = {"pascal": PascalRouter(), "pascal-nomigrate": PascalRouter(migrate=False)}
    chosen = routers.get(router, _SimPow2(seed))
    result = simulate(requests, cfg, lambda: _policy(scale), chosen)
    s = summarize(result)
    ttft = {f"ttft_{k}_s": s["ttft_s"][k] for k in ("p50", "p90", "p99", "max")}
    return {**ttft, "ttfat_attainment": s["ttfat_attainment"],
            "answer_slo_violation_rate": s["slo_violation_rate"],
            "throughput_tokens_s": s["throughput_tokens_s"], "migrations": s["migrations"]}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--requests", type=int, default=None)
    p.add_argument("--rate", type=float, default=8.0, help="arrivals per second")
    p.add_argument("--scale", type=int, default=16, help="trace lengths divided by this")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--out", default=str(RESULTS / "ray_serve.json"))
    p.add_argument("--routers", default="pow2,pascal,pascal-nomigrate", help="run in this order")
    args = p.parse_args()
    if set(args.routers.split(",")) - {"pow2", "pascal", "pascal-nomigrate"}:
        p.error(f"--routers takes pow2, pascal, pascal-nomigrate; got {args.routers!r}")
    torch.set_num_threads(1)  # like each replica; the replicas share this machine's cores
    n = args.requests or (40 if args.quick else 120)
    import tempfile

    import ray

    path = make_tiny_checkpoint(pathlib.Path(tempfile.mkdtemp()) / "tiny")
    table = scaled_table(args.scale, args.data, args.seed)
    requests = poisson_workload(table, args.rate, n, args.seed)
    prof = profile(path, table, args.seed)
    results = {"machine": machine("cpu"), "workload": table.source, "requests": n, "rate_per_s": args.rate,
               "seed": args.seed, "scale": args.scale, "order": args.routers,
               "profile_coefficients": prof.coefficients, "real": {}, "sim": {}}  # fmt: skip
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "120")  # a loaded machine registers slowly
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        for router in args.routers.split(","):
            t0 = time.monotonic()
            run = run_real(router, path, requests, args)
            handoff = percentile(run.handoff_s, 50) if run.handoff_s else None
            results["real"][router] = {**_summary(run.rows, run.makespan_s), "migrations": run.migrations,
                                       "handoff_p50_s": handoff, "wall_s": time.monotonic() - t0}  # fmt: skip
            results["sim"][router] = run_sim(router, requests, prof, args.seed, args.scale)
            both = {"real": results["real"][router], "sim": results["sim"][router]}
            print(router, json.dumps(both), flush=True)
    finally:
        ray.shutdown()
    out = pathlib.Path(args.out)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
