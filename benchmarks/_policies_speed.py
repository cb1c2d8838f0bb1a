"""Speed half of benchmarks/policies.py: decide() on long queues and simulator throughput.

* ``decide_speed``: median wall and process-CPU time of ``decide()`` for every policy on
  a view with 1,000 / 10,000 / 100,000 queued requests and 256 running ones (the same
  view each call: a cold decide, no state carried between views helps), the policies
  alternated within each repeat, and each one's CPU median over FCFS's and over
  ``sort_ref``'s (Python's sort of the waiting queue by arrival and id, a base no policy
  change moves) in the same run (the machine is shared: the ratio is the steadier
  figure). ``shuffled=True`` adds the 10,000 view with its waiting queue in random order
  (hosts queue by arrival, so the sorted queue is the common case; a shuffled one costs
  the sorts their full n log n). The view's clock is 100 s, past Dynasor's 60 s
  starvation bound for every program up to 10,000 requests (they arrive 1 ms apart):
  ``sjf=True`` adds the 10,000 view at 20 s, where no program is escalated and Dynasor
  computes its SJF estimate. Each case runs twice, alternated: from the objects and with
  the waiting queue's columns as a host keeps them (``with_host_columns``: a ColumnStore
  filled before timing, its snapshot in ``SchedulerView.waiting_columns``). ``store=True``
  adds the host's own cost per step (``store_step_cost``: 16 admits + 16 arrivals on a
  10,000 queue, then one snapshot), measured apart from decide().
* ``sim_speed``: the PASCAL setting (8 instances, the medium rate) on one workload,
  stepped (one policy decision per engine step), exact (the default: the steps a policy
  declares decision-free run as one event, same results) and with the benchmark's
  coarse steps: simulated requests per minute of wall time and of process CPU time (the
  machine is shared: CPU time is the steadier figure), whether exact reproduced stepped
  bit for bit, and how far the coarse run's headline metrics move from the exact run's.
"""

from __future__ import annotations

import dataclasses
import os
import random
import statistics
import time

import _harness
from reasonserve.core import Phase
from reasonserve.core.column_store import ColumnStore
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies import FCFSPolicy, RoundRobinPolicy
from reasonserve.policies._order import ordered_plain
from reasonserve.policies.app_fifo import AppFIFOPolicy
from reasonserve.policies.dynasor import DynasorPolicy
from reasonserve.policies.flashtts import PrefixAwarePolicy
from reasonserve.policies.lpm import LPMPolicy
from reasonserve.policies.pascal import PascalPolicy
from reasonserve.sim import load_lengths, poisson_workload, simulate, summarize

__all__ = ["big_view", "decide_speed", "sim_speed", "store_step_cost", "with_host_columns"]


def big_view(
    n_waiting: int, n_running: int = 256, shuffle_seed: int | None = None, now_s: float = 100.0
) -> SchedulerView:
    def req(i: int, running: bool) -> RequestView:
        phase = (
            (Phase.PREFILL, Phase.REASONING, Phase.ANSWERING)[i % 3] if running or i % 2 else Phase.PREFILL
        )
        return RequestView(f"{'r' if running else 'w'}{i:06d}", i * 0.001, phase, 100 + i % 900, 0, i % 700,
                           num_blocks=8 if running else 0, blocks_needed=1 if running else 8 + i % 50,
                           enqueued_s=i * 0.001, quantum_used=i % 600 if running else 0,
                           program_id=f"p{i // 8}", prefix_hashes=(i % 7, i % 13))  # fmt: skip

    running = tuple(req(i, True) for i in range(n_running))
    waiting = [req(i, False) for i in range(n_waiting)]
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(waiting)
    return SchedulerView(now_s, tuple(waiting), running, 500, 16, 512, 3000, 8192)


def _decide_times(policies: dict, views: dict[str, SchedulerView], repeats: int) -> dict:
    """Per view variant and policy: median wall and CPU ms of ``decide(view)``, policies and
    variants alternated (ratios to FCFS's and to ``sort_ref``'s on the object view)."""
    runs = [(v, name) for v in views for name in policies]
    wall: dict[tuple, list[float]] = {k: [] for k in runs}
    cpu: dict[tuple, list[float]] = {k: [] for k in runs}
    for v, name in runs:
        policies[name].decide(views[v])  # warm-up
    for _ in range(repeats):
        for v, name in runs:
            w, c = time.perf_counter(), time.process_time()
            policies[name].decide(views[v])
            cpu[v, name].append(time.process_time() - c)
            wall[v, name].append(time.perf_counter() - w)
    med = statistics.median
    base = next(iter(views))
    return {v: {name: {"wall_ms": med(wall[v, name]) * 1e3, "cpu_ms": med(cpu[v, name]) * 1e3,
                       "cpu_vs_fcfs": med(cpu[v, name]) / med(cpu[base, "fcfs"]),
                       "cpu_vs_sort": med(cpu[v, name]) / med(cpu[base, "sort_ref"])} for name in policies}
            for v in views}  # fmt: skip


