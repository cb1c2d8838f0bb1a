"""Simulator throughput on the PASCAL setting, this tree against a baseline tree.

``python benchmarks/sim_speed.py [--baseline SRC] [--requests 2000] [--runs 5] [--rate high]``:
one ``simulate()`` of ``benchmarks/policies.py``'s PASCAL setting (8 instances, 32B model, a
low / medium / high arrival rate) per child process; with ``--baseline`` (the ``src``
folder of another checkout: ``git archive <commit> src benchmarks | tar -x -C /tmp/base``)
the two trees are alternated run by run, each with the setting of its own ``benchmarks/``
beside its ``src`` (this tree's when there is none). Prints and writes the medians (and
minima) of the runs' CPU and wall seconds, simulated requests per minute of each, and a
hash over every request's timeline and counters, the placements and migrations (equal
hashes: the two trees simulate the same run). Writes
``benchmarks/results/sim_speed_<rate>_<requests>.json``. The issue's floor: >= 50,000
simulated requests per wall minute at the high rate.
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
SRC = HERE.parent / "src"

CHILD = """
import dataclasses, hashlib, json, pathlib, sys, time
sys.path.insert(0, {here!r})
import policies as P
from reasonserve.sim import load_lengths, poisson_workload, simulate
table = load_lengths("servegen", pathlib.Path({data!r}), seed=0)
reqs = poisson_workload(table, P.RATE_FRACTIONS[{rate!r}] * P._capacity_rps(table, P.CONFIG), {n}, seed=0)
cpu, wall = time.process_time(), time.perf_counter()
res = simulate(reqs, P.CONFIG, *P.SETUPS["pascal"])
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
seqs = [(s.request_id, s.first_token_s, s.end_of_thinking_s, s.answer_times, s.finished_s, s.finish_reason,
         s.num_output, s.num_preemptions, s.num_swaps, s.num_migrations) for s in res.sequences]
moves = [dataclasses.astuple(m) for m in res.migrations]
outcome = repr((seqs, res.end_s, res.steps, res.placements, moves))
print(json.dumps({{"cpu_s": cpu, "wall_s": wall, "steps": res.steps,
                  "hash": hashlib.sha256(outcome.encode()).hexdigest()}}))
"""


def _run(src: pathlib.Path, n: int, rate: str, data: pathlib.Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    benchmarks = src.parent / "benchmarks"
    code = CHILD.format(here=str(benchmarks if benchmarks.is_dir() else HERE), data=str(data), n=n, rate=rate)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _summary(runs: list[dict], n: int) -> dict:
    cpu, wall = statistics.median(r["cpu_s"] for r in runs), statistics.median(r["wall_s"] for r in runs)
    return {"runs": len(runs), "cpu_s": cpu, "wall_s": wall, "steps": runs[0]["steps"],
            "cpu_s_min": min(r["cpu_s"] for r in runs), "wall_s_min": min(r["wall_s"] for r in runs),
            "cpu_s_all": [r["cpu_s"] for r in runs], "wall_s_all": [r["wall_s"] for r in runs],
            "requests_per_cpu_minute": n / cpu * 60, "requests_per_wall_minute": n / wall * 60}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=pathlib.Path, help="the src folder of a baseline checkout")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rate", choices=("low", "medium", "high"), default="high")
    parser.add_argument("--data", type=pathlib.Path, default=HERE.parent.parent / "shared" / "data")
    args = parser.parse_args()
    trees = {"this tree": SRC} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    print(f"cpu: {_harness.machine('cpu')['cpu']}, load average {os.getloadavg()}", flush=True)
    runs: dict[str, list[dict]] = {label: [] for label in trees}
    for _ in range(args.runs):
        for label, src in trees.items():
            run = _run(src, args.requests, args.rate, args.data)
            runs[label].append(run)
            print(f"  {label}: CPU {run['cpu_s']:.3f} s, wall {run['wall_s']:.3f} s", flush=True)
    out: dict = {"machine": _harness.machine("cpu"), "requests": args.requests, "rate": args.rate,
                 "trees": {k: str(v) for k, v in trees.items()},
                 "identical": len({r["hash"] for rs in runs.values() for r in rs}) == 1}  # fmt: skip
    for label, rs in runs.items():
        row = out[label] = _summary(rs, args.requests)
        print(f"{label}: median CPU {row['cpu_s']:.3f} s (min {row['cpu_s_min']:.3f}), "
              f"wall {row['wall_s']:.3f} s (min {row['wall_s_min']:.3f}): "
              f"{row['requests_per_cpu_minute']:,.0f} simulated requests per CPU minute, "
              f"{row['requests_per_wall_minute']:,.0f} per wall minute", flush=True)  # fmt: skip
    if args.baseline:
        this, base = out["this tree"], out["baseline"]
        out["cpu_ratio"] = this["cpu_s"] / base["cpu_s"]
        out["cpu_min_ratio"] = this["cpu_s_min"] / base["cpu_s_min"]
        print(f"this tree over the baseline: x{out['cpu_ratio']:.3f} CPU (medians), "
              f"x{out['cpu_min_ratio']:.3f} (minima); identical: {out['identical']}")
    _harness.RESULTS.mkdir(parents=True, exist_ok=True)
    (_harness.RESULTS / f"sim_speed_{args.rate}_{args.requests}.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
