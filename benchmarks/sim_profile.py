"""The simulator's profile-table cost mode, fitted to the embedded engine, and the
sim-vs-engine error on one workload.

1. Measure ``Engine.step()`` times with the tiny random checkpoint the engine tests use
   (calibration workloads: batches of 1/4/8/16 requests, prompts of 16 and 96 tokens,
   each step timed 3 times, the median kept).
2. Fit ``seconds ~ c0 + c1*prefill + c2*decodes + c3*kv_tokens`` by least squares and
   save the table (``benchmarks/results/sim_profile_table.json``).
3. Run one *different* workload (12 requests, seeded lengths, all queued at t=0, FCFS)
   through the engine (3 runs, medians) and through the simulator with the fitted table
   and the same block size, KV blocks, seats and token budget; report the relative error
   of total time and mean TTFT.

    python benchmarks/sim_profile.py     # about a minute on 2 loaded cores
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import statistics
import sys
import tempfile
from dataclasses import replace

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from _harness import RESULTS, machine
from reasonserve.cost.engine_steps import measure_engine_steps
from reasonserve.cost.profile import fit_profile, save_profile
from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint
from reasonserve.policies import FCFSPolicy
from reasonserve.sim import SimConfig, SimRequest, simulate

ENGINE = EngineConfig(block_size=16, num_blocks=256, max_num_seqs=16, max_num_batched_tokens=256,
                      policy="fcfs")  # fmt: skip
SIM = SimConfig(num_instances=1, model="qwen2.5-7b", block_size=16, kv_capacity_tokens=256 * 16,
                max_num_seqs=16, max_num_batched_tokens=256, preemption="recompute")  # fmt: skip


def _prompts(rng: random.Random, lengths: list[int]) -> list[list[int]]:
    return [[rng.randrange(1, 256) for _ in range(n)] for n in lengths]


def _params(max_tokens: list[int]) -> list[SamplingParams]:
    return [SamplingParams(max_tokens=m, temperature=0.0, ignore_eos=True) for m in max_tokens]


def calibrate(engine: Engine, seed: int, repeats: int = 3) -> list:
    """The calibration steps, each timed ``repeats`` times (same lengths, so the same steps);
    a step's time is the median of its runs (robust to load spikes on a shared machine)."""
    runs = []
    for rep in range(repeats):  # fresh prompt tokens each time (no prefix-cache hits), same lengths
        rng, rows = random.Random(seed * 1000 + rep), []
        for batch in (1, 4, 8, 16):
            for prompt in (16, 96):
                r, _, _ = measure_engine_steps(engine, _prompts(rng, [prompt] * batch), _params([32] * batch))
                rows += r
        runs.append(rows)
    shape = [r.features() for r in runs[0]]
    if any([r.features() for r in run] != shape for run in runs):
        raise RuntimeError("calibration runs scheduled different steps")
    steps = zip(*runs, strict=True)
    return [replace(same[0], seconds=statistics.median(r.seconds for r in same)) for same in steps]


def compare(engine: Engine, table, seed: int, runs: int = 3) -> dict:
    rng = random.Random(seed + 1)
    lengths = [rng.randint(8, 200) for _ in range(12)]
    outputs = [rng.randint(8, 64) for _ in range(12)]
    totals, ttfts = [], []
    for _ in range(runs):
        prompts = _prompts(rng, lengths)  # fresh tokens each run: no prefix-cache hits
        _, outs, total = measure_engine_steps(engine, prompts, _params(outputs))
        totals.append(total)
        ttfts.append(statistics.fmean(o.metrics.first_token_s - o.metrics.arrival_s for o in outs))
    pairs = enumerate(zip(lengths, outputs, strict=True))
    reqs = [SimRequest(f"q{i:02d}", 0.0, n, 0, m) for i, (n, m) in pairs]
    config = SimConfig(**{**{f: getattr(SIM, f) for f in SIM.__dataclass_fields__}, "profile": table})
    res = simulate(reqs, config, FCFSPolicy)
    sim_total = max(s.finished_s for s in res.sequences)
    sim_ttft = statistics.fmean(s.first_token_s - s.req.arrival_s for s in res.sequences)
    engine_total, engine_ttft = statistics.median(totals), statistics.median(ttfts)  # as the table's steps
    return {"prompt_tokens": lengths, "output_tokens": outputs, "engine_total_s": totals,
            "engine_mean_ttft_s": ttfts, "sim_total_s": sim_total, "sim_mean_ttft_s": sim_ttft,
            "total_error": sim_total / engine_total - 1,
            "mean_ttft_error": sim_ttft / engine_ttft - 1}  # fmt: skip


def main() -> None:
    torch.set_num_threads(1)  # one core per process: the machine is shared
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine.from_pretrained(make_tiny_checkpoint(tmp), ENGINE)
        calibrate(engine, seed=99)  # warm-up, discarded
        rows = calibrate(engine, seed=0)
        source = "reasonserve tiny checkpoint (2 layers, hidden 64), CPU, torch 1 thread"
        table = fit_profile(rows, source=source)
        errors = sorted(table.relative_errors())
        comparison = compare(engine, table, seed=0)
    RESULTS.mkdir(exist_ok=True)
    save_profile(table, RESULTS / "sim_profile_table.json")
    result = {"machine": machine("cpu"), "engine_config": repr(ENGINE), "sim_config": repr(SIM),
              "rows": len(rows), "coefficients": table.coefficients,
              "fit_relative_error": {"median": statistics.median(errors),
                                     "p90": errors[int(0.9 * len(errors))], "max": errors[-1]},
              "comparison": comparison}  # fmt: skip
    (RESULTS / "sim_profile.json").write_text(json.dumps(result, indent=1))
    c = comparison
    print(f"fit over {len(rows)} steps: coefficients {table.coefficients}; "
          f"relative error median {result['fit_relative_error']['median']:.1%}, p90 "
          f"{result['fit_relative_error']['p90']:.1%}")  # fmt: skip
    print(f"total time: engine {statistics.median(c['engine_total_s']):.3f} s, sim {c['sim_total_s']:.3f} s "
          f"({c['total_error']:+.1%}); mean TTFT: engine {statistics.median(c['engine_mean_ttft_s']):.3f} s, "
          f"sim {c['sim_mean_ttft_s']:.3f} s ({c['mean_ttft_error']:+.1%})")  # fmt: skip


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, nothing else
    main()