def with_host_columns(view: SchedulerView) -> SchedulerView:
    """``view`` with its waiting queue's columns as a host keeps them (a ColumnStore filled
    once, its snapshot; the views come from the snapshot, as the engine's scheduler does)."""
    store = ColumnStore()
    for r in view.waiting:
        store.append(r)
    waiting, columns = store.snapshot()
    return dataclasses.replace(view, waiting=waiting, waiting_columns=columns)


def store_step_cost(n_waiting: int = 10_000, changes: int = 16, steps: int = 300) -> dict:
    """A host's ColumnStore per step on an ``n_waiting`` queue: ``changes`` admits (removed
    from the head, as FCFS-like admission does) and ``changes`` arrivals, then one snapshot.
    Median CPU ms of the updates and of the snapshot, measured separately."""
    view = big_view(n_waiting + changes * (steps + 1), n_running=0)
    reqs, store = view.waiting, ColumnStore()
    for r in reqs[:n_waiting]:
        store.append(r)
    head, tail, updates, snaps = 0, n_waiting, [], []
    store.snapshot()
    for _ in range(steps):
        c = time.process_time()
        for r in reqs[head : head + changes]:
            store.remove(r.request_id)
        for r in reqs[tail : tail + changes]:
            store.append(r)
        updates.append(time.process_time() - c)
        c = time.process_time()
        store.snapshot()
        snaps.append(time.process_time() - c)
        head, tail = head + changes, tail + changes
    out = {"updates_ms": statistics.median(updates) * 1e3, "snapshot_ms": statistics.median(snaps) * 1e3}
    print(f"ColumnStore at {n_waiting} waiting, {changes} admits + {changes} arrivals a step, median of "
          f"{steps}: updates {out['updates_ms']:.3f} ms CPU, snapshot {out['snapshot_ms']:.3f} ms CPU",
          flush=True)  # fmt: skip
    return out


class _SortReference:
    """The ratio base that no policy change moves: Python's sort of the waiting queue by
    (arrival, request id), the bulk of FCFS's decide before issue #14's speed work."""

    name = "sort_ref"

    def decide(self, view: SchedulerView) -> list:
        return ordered_plain(view.waiting, "arrival_s")


def decide_speed(
    sizes: tuple[int, ...] = (1_000, 10_000, 100_000),
    shuffled: bool = False,
    sjf: bool = False,
    store: bool = False,
) -> dict:
    policies = {"sort_ref": _SortReference(), "fcfs": FCFSPolicy(),
                "round_robin": RoundRobinPolicy(quantum=500), "pascal": PascalPolicy(),
                "dynasor": DynasorPolicy(), "app_fifo": AppFIFOPolicy(), "lpm": LPMPolicy(),
                "flashtts_prefix": PrefixAwarePolicy()}  # fmt: skip
    cases = [(str(n), big_view(n), 15 if n <= 10_000 else 5) for n in sizes]
    if shuffled:
        cases.append(("10000 shuffled", big_view(10_000, shuffle_seed=0), 15))
    if sjf:  # at 100 s every program of the 10,000 view waited past Dynasor's 60 s bound
        cases.append(("10000 at 20 s", big_view(10_000, now_s=20.0), 15))
    print(f"CPU: {_harness.machine('cpu').get('cpu', '?')}, load average {_load()}", flush=True)
    out = {}
    for label, view, repeats in cases:
        views = {"objects": view, "host columns": with_host_columns(view)}
        times = _decide_times(policies, views, repeats)
        for variant, row in times.items():
            out[f"{label} {variant}"] = row
            cells = (f"{k} {v['wall_ms']:.2f} / {v['cpu_ms']:.2f} ({v['cpu_vs_fcfs']:.2f}x, "
                     f"{v['cpu_vs_sort']:.2f}x sort)" for k, v in row.items())  # fmt: skip
            print(f"decide() at {label} waiting + 256 running, {variant}, median ms wall / CPU (CPU / "
                  "FCFS's on objects): " + ", ".join(cells), flush=True)  # fmt: skip
    if store:
        out["column_store"] = store_step_cost()
    print(f"load average at the end {_load()}", flush=True)
    return out


