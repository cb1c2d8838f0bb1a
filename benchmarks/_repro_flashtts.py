"""FlashTTS reproduction on the beam-search simulator: precise goodput and completion latency
of a vLLM-like baseline vs prefix-aware ordering, roofline KV allocation, speculative beam
extension (with look-ahead verification), each alone and all together.

Settings, fixed here before any comparison ran (from the paper §6.1, Fig. 12-17, the
FlashTTS artifact's configs as described by a third-party analysis, and the data):

* GPU: RTX 4090 24 GB (the sim's datasheet preset); the paper's three generator+verifier
  pairs with its memory fractions: 1.5B+1.5B at 40%, 1.5B+7B and 7B+1.5B at 90%
  (:data:`reasonserve.sim.beam.models.BEAM_SETTINGS`), and the paper's Fig. 17 memory
  point: 1.5B+1.5B with 1.5 GB of KV.
* Baseline KV split: two vLLM instances, each its ``gpu_memory_utilization`` minus its
  weights: 0.19 / 0.71 for 1.5B+7B (the artifact's baseline), ``M`` split evenly where no
  split is published (1.5B+1.5B: = 0.20 / 0.20; 7B+1.5B; the 1.5 GB point).
* Beam search as search-and-learn and the artifact run it: n active beams every
  iteration, the best n // 4 kept and copied back to n, until n beams finished; at most 40
  steps, 2,048 tokens per step and 4,096 tokens per beam. n in (8, 32, 128, 512): the
  ends of the paper's range 8..512 (Fig. 12) and two points between.
* One problem at a time (§6.1: "batch size of 1"): 30 problems per cell (AIME24's size)
  at n <= 32, 10 at n = 128 and 3 at n = 512 (CPU time on a loaded 2-core box); every
  latency is checked to end before the next problem starts.
* Steps and PRM scores: the recorded search-and-learn beam search of Llama-3.1-8B on
  MATH-500 (``prm_beams``), tokens counted with :func:`reasonserve.sim.beam.count_tokens`.
* Second workload (``--workload longcot``, results ``flashtts_longcot*``, fixed before it
  ran): the Qwen3-8B long-CoT texts of AIME24 (24) and AMC23 (32) in
  ``reasoning_traces/qwen3-8b_fulltext_dev_split.jsonl.gz``, steps cut at blank lines (the
  first 40 of each text), tokens by the same rule, step scores seeded uniform draws (score
  seed 0; :mod:`reasonserve.sim.beam.longcot`); everything else as above.
* SelectSpec truncation R = 0.85 (the paper's best, Fig. 16), sigma 0.1; roofline
  efficiencies and the 2 ms step overhead are the simulator's constants.
* Configurations: the baseline, each optimisation alone, the paper's cumulative ablation
  (Fig. 15: P, P+M, P+M+S = all).

Run through ``benchmarks/policies.py`` (key ``"flashtts"``) or alone:
``python benchmarks/_repro_flashtts.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from _harness import RESULTS, machine
from reasonserve.core import Phase
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies.flashtts import (
    PrefixAwarePolicy,
    RooflineKVAllocator,
    SelectSpec,
    TwoPhaseSpeculation,
)
from reasonserve.policies.flashtts.control import SpeculationState
from reasonserve.policies.lpm import LPMPolicy
from reasonserve.sim.beam import (
    BEAM_SETTINGS,
    BeamSearchSpec,
    BeamServeConfig,
    BeamSetting,
    load_step_pool,
    one_at_a_time_requests,
    simulate_beam_search,
)
from reasonserve.sim.beam.config import ROOFLINE_PLANS
from reasonserve.sim.beam.longcot import load_longcot_pool
from reasonserve.sim.beam.spec import copy_index
from reasonserve.sim.beam.tree import SearchTree, context_share
from reasonserve.sim.beam.workload import ONE_AT_A_TIME_GAP_S, BeamRequest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = {
    "baseline": {},
    "prefix": {"prefix_aware": True},
    "roofline": {"roofline": True},
    "speculation": {"speculation": True},
    "prefix+roofline": {"prefix_aware": True, "roofline": True},
    "all": {"prefix_aware": True, "roofline": True, "speculation": True},
}
FULL = {
    "settings": ("1.5b+1.5b", "1.5b+7b", "7b+1.5b", "1.5b+1.5b@1.5GB"),
    "widths": {8: 30, 32: 30, 128: 10, 512: 3},
}
# the second workload: Qwen3-8B long-CoT texts on AIME24 + AMC23 (``beam_longcot``), with the
# same n values and problems per cell
LONGCOT_FILE = "reasoning_traces/qwen3-8b_fulltext_dev_split.jsonl.gz"
WORKLOADS = {"prm_beams": ("flashtts", FULL["widths"]), "longcot": ("flashtts_longcot", FULL["widths"])}
QUICK = {"settings": ("1.5b+1.5b",), "widths": {128: 4}}
PAPER = {
    "setting": "RTX 4090 24 GB; Qwen2.5-Math 1.5B/7B + Skywork-PRM-1.5B / Math-Shepherd-7B; AIME24, AMC23; "
    "n = 8..512, one problem at a time; vLLM 0.9.2 + search-and-learn baseline (two vLLM instances)",
    "goodput_ratio": "2.2x average (1.2x..5.4x), larger at larger n",
    "latency_change": "-38%..-68%",
    "ablation": "prefix-aware (P) helps most when memory is tight, roofline allocation (M) at large n, "
    "speculation (S) often the largest single gain",
}


def _setting(name: str) -> BeamSetting:
    """A preset, or the paper's Fig. 17 memory point: 1.5B+1.5B with 1.5 GB of KV."""
    if name in BEAM_SETTINGS:
        return BEAM_SETTINGS[name]
    base = BEAM_SETTINGS["1.5b+1.5b"]
    weights = base.generator.weight_bytes + base.verifier.weight_bytes
    fraction = (1.5e9 + weights) / base.hardware.memory_bytes
    return BeamSetting(name, base.generator, base.verifier, base.hardware, fraction)


