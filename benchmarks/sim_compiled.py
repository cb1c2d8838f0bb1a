"""Simulator throughput, compiled modules vs Python sources, on the PASCAL setting.

``python benchmarks/sim_compiled.py [--requests 2000] [--runs 5] [--rate medium]``: one
``simulate()`` of ``benchmarks/policies.py``'s PASCAL setting (8 instances, 32B model, a
low / medium / high arrival rate)
per child process, the two implementations alternated (``reasonserve.native``
picks at import: ``REASONSERVE_PURE_PYTHON=0/1``), medians of the runs' CPU and wall
seconds, simulated requests per minute of each, and a hash over every request's
timeline, the placements and migrations, which must be the same both ways. Writes
``benchmarks/results/sim_compiled[_<rate>_<requests>].json`` (the suffix unless medium, 2000).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

import _harness

HERE = pathlib.Path(__file__).resolve().parent

CHILD = """
import hashlib, json, pathlib, sys, time
sys.path.insert(0, {here!r})
import policies as P
from _policies_speed import _outcome
from reasonserve import native
from reasonserve.sim import load_lengths, poisson_workload, simulate
table = load_lengths("servegen", pathlib.Path({data!r}), seed=0)
reqs = poisson_workload(table, P.RATE_FRACTIONS[{rate!r}] * P._capacity_rps(table, P.CONFIG), {n}, seed=0)
cpu, wall = time.process_time(), time.perf_counter()
res = simulate(reqs, P.CONFIG, *P.SETUPS["pascal"])
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
outcome = repr(_outcome(res))
print(json.dumps({{"compiled": native.compiled(), "cpu_s": cpu, "wall_s": wall, "steps": res.steps,
                  "hash": hashlib.sha256(outcome.encode()).hexdigest()}}))
"""


def _run(pure: bool, n: int, rate: str, data: pathlib.Path) -> dict:
    env = {**os.environ, "REASONSERVE_PURE_PYTHON": "1" if pure else "0"}
    code = CHILD.format(here=str(HERE), data=str(data), n=n, rate=rate)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rate", choices=("low", "medium", "high"), default="medium")
    parser.add_argument("--data", type=pathlib.Path, default=HERE.parent.parent / "shared" / "data")
    args = parser.parse_args()
    print(f"cpu: {_harness.machine('cpu')['cpu']}", flush=True)
    runs: dict[str, list[dict]] = {"compiled": [], "sources": []}
    for _ in range(args.runs):
        for label in runs:
            run = _run(label == "sources", args.requests, args.rate, args.data)
            if run["compiled"] != (label == "compiled"):
                raise SystemExit(f"{label} asked, the child ran compiled={run['compiled']} (see make)")
            runs[label].append(run)
            print(f"  {label}: CPU {run['cpu_s']:.3f} s, wall {run['wall_s']:.3f} s", flush=True)
    hashes = {r["hash"] for rs in runs.values() for r in rs}
    out: dict = {"machine": _harness.machine("cpu"), "requests": args.requests, "rate": args.rate,
                 "identical": len(hashes) == 1}  # fmt: skip
    for label, rs in runs.items():
        cpu, wall = statistics.median(r["cpu_s"] for r in rs), statistics.median(r["wall_s"] for r in rs)
        per_cpu, per_wall = args.requests / cpu * 60, args.requests / wall * 60
        out[label] = {"runs": len(rs), "cpu_s": cpu, "wall_s": wall, "steps": rs[0]["steps"],
                      "cpu_s_all": [r["cpu_s"] for r in rs], "requests_per_cpu_minute": per_cpu,
                      "requests_per_wall_minute": per_wall}  # fmt: skip
        print(f"{label}: median CPU {cpu:.3f} s, wall {wall:.3f} s: {per_cpu:,.0f} simulated requests per "
              f"CPU minute, {per_wall:,.0f} per wall minute", flush=True)
    out["cpu_ratio"] = out["sources"]["cpu_s"] / out["compiled"]["cpu_s"]
    print(f"compiled over sources: x{out['cpu_ratio']:.2f} CPU; identical results: {out['identical']}")
    _harness.RESULTS.mkdir(parents=True, exist_ok=True)
    suffix = "" if (args.rate, args.requests) == ("medium", 2000) else f"_{args.rate}_{args.requests}"
    (_harness.RESULTS / f"sim_compiled{suffix}.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
