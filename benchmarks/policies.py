"""PASCAL (+ NoMigration / NonAdaptive ablations) vs FCFS vs round-robin on the simulator; decide() speed.

Settings are fixed here, before any comparison runs, from the PASCAL paper (8 instances,
a 32B reasoning model on H100, quantum 500, demotion at 5000 tokens, TTFAT 0.25 s, TPOT
100 ms, QoE < 0.95 is a violation, swap preemption), the H100 datasheet and the
ServeGen DeepSeek-R1 trace. Arrival rates are fractions (0.5, 0.75, 1.0) of a capacity
estimate computed from the cost model before running anything (see ``_capacity_rps``).
Migration at the reasoning->answering transition costs 40 ms per 2048 tokens (PASCAL
§IV-B). The comparison runs exact steps (one policy decision per engine step);
``sim_speed`` times exact against coarse steps (``COARSE_STEPS`` decode iterations per
decision) on the medium-rate PASCAL workload and reports how far the coarse run's
metrics move. ``pascal_starving_first`` is PASCAL with an option beyond the paper
(``PascalPolicy(starving_first=...)``, issue #14), reported beside it, not in the headline,
at the rates in ``EXTRA_RATES`` only: it declares no quiet steps while a waiting reader
can still run dry, so it runs stepped (one decision per engine step: about 100 s per
2,000 requests at the medium rate, over 40 min at the high one).

    python benchmarks/policies.py --quick     # 400 requests per rate (a few minutes)
    python benchmarks/policies.py             # 2000 requests per rate
    python benchmarks/policies.py --only pascal   # this section only (merged into the results)
    python benchmarks/policies.py --only pascal --workers 2   # the simulations in 2 processes
    python benchmarks/policies.py --collect   # join the standalone full runs' files (see ``collect``)
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time
from dataclasses import replace

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from _harness import RESULTS, machine
from _policies_speed import decide_speed, sim_speed
from reasonserve.policies import FCFSPolicy, RoundRobinPolicy
from reasonserve.policies.pacer import TokenPacer
from reasonserve.policies.pascal import PascalPolicy
from reasonserve.policies.router import LeastKVRouter, PascalRouter
from reasonserve.sim import SimConfig, load_lengths, poisson_workload, simulate, summarize

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = SimConfig(num_instances=8, hardware="h100", model="qwen2.5-32b", preemption="swap")
COARSE_STEPS = 16  # decode iterations per decision in sim_speed's coarse run (one KV block)
RATE_FRACTIONS = {"low": 0.5, "medium": 0.75, "high": 1.0}
SETUPS = {  # name: (policy factory, router) — baselines place by least KV footprint (paper §V-A)
    "fcfs": (FCFSPolicy, LeastKVRouter()),
    "rr": (lambda: RoundRobinPolicy(quantum=500, mode="swap"), LeastKVRouter()),
    "pascal": (lambda: PascalPolicy(quantum=500, demote_threshold_tokens=5000, mode="swap"), PascalRouter()),
    "pascal_nomigration": (  # ablation (paper §V-D): the answering phase stays where it reasoned
        lambda: PascalPolicy(quantum=500, demote_threshold_tokens=5000, mode="swap"),
        PascalRouter(migrate=False),
    ),
    "pascal_nonadaptive": (  # ablation (paper §V-D): always migrate to Algorithm 2's choice
        lambda: PascalPolicy(quantum=500, demote_threshold_tokens=5000, mode="swap"),
        PascalRouter(adaptive=False),
    ),
    "pascal_starving_first": (  # beyond the paper (issue #14): resume a waiting answer whose reader ran dry
        lambda: PascalPolicy(quantum=500, demote_threshold_tokens=5000, mode="swap",
                             starving_first=TokenPacer(CONFIG.tpot_slo_s)),
        PascalRouter(),
    ),
}
EXTRA_RATES = {"pascal_starving_first": ("low", "medium")}  # policy: rates it runs at (default: all)
PAPER = {
    "setting": "8x H100 96GB, DeepSeek-R1-Distill-Qwen-32B, AlpacaEval2.0/Arena-Hard via o4-mini lengths",
    "tail_ttft_change_vs_fcfs": "-61% (AlpacaEval2.0), -72% (Arena-Hard), 'up to', per 256-token bin",
    "tail_ttft_change_vs_rr": "-33% / -29%",
    "throughput_change": "within 3%",
    "slo_violations": "PASCAL lower or comparable to both baselines at every rate",
    "ablation_nomigration": "worse tail TTFT at high rate; P99 blocking latency up to 27.39 s; markedly "
    "higher answering-phase SLO violations than PASCAL (Fig. 13)",
    "ablation_nonadaptive": "similar TTFT; SLO violations 7.45% vs 0.69% for PASCAL at high rate (Fig. 15)",
}


def _capacity_rps(table, config: SimConfig) -> float:
    """Requests/s the cluster sustains if every instance keeps its KV full of average
    requests decoding at the roofline step time (an estimate fixed before any run)."""
    prompt = statistics.fmean(r[0] for r in table.rows)
    output = statistics.fmean(r[1] + r[2] for r in table.rows)
    context = prompt + output / 2
    batch = max(1, min(config.max_num_seqs, int(config.num_blocks * config.block_size / context)))
    step = config.cost_model().step_s([(1, int(context))] * batch)
    return config.num_instances * batch / (output * step)


def _headline(by_policy: dict) -> dict:
    def tail_change(base: str) -> dict:
        a, b = by_policy["pascal"]["tail_ttft_by_bin_s"], by_policy[base]["tail_ttft_by_bin_s"]
        changes = {k: a[k] / b[k] - 1 for k in a if k in b and b[k] > 0}
        p99 = by_policy["pascal"]["ttft_s"]["p99"] / by_policy[base]["ttft_s"]["p99"] - 1
        return {"best_bin": min(changes.values()), "worst_bin": max(changes.values()), "p99_overall": p99}

    tput = by_policy["pascal"]["throughput_tokens_s"]
    return {
        "tail_ttft_change_vs_fcfs": tail_change("fcfs"),
        "tail_ttft_change_vs_rr": tail_change("rr"),
        "throughput_change_vs_fcfs": tput / by_policy["fcfs"]["throughput_tokens_s"] - 1,
        "throughput_change_vs_rr": tput / by_policy["rr"]["throughput_tokens_s"] - 1,
        "slo_violation_rate": {p: s["slo_violation_rate"] for p, s in by_policy.items()},
        "tail_ttft_change_vs_nomigration": tail_change("pascal_nomigration"),
        "tail_ttft_change_vs_nonadaptive": tail_change("pascal_nonadaptive"),
        "migrations": {p: s["migrations"] for p, s in by_policy.items()},
    }


def _grid_point(job: tuple) -> tuple[str, str, dict]:
    """One (rate, policy) simulation of the comparison; a top-level function so that a
    process pool can run it (the workload is rebuilt from the seed: the same requests)."""
    label, name, num_requests, data_dir, seed = job
    table = load_lengths("servegen", data_dir, seed=seed)
    rate = RATE_FRACTIONS[label] * _capacity_rps(table, CONFIG)
    reqs = poisson_workload(table, rate, num_requests, seed=seed)
    factory, router = SETUPS[name]
    start = time.perf_counter()
    summary = summarize(simulate(reqs, CONFIG, factory, router))
    summary["wall_s"] = time.perf_counter() - start
    summary["sim_requests_per_wall_minute"] = num_requests / summary["wall_s"] * 60
    s = summary
    print(f"{label:6s} {name:22s} p99 TTFT {s['ttft_s']['p99']:8.1f} s  SLO viol "
          f"{s['slo_violation_rate']:.3f}  tput {s['throughput_tokens_s']:8.0f} tok/s  "
          f"migr {s['migrations']:5d}  wall {s['wall_s']:.0f} s", flush=True)  # fmt: skip
    return label, name, summary


def _grid(jobs: list, workers: int) -> list[tuple[str, str, dict]]:
    if workers <= 1:
        return [_grid_point(job) for job in jobs]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers) as pool:  # results do not depend on the process they ran in
        return list(pool.map(_grid_point, jobs))


def run_comparison(num_requests: int, data_dir: pathlib.Path, seed: int, workers: int = 1) -> dict:
    table = load_lengths("servegen", data_dir, seed=seed)
    capacity = _capacity_rps(table, CONFIG)
    skipped = {name: [r for r in RATE_FRACTIONS if r not in rates] for name, rates in EXTRA_RATES.items()}
    out = {"capacity_estimate_rps": capacity, "lengths": table.source, "rates": {}, "not_run": skipped}
    medium = poisson_workload(table, RATE_FRACTIONS["medium"] * capacity, num_requests, seed=seed)
    coarse = replace(CONFIG, decode_steps_per_event=COARSE_STEPS)
    out["sim_speed"] = sim_speed(medium, coarse, *SETUPS["pascal"])  # timed alone, before the grid
    jobs = [(label, name, num_requests, data_dir, seed) for label in RATE_FRACTIONS for name in SETUPS
            if label in EXTRA_RATES.get(name, RATE_FRACTIONS)]  # fmt: skip
    done = {(label, name): summary for label, name, summary in _grid(jobs, workers)}
    for label, fraction in RATE_FRACTIONS.items():
        by_policy = {name: done[label, name] for name in SETUPS if (label, name) in done}
        out["rates"][label] = {
            "rate_rps": fraction * capacity,
            "policies": by_policy,
            "headline": _headline(by_policy),
        }
    return out


def markdown(result: dict) -> str:
    """The docs/benchmarks.md tables from a results file."""
    lines = ["| rate | req/s | policy | P99 TTFT s | worst-bin tail TTFT s | SLO viol. | TTFAT met | tok/s "
             "| preempt. | migr. |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for label, rate in result["rates"].items():
        for name, s in rate["policies"].items():
            worst = max(s["tail_ttft_by_bin_s"].values())
            lines.append(f"| {label} | {rate['rate_rps']:.2f} | {name} | {s['ttft_s']['p99']:.1f} | "
                         f"{worst:.1f} | {s['slo_violation_rate']:.3f} | {s['ttfat_attainment']:.3f} | "
                         f"{s['throughput_tokens_s']:.0f} | {s['preemptions']} | "
                         f"{s.get('migrations', '')} |")  # fmt: skip
    lines += ["", "| rate | tail TTFT vs FCFS (best bin / worst bin / P99) | vs RR (best / worst / P99) | "
              "throughput vs FCFS / RR |", "|---|---|---|---|"]  # fmt: skip
    for label, rate in result["rates"].items():
        h = rate["headline"]
        f, r = h["tail_ttft_change_vs_fcfs"], h["tail_ttft_change_vs_rr"]
        lines.append(f"| {label} | {f['best_bin']:+.0%} / {f['worst_bin']:+.0%} / "
                     f"{f['p99_overall']:+.0%} | "
                     f"{r['best_bin']:+.0%} / {r['worst_bin']:+.0%} / {r['p99_overall']:+.0%} | "
                     f"{h['throughput_change_vs_fcfs']:+.1%} / "
                     f"{h['throughput_change_vs_rr']:+.1%} |")  # fmt: skip
    return "\n".join(lines + _ablation_lines(result))


def _ablation_lines(result: dict) -> list[str]:
    first = next(iter(result["rates"].values()))["headline"]
    if "tail_ttft_change_vs_nomigration" not in first:
        return []
    lines = ["", "| rate | SLO viol. PASCAL / NoMigration / NonAdaptive / FCFS / RR | tail TTFT vs "
             "NoMigration (best / worst / P99) | vs NonAdaptive (best / worst / P99) |",
             "|---|---|---|---|"]  # fmt: skip
    for label, rate in result["rates"].items():
        h, v = rate["headline"], rate["headline"]["slo_violation_rate"]
        n, a = h["tail_ttft_change_vs_nomigration"], h["tail_ttft_change_vs_nonadaptive"]
        lines.append(f"| {label} | {v['pascal']:.3f} / {v['pascal_nomigration']:.3f} / "
                     f"{v['pascal_nonadaptive']:.3f} / {v['fcfs']:.3f} / {v['rr']:.3f} | "
                     f"{n['best_bin']:+.0%} / {n['worst_bin']:+.0%} / {n['p99_overall']:+.0%} | "
                     f"{a['best_bin']:+.0%} / {a['worst_bin']:+.0%} / {a['p99_overall']:+.0%} |")  # fmt: skip
    return lines


COLLECTED = {  # policies.json key: (file the standalone script writes, key inside it or None: all of it)
    "dynasor": ("dynasor.json", None),  # python benchmarks/_repro_dynasor.py --workers N
    "flashtts": ("flashtts.json", "flashtts"),  # python benchmarks/_repro_flashtts.py --setting S ... --merge
    "flashtts_longcot": ("flashtts_longcot.json", "flashtts"),  # the same with --workload longcot
}


def collect(result: dict) -> dict:
    """Join the sections the standalone scripts wrote (their full runs take hours on 2
    cores, so they run per setting side by side and merge): each file must be a full,
    complete run; the file's name and modification time are recorded beside it."""
    sources = {}
    for key, (name, inner) in COLLECTED.items():
        path = RESULTS / name
        if not path.exists():
            print(f"collect: {name} not found, {key!r} left as it was", file=sys.stderr)
            continue
        saved = json.loads(path.read_text())
        quick = saved.get("quick", saved.get("setting", {}).get("quick"))
        if quick or saved.get("complete") is False:
            raise SystemExit(f"collect: {name} is a quick or incomplete run; re-run it in full")
        result[key] = saved[inner] if inner else saved
        sources[key] = {"file": name, "modified_utc": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(path.stat().st_mtime))}  # fmt: skip
    result["collected_from"] = sources
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="400 requests per rate instead of 2000")
    parser.add_argument("--data", type=pathlib.Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown", action="store_true", help="print the docs tables from the last results")
    parser.add_argument("--only", action="append", choices=("pascal", "dynasor", "flashtts"),
                        help="run only this section (repeatable); merge into the results")  # fmt: skip
    parser.add_argument("--collect", action="store_true",
                        help="join the standalone full runs' results (dynasor.json, flashtts.json, "
                        "flashtts_longcot.json) into policies.json and stop")  # fmt: skip
    parser.add_argument("--workers", type=int, default=1,
                        help="PASCAL grid and Dynasor sweep: simulations in this many processes "
                        "(same results)")  # fmt: skip
    args = parser.parse_args()
    if args.markdown:
        saved = json.loads((RESULTS / "policies.json").read_text())
        print(markdown(saved))
        if "dynasor" in saved:
            import _repro_dynasor

            print("\n" + _repro_dynasor.markdown(saved["dynasor"]))
        if "flashtts" in saved:
            import _repro_flashtts

            print("\n" + _repro_flashtts.markdown(saved["flashtts"]))
        if "flashtts_longcot" in saved:
            import _repro_flashtts

            print("\n" + _repro_flashtts.markdown(saved["flashtts_longcot"]))
        return
    sections = args.only or ["pascal", "dynasor", "flashtts"]
    path = RESULTS / "policies.json"
    if args.collect:
        path.write_text(json.dumps(collect(json.loads(path.read_text()) if path.exists() else {}),
                                   indent=1, default=str))  # fmt: skip
        print(f"wrote {path}")
        return
    result = json.loads(path.read_text()) if args.only and path.exists() else {}  # --only: merge
    if "pascal" in sections:
        speed = decide_speed()
        comparison = run_comparison(400 if args.quick else 2000, args.data, args.seed, args.workers)
        result.update({"machine": machine("cpu"), "config": repr(CONFIG),
                       "num_blocks_per_instance": CONFIG.num_blocks, "quick": args.quick, "seed": args.seed,
                       "decide_ms_median": speed, "paper": PAPER, **comparison})  # fmt: skip
    if "dynasor" in sections:
        import _repro_dynasor  # Dynasor vs SGLang-LPM vs Parrot App-FIFO (SC programs)

        result["dynasor"] = _repro_dynasor.run(args.quick, args.data, args.seed, args.workers)
    if "flashtts" in sections:
        import _repro_flashtts  # FlashTTS beam search: baseline vs prefix order, roofline KV, speculation

        result["flashtts"] = _repro_flashtts.run(args.quick, args.data, args.seed)
    RESULTS.mkdir(exist_ok=True)
    path.write_text(json.dumps(result, indent=1, default=str))  # the mode is recorded in the file ("quick")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