def _cell(
    pool, setting_name: str, width: int, num_requests: int, seed: int,
    roofline_plan: str = "prefix_cached", configs: tuple[str, ...] = tuple(CONFIGS), share: str = "branching",
) -> dict:  # fmt: skip
    setting, search = _setting(setting_name), BeamSearchSpec(width=width, branching=4)
    requests = one_at_a_time_requests(pool, num_requests, seed)
    h = warmup_share(pool, search) if share == "measured" else None
    runs, selections = {}, {}
    for name in ("baseline", *(c for c in configs if c != "baseline")):
        start = time.process_time()
        config = BeamServeConfig(setting, search, roofline_plan=roofline_plan, roofline_prefix_share=h,
                                 **CONFIGS[name])  # fmt: skip
        result = simulate_beam_search(requests, pool, config)
        if max(result.latencies_s.values()) >= ONE_AT_A_TIME_GAP_S:
            raise RuntimeError(f"{setting_name} n={width} {name}: a search outlasted the gap to the next")
        runs[name] = {**result.summary(), "cpu_s": time.process_time() - start}
        selections[name] = result.selections
    base = runs["baseline"]
    ratios = {
        name: {
            "goodput_ratio": s["precise_goodput_tokens_s"] / base["precise_goodput_tokens_s"],
            "latency_change": s["mean_latency_s"] / base["mean_latency_s"] - 1,
        }
        for name, s in runs.items()
    }
    same = all(sel == selections["baseline"] for sel in selections.values())
    print(f"{setting_name:9s} n={width:3d} x{num_requests}  "
          + "  ".join(f"{k} {v['goodput_ratio']:.2f}x/{v['latency_change']:+.0%}" for k, v in ratios.items())
          + f"  same selections: {same}", flush=True)  # fmt: skip
    return {"setting": setting_name, "width": width, "requests": num_requests, "roofline_plan": roofline_plan,
            "roofline_prefix_share": h, "runs": runs, "ratios": ratios,
            "selections_identical": same}  # fmt: skip


def warmup_share(pool, search: BeamSearchSpec, problems: int = 3) -> float:
    """The context sharing of ``problems`` warm-up searches (seeds 10,000+, not the cell's
    draws), policy-free: what a host measures on searches it already ran."""
    prompts = pool.prompt_tokens
    trees = [SearchTree(BeamRequest(f"w{q}", 0.0, prompts[q % len(prompts)], 10_000 + q), pool, search)
             for q in range(problems)]  # fmt: skip
    return context_share(trees)