def _load() -> str:
    """The 1/5/15-minute load averages (the machine is shared: timings are read beside them)."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def _timed(reqs, config, factory, router) -> tuple[object, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = simulate(reqs, config, factory, router)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def _outcome(result) -> tuple:
    """Everything a run produces: each request's timeline and counters, placements,
    migrations, steps, end time."""
    seqs = [dataclasses.astuple(s) for s in result.sequences]
    return seqs, result.end_s, result.steps, result.placements, result.migrations


def _row(reqs, cfg, runs: list[tuple[float, float]], summary: dict) -> dict:
    wall, cpu = (statistics.median(x) for x in zip(*runs, strict=True))
    n = len(reqs)
    return {"decode_steps_per_event": cfg.decode_steps_per_event, "skip_quiet_steps": cfg.skip_quiet_steps,
            "runs": len(runs), "wall_s": wall, "cpu_s": cpu, "requests_per_wall_minute": n / wall * 60,
            "requests_per_cpu_minute": n / cpu * 60, "p99_ttft_s": summary["ttft_s"]["p99"],
            "slo_violation_rate": summary["slo_violation_rate"],
            "ttfat_attainment": summary["ttfat_attainment"],
            "throughput_tokens_s": summary["throughput_tokens_s"], "steps": summary["steps"]}  # fmt: skip


def sim_speed(reqs, config, factory, router, repeats: int = 3) -> dict:
    """Stepped (one decision per engine step), exact (quiet stretches skipped, the
    default) and coarse steps on ``reqs`` (``config`` is the coarse one). Stepped and
    exact alternate ``repeats`` times (medians); coarse runs once. Records whether exact
    reproduced stepped to the last bit."""
    one = dataclasses.replace(config, decode_steps_per_event=1)
    modes = {"stepped": dataclasses.replace(one, skip_quiet_steps=False),
             "exact": dataclasses.replace(one, skip_quiet_steps=True)}  # fmt: skip
    runs: dict[str, list] = {m: [] for m in modes}
    results = {}
    for _ in range(repeats):
        for label, cfg in modes.items():
            results[label], wall, cpu = _timed(reqs, cfg, factory, router)
            runs[label].append((wall, cpu))
    coarse, wall, cpu = _timed(reqs, config, factory, router)
    runs["coarse"], results["coarse"], modes["coarse"] = [(wall, cpu)], coarse, config
    out = {label: _row(reqs, modes[label], runs[label], summarize(results[label])) for label in modes}
    for label, row in out.items():
        print(f"sim {label} (k={row['decode_steps_per_event']}): {len(reqs)} requests, median of "
              f"{row['runs']}: wall {row['wall_s']:.1f} s ({row['requests_per_wall_minute']:.0f}/min), "
              f"CPU {row['cpu_s']:.1f} s ({row['requests_per_cpu_minute']:.0f}/min)", flush=True)  # fmt: skip
    e, c, s = out["exact"], out["coarse"], out["stepped"]
    out["exact_identical_to_stepped"] = _outcome(results["exact"]) == _outcome(results["stepped"])
    speedup = {"cpu_speedup": s["cpu_s"] / e["cpu_s"], "wall_speedup": s["wall_s"] / e["wall_s"]}
    out["exact_vs_stepped"] = speedup
    print(f"sim exact vs stepped: identical {out['exact_identical_to_stepped']}, CPU x"
          f"{speedup['cpu_speedup']:.1f}, wall x{speedup['wall_speedup']:.1f}", flush=True)  # fmt: skip
    out["coarse_vs_exact"] = {
        "p99_ttft_change": c["p99_ttft_s"] / e["p99_ttft_s"] - 1,
        "slo_violation_rate_diff": c["slo_violation_rate"] - e["slo_violation_rate"],
        "ttfat_attainment_diff": c["ttfat_attainment"] - e["ttfat_attainment"],
        "throughput_change": c["throughput_tokens_s"] / e["throughput_tokens_s"] - 1,
    }
    return out


def main() -> None:
    """``python benchmarks/_policies_speed.py [--requests N] [--repeats R]``: ``sim_speed``
    alone, on the workload ``benchmarks/policies.py`` uses (PASCAL, medium rate)."""
    import argparse
    import pathlib

    import policies

    parser = argparse.ArgumentParser(description="simulator throughput (sim_speed) alone")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", type=pathlib.Path, default=policies.ROOT.parent / "shared" / "data")
    args = parser.parse_args()
    table = load_lengths("servegen", args.data, seed=0)
    rate = policies.RATE_FRACTIONS["medium"] * policies._capacity_rps(table, policies.CONFIG)
    reqs = poisson_workload(table, rate, args.requests, seed=0)
    coarse = dataclasses.replace(policies.CONFIG, decode_steps_per_event=policies.COARSE_STEPS)
    print(f"cpu: {_harness.machine('cpu')['cpu']}", flush=True)
    sim_speed(reqs, coarse, *policies.SETUPS["pascal"], repeats=args.repeats)


if __name__ == "__main__":
    main()