def critical_path(pool, width: int, problems: int) -> dict:
    """Decode steps on the critical path of ``problems`` searches (policy-free: the search
    tree only): the baseline (every iteration waits for its longest step), ideal speculation
    (each child's step starts when its parent's ended and keeps every token: the next
    iteration waits only for the longest remainder) and balanced batches (no straggler at
    all: the iteration's tokens spread over min(n, 256) seats). Bounds, not simulations."""
    base = spec = balanced = fresh = later = 0
    for q in range(problems):
        req = BeamRequest(f"q{q}", 0.0, pool.prompt_tokens[q], 10_000 + q)
        tree, prev = SearchTree(req, pool, BeamSearchSpec(width=width, branching=4)), None
        while tree.active:
            steps = {b.beam_id: b.step_tokens for b in tree.active}
            longest = max(steps.values())
            base += longest
            balanced += sum(steps.values()) / min(width, 256)
            if prev is None:
                spec += longest
            else:
                rest = [max(1, b.step_tokens - (prev[0] - prev[1][b.path[-1]])) for b in tree.active]
                worst = max(range(len(rest)), key=rest.__getitem__)
                spec += rest[worst]
                fresh += copy_index(tree.active[worst].beam_id) > 0
                later += 1
            prev = (longest, steps)
            tree.select()
    return {"baseline": base, "ideal_speculation": spec, "balanced": round(balanced),
            "straggler_is_a_copy": fresh / max(1, later)}  # fmt: skip


def _big_view(n: int) -> SchedulerView:
    def req(i: int, running: bool) -> RequestView:
        return RequestView(f"{'r' if running else 'w'}{i:06d}", i * 0.001, Phase.REASONING, 100, 0, i % 300,
                           num_blocks=8 if running else 0, blocks_needed=1 if running else 8 + i % 50,
                           prefix_hashes=(1, 2 + i // 64, 10_000 + i // 4))  # fmt: skip

    waiting, running = tuple(req(i, False) for i in range(n)), tuple(req(i, True) for i in range(256))
    return SchedulerView(100.0, waiting, running, 500, 16, 512, 3000, 8192)


def decide_speed(repeats: int = 15) -> dict:
    """Median CPU ms (process time: the box is shared) of each FlashTTS decision at 1,000 and
    10,000 queued beams, the cases alternated within each repeat, with FCFS and SGLang-style
    LPM (the closest existing ranked policy) measured beside them as references for load.
    The prefix-aware and LPM decides run twice: from the objects and with the waiting queue's
    columns as a host keeps them (``_policies_speed.with_host_columns``, built before timing)."""
    import os

    from _policies_speed import with_host_columns
    from reasonserve.policies.fcfs import FCFSPolicy

    sel, out = SelectSpec(branching=4), {}
    gen, ver = BEAM_SETTINGS["1.5b+1.5b"].costs()
    allocator = RooflineKVAllocator(gen, ver)
    print(f"CPU {machine('cpu')['cpu']}, load average {os.getloadavg()[0]:.2f}", flush=True)
    for n in (1_000, 10_000):
        view = _big_view(n)
        hosted = with_host_columns(view)
        ids = [r.request_id for r in view.waiting]
        scores = {rid: (i * 7919 % 1000) / 1000 for i, rid in enumerate(ids)}
        pots = sel.potentials(scores)
        state = SpeculationState(frozenset(r.request_id for r in view.running[::2]), True)
        cases = {
            "fcfs.decide (reference)": lambda: FCFSPolicy().decide(view),
            "lpm.decide (reference)": lambda: LPMPolicy().decide(view),
            "lpm.decide (reference, host columns)": lambda: LPMPolicy().decide(hosted),
            "prefix_aware.decide": lambda: PrefixAwarePolicy().decide(view),
            "prefix_aware.decide (host columns)": lambda: PrefixAwarePolicy().decide(hosted),
            "two_phase.decide": lambda: TwoPhaseSpeculation().decide(view, state),
            "selectspec.potentials": lambda: sel.potentials(scores),
            "selectspec.rank(256 slots)": lambda: sel.rank(ids, pots, 256),
            "roofline.plan(N beams)": lambda: allocator.plan(
                memory_bytes=3.4e9, num_beams=n, verify_tokens=479, decode_tokens=73),
        }  # fmt: skip
        cpu: dict[str, list[float]] = {name: [] for name in cases}
        for fn in cases.values():
            fn()  # warm-up
        for _ in range(repeats):
            for name, fn in cases.items():
                start = time.process_time()
                fn()
                cpu[name].append(time.process_time() - start)
        out[n] = {name: statistics.median(t) * 1e3 for name, t in cpu.items()}
        shown = ", ".join(f"{k} {v:.2f}" for k, v in out[n].items())
        print(f"FlashTTS decide() median CPU ms at {n}: {shown}", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.2f}", flush=True)
    return out


def compare_rank(old_file: str, runs: int = 5, repeats: int = 31) -> list[tuple[float, float]]:
    """Median CPU ms of ``SelectSpec.rank`` (10,000 finished beams of ``_big_view``, 256 slots)
    of an older ``flashtts_spec.py`` (e.g. ``git show REV:src/reasonserve/policies/flashtts_spec.py
    > /tmp/old_spec.py``) vs the current one, alternated in every repeat; same slots checked."""
    import importlib.util
    import platform

    spec = importlib.util.spec_from_file_location("_old_flashtts_spec", old_file)
    old = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = old  # dataclasses look their module up
    spec.loader.exec_module(old)
    ids = [r.request_id for r in _big_view(10_000).waiting]
    new_sel, old_sel = SelectSpec(branching=4), old.SelectSpec(branching=4)
    pots = new_sel.potentials({rid: (i * 7919 % 1000) / 1000 for i, rid in enumerate(ids)})
    same = [(s.beam_id, s.branch, s.potential) for s in old_sel.rank(ids, pots, 256)]
    assert same == [(s.beam_id, s.branch, s.potential) for s in new_sel.rank(ids, pots, 256)]
    print(f"CPU {machine('cpu')['cpu']} ({platform.processor() or 'unknown'})", flush=True)
    out = []
    for run in range(runs):
        cpu: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(repeats):
            for name, sel in (("old", old_sel), ("new", new_sel)):
                start = time.process_time()
                sel.rank(ids, pots, 256)
                cpu[name].append(time.process_time() - start)
        o, n = (statistics.median(cpu[k]) * 1e3 for k in ("old", "new"))
        print(f"run {run}: rank median CPU ms old {o:.2f} new {n:.2f} ratio {n / o:.2f}", flush=True)
        out.append((o, n))
    return out


def _pool(data_dir: pathlib.Path, workload: str = "prm_beams"):
    """(path, step pool) of a workload: the recorded PRM beams, or the long-CoT texts with
    seeded scores (score seed 0, the first 40 steps, AIME24 + AMC23)."""
    if workload == "longcot":
        path = pathlib.Path(data_dir) / LONGCOT_FILE
        return path, load_longcot_pool(path, max_steps=BeamSearchSpec().max_steps, score_seed=0)
    path = next(iter(sorted((pathlib.Path(data_dir) / "prm_beams").glob("*.jsonl"))))
    return path, load_step_pool(path)


def run_cells(
    settings, widths: dict[int, int], data_dir: pathlib.Path, seed: int, workload: str = "prm_beams",
    roofline_plan: str = "prefix_cached", configs: tuple[str, ...] = tuple(CONFIGS), share: str = "branching",
) -> list[dict]:  # fmt: skip
    _, pool = _pool(data_dir, workload)
    return [_cell(pool, s, w, n, seed, roofline_plan, configs, share)
            for s in settings for w, n in widths.items()]  # fmt: skip


def section_of(cells: list[dict], data_dir: pathlib.Path, workload: str = "prm_beams") -> dict:
    """The results section: the cells, the headline over them, the decide() speed."""
    path, pool = _pool(data_dir, workload)
    top = "all" if all("all" in c["ratios"] for c in cells) else "baseline"  # a --configs subset: no headline
    goodput = [c["ratios"][top]["goodput_ratio"] for c in cells]
    latency = [c["ratios"][top]["latency_change"] for c in cells]
    return {
        "paper": PAPER,
        "workload": workload,
        "data": str(path.name),
        "mean_step_tokens": pool.mean_step_tokens(),
        "mean_sequence_tokens": pool.mean_sequence_tokens(),
        "cells": cells,
        "headline": {
            "goodput_ratio_all_mean": statistics.fmean(goodput),
            "goodput_ratio_all_range": [min(goodput), max(goodput)],
            "latency_change_all_range": [min(latency), max(latency)],
            "goal_1_5x_met": max(goodput) >= 1.5,
            "selections_identical_everywhere": all(c["selections_identical"] for c in cells),
        },
        "decide_ms_median": decide_speed(),
    }


def run(
    quick: bool, data_dir: pathlib.Path, seed: int, workload: str = "prm_beams",
    roofline_plan: str = "prefix_cached", configs: tuple[str, ...] = tuple(CONFIGS),
) -> dict:  # fmt: skip
    plan = QUICK if quick else {"settings": FULL["settings"], "widths": WORKLOADS[workload][1]}
    cells = run_cells(plan["settings"], plan["widths"], data_dir, seed, workload, roofline_plan, configs)
    return section_of(cells, data_dir, workload)


def _ratio(r: dict) -> str:
    return f"x{r['goodput_ratio']:.2f} ({r['latency_change']:+.0%})"


def markdown(section: dict) -> str:
    """One row per cell: the baseline's goodput and latency, then goodput x baseline (latency
    change) per configuration, the baseline's recomputed / decoded tokens, speculative
    tokens kept of those generated (all)."""
    names = [n for n in CONFIGS if n != "baseline"]
    lines = ["| setting | n | problems | baseline goodput tok/s | baseline latency s | "
             + " | ".join(names) + " | baseline recompute / decode tok | spec tok kept (all) |",
             "|---" * (7 + len(names)) + "|"]  # fmt: skip
    for c in section["cells"]:
        base, every = c["runs"]["baseline"], c["runs"]["all"]
        cols = [_ratio(c["ratios"][n]) for n in names]
        kept = every["spec_tokens_kept"] / every["spec_tokens"] if every.get("spec_tokens") else 0.0
        lines.append(f"| {c['setting']} | {c['width']} | {c['requests']} | "
                     f"{base['precise_goodput_tokens_s']:.2f} | {base['mean_latency_s']:.1f} | "
                     + " | ".join(cols) + f" | {base['recompute_tokens']:.0f} / "
                     f"{base['decode_tokens']:.0f} | {kept:.0%} of {every.get('spec_tokens', 0):.0f} |"
                     )  # fmt: skip
    h = section["headline"]
    lines += ["", f"All vs baseline: goodput x{h['goodput_ratio_all_mean']:.2f} on average "
              f"(x{h['goodput_ratio_all_range'][0]:.2f}..x{h['goodput_ratio_all_range'][1]:.2f}), latency "
              f"{h['latency_change_all_range'][0]:+.0%}..{h['latency_change_all_range'][1]:+.0%}; selections "
              f"identical in every run: {h['selections_identical_everywhere']}."]  # fmt: skip
    speed = section["decide_ms_median"]
    for n, row in speed.items():
        lines.append(f"\n`decide()`-side median ms at {n} queued beams: "
                     + ", ".join(f"{k} {v:.2f}" for k, v in row.items()) + ".")  # fmt: skip
    return "\n".join(lines)


def plot(section: dict, path: pathlib.Path) -> None:
    """Goodput vs the baseline per setting and width, one bar per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells, names = section["cells"], [n for n in CONFIGS if n != "baseline"]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(cells)), 4.0))
    width = 0.8 / len(names)
    for j, name in enumerate(names):
        xs = [i + (j - (len(names) - 1) / 2) * width for i in range(len(cells))]
        ax.bar(xs, [c["ratios"][name]["goodput_ratio"] for c in cells], width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(1.5, color="gray", linewidth=0.8, linestyle="--", label="goal 1.5x")
    labels = [f"{c['setting']}\nn={c['width']}" for c in cells]
    ax.set_xticks(range(len(cells)), labels, fontsize=7, rotation=30)
    ax.set_ylabel("precise goodput / baseline")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _parts(args: argparse.Namespace, out: pathlib.Path) -> None:
    """``--setting``: one setting's cells to their own file; ``--merge``: every setting's
    file (all must be there) into the full results, as one sequential run would write them."""
    stem, widths = _stem(args), WORKLOADS[args.workload][1]

    def part(name: str) -> pathlib.Path:
        return RESULTS / f"{stem}_{name}.json"

    if args.setting:
        RESULTS.mkdir(exist_ok=True)
        cells = []
        for width, problems in widths.items():  # saved cell by cell
            cells += run_cells((args.setting,), {width: problems}, args.data, args.seed, args.workload,
                               args.roofline_plan, tuple(args.configs), args.prefix_share)  # fmt: skip
            done = {"seed": args.seed, "complete": len(cells) == len(widths), "cells": cells}
            part(args.setting).write_text(json.dumps(done, default=str))
        return
    parts = [json.loads(part(name).read_text()) for name in FULL["settings"]]
    if any(p["seed"] != args.seed or not (p["complete"] or args.incomplete) for p in parts):
        raise SystemExit(f"the per-setting results are not all complete runs with --seed {args.seed}")
    section = section_of([c for p in parts for c in p["cells"]], args.data, args.workload)
    complete = all(p["complete"] for p in parts)  # False only with --incomplete: cells missing
    saved = {"machine": machine("cpu"), "quick": False, "seed": args.seed, "complete": complete,
             "flashtts": section}
    out.write_text(json.dumps(saved, indent=1, default=str))
    print(f"wrote {out}")


def _stem(args: argparse.Namespace) -> str:
    """Results file stem: the workload's, with the roofline plan and the configurations
    appended when they are not the defaults (a variant run beside the main one)."""
    stem = WORKLOADS[args.workload][0]
    if args.roofline_plan != "prefix_cached":
        stem += f"_{args.roofline_plan}"
    if args.prefix_share != "branching":
        stem += f"_{args.prefix_share}-share"
    if tuple(args.configs) != tuple(CONFIGS):
        stem += "_" + "-".join(c.replace("+", "") for c in args.configs)
    return stem


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--data", type=pathlib.Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown", action="store_true", help="print the docs table from the last results")
    parser.add_argument("--plot", type=pathlib.Path, help="write the goodput plot of the last results here")
    parser.add_argument("--setting", choices=FULL["settings"],
                        help="run only this setting's cells (to run settings side by side), see --merge")
    parser.add_argument("--merge", action="store_true", help="join the --setting results into one")
    parser.add_argument("--incomplete", action="store_true",
                        help="with --merge: also join settings whose run stopped early (complete: false)")
    parser.add_argument("--workload", choices=tuple(WORKLOADS), default="prm_beams",
                        help="prm_beams: recorded Llama-3.1-8B PRM beams on MATH-500; longcot: Qwen3-8B "
                        "long-CoT texts on AIME24 + AMC23 with seeded scores (results flashtts_longcot*)")
    parser.add_argument("--roofline-plan", choices=ROOFLINE_PLANS, default="prefix_cached",
                        help="the models the roofline allocator plans for (BeamServeConfig.roofline_plan); "
                        "not the default: results file stem gets _PLAN")
    parser.add_argument("--prefix-share", choices=("branching", "measured"), default="branching",
                        help="beams sharing each context token in the roofline plan: the branching factor "
                        "(siblings only) or measured on warm-up searches (warmup_share); "
                        "not the default: the stem gets _measured-share")
    parser.add_argument("--configs", nargs="+", choices=tuple(CONFIGS), default=list(CONFIGS),
                        help="run only these configurations (and the baseline); not all: the stem gets them")
    parser.add_argument("--critical-path", type=int, metavar="PROBLEMS",
                        help="print the straggler bounds of critical_path() over this many problems")
    args = parser.parse_args()
    if args.critical_path:
        for width in WORKLOADS[args.workload][1]:
            c = critical_path(_pool(args.data, args.workload)[1], width, args.critical_path)
            print(f"n={width}: critical-path decode steps baseline {c['baseline']}, ideal speculation "
                  f"{c['ideal_speculation']} (x{c['baseline'] / c['ideal_speculation']:.2f}), balanced "
                  f"{c['balanced']} (x{c['baseline'] / c['balanced']:.2f}); the next straggler is a copy "
                  f"k >= 1 in {c['straggler_is_a_copy']:.0%} of iterations")  # fmt: skip
        return
    stem = _stem(args)
    out = RESULTS / (f"{stem}_quick.json" if args.quick else f"{stem}.json")
    if args.setting or args.merge:
        _parts(args, out)
        return
    if args.markdown or args.plot:
        section = json.loads(out.read_text())["flashtts"]
        if args.plot:
            plot(section, args.plot)
        if args.markdown:
            print(markdown(section))
        return
    section = run(args.quick, args.data, args.seed, args.workload, args.roofline_plan, tuple(args.configs))
    RESULTS.mkdir(exist_ok=True)
    out.write_text(json.dumps({"machine": machine("cpu"), "quick": args.quick, "seed": args.seed,
                               "flashtts": section}, indent=1, default=str))  # fmt: skip
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
