"""``reasonserve sim``: run one simulated workload under one policy and write JSON."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from collections.abc import Callable
from typing import TextIO

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.cost.hardware import HARDWARE
from reasonserve.cost.model_spec import MODELS
from reasonserve.cost.profile import load_profile
from reasonserve.policies.router import LeastKVRouter, PascalRouter, Router
from reasonserve.sim.cluster.config import SimConfig
from reasonserve.sim.cluster.simulator import simulate
from reasonserve.sim.metrics import summarize
from reasonserve.sim.plots import write_png
from reasonserve.sim.programs.cli import add_program_args
from reasonserve.sim.workloads.replayed import TRACE_SOURCES, trace_workload
from reasonserve.sim.workloads.requests import poisson_workload
from reasonserve.sim.workloads.servegen import retimed
from reasonserve.sim.workloads.traces import load_lengths

__all__ = ["add_sim_parser", "run_sim"]

POLICIES = ("fcfs", "round_robin", "pascal", "dynasor", "app_fifo", "lpm")
ROUTERS: dict[str, Callable[[], Router]] = {
    "least_kv": LeastKVRouter,
    "pascal": PascalRouter,
    "pascal_nomigration": lambda: PascalRouter(migrate=False),
    "pascal_nonadaptive": lambda: PascalRouter(adaptive=False),
}


def add_sim_parser(sub) -> None:
    p = sub.add_parser(
        "sim",
        help="simulate N instances under a scheduling policy; write JSON metrics",
        description="Seeded discrete-event simulation with a roofline or profile-table cost model.",
    )
    w = p.add_argument_group("workload")
    w.add_argument(
        "--lengths",
        choices=("servegen", "qwen3", *TRACE_SOURCES),
        default="servegen",
        help="length source: ServeGen DeepSeek-R1 (input/output/reason ratio), Qwen3-8B full texts, or a "
        "recorded serving trace replayed request by request (Azure 2023 code/conversation, Mooncake "
        "conversation/synthetic with prefix block ids, ShareGPT lengths)",
    )
    w.add_argument(
        "--arrivals",
        choices=("poisson", "trace", "servegen"),
        default=None,
        help="'poisson' at --rate; 'trace': the recorded arrival times with gaps scaled to a mean "
        "rate of --rate (Azure, Mooncake); 'servegen': ServeGen DeepSeek-R1's production arrival "
        "process (per-window Gamma/Weibull gaps of --servegen-chunk) scaled to --rate; default: "
        "'trace' where the source records times, else 'poisson'",
    )
    w.add_argument("--servegen-chunk", type=int, default=0, help="rate trace chunk for --arrivals servegen")
    w.add_argument(
        "--reason-split",
        choices=("servegen", "none"),
        default="servegen",
        help="for serving traces (non-reasoning services): split each output into reasoning and answer "
        "with a reason ratio drawn from ServeGen DeepSeek-R1's distribution, or 'none' (all answer)",
    )
    w.add_argument(
        "--data", type=pathlib.Path, default=pathlib.Path("../shared/data"), help="recorded data root"
    )
    w.add_argument("--rate", type=float, default=2.0, help="Poisson arrival rate, requests/s (all instances)")
    w.add_argument("--requests", type=int, default=500, help="number of requests")
    w.add_argument("--program-size", type=int, default=1, help="requests per program (e.g. SC samples)")
    w.add_argument("--seed", type=int, default=0, help="seed of the workload and of sampling")
    c = p.add_argument_group("cost model and cluster")
    c.add_argument("--hardware", choices=sorted(HARDWARE), default="h100",
                   help="accelerator preset of the roofline cost model")
    c.add_argument("--model", choices=sorted(MODELS), default="qwen2.5-32b",
                   help="model preset (weights, KV size per token)")
    c.add_argument("--instances", type=int, default=8, help="simulated serving instances")
    c.add_argument(
        "--kv-tokens", type=int, default=None, help="KV capacity per instance (default: from memory)"
    )
    c.add_argument("--preemption", choices=("swap", "recompute"), default="swap",
                   help="swap KV to host memory or recompute it")
    c.add_argument(
        "--cost-model",
        choices=("roofline", "profile"),
        default="roofline",
        help="step times: 'roofline' (the --hardware/--model presets' peak FLOP/s and bandwidth) or "
        "'profile' (a least-squares fit of measured engine steps, --profile-table; copies and KV "
        "capacity still come from the presets)",
    )
    c.add_argument(
        "--profile-table",
        type=pathlib.Path,
        default=None,
        help="profile table JSON for --cost-model profile (benchmarks/sim_profile.py writes one)",
    )
    c.add_argument(
        "--decode-steps-per-event",
        type=int,
        default=1,
        help="decode iterations a decode-only batch may run per policy decision (1: exact; "
        "larger: faster, see reasonserve.sim.cluster.run)",
    )
    q = p.add_argument_group("policy")
    q.add_argument("--policy", choices=POLICIES, default="pascal",
                   help="scheduling policy inside each instance")
    q.add_argument(
        "--router",
        choices=tuple(ROUTERS),
        default=None,
        help="placement and phase-transition migration (default: 'pascal' = Algorithms 1+2 with adaptive "
        "migration for --policy pascal, else 'least_kv', no migration); ablations: "
        "'pascal_nomigration', 'pascal_nonadaptive'",
    )
    q.add_argument("--quantum", type=int, default=500, help="round-robin/PASCAL token quantum")
    q.add_argument("--demote-tokens", type=int, default=5000, help="PASCAL demotion threshold")
    q.add_argument("--starvation-bound", type=float, default=60.0, help="Dynasor escalation bound, seconds")
    add_program_args(p)
    p.add_argument(
        "--out", type=pathlib.Path, default=None, help="write the JSON summary here (default: stdout)"
    )
    p.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="a progress line on stderr (default: when stderr is a terminal)",
    )  # fmt: skip
    p.add_argument(
        "--png", type=pathlib.Path, default=None,
        help="also plot TTFT CDF, tail TTFT per reasoning-length bin and QoE CDF here (request workloads)",
    )  # fmt: skip


def _factory(args):
    from reasonserve.policies import FCFSPolicy, RoundRobinPolicy
    from reasonserve.policies.app_fifo import AppFIFOPolicy
    from reasonserve.policies.dynasor import DynasorPolicy
    from reasonserve.policies.lpm import LPMPolicy
    from reasonserve.policies.pascal import PascalPolicy

    makers = {
        "fcfs": FCFSPolicy,
        "round_robin": lambda: RoundRobinPolicy(quantum=args.quantum, mode=args.preemption),
        "pascal": lambda: PascalPolicy(args.quantum, args.demote_tokens, args.preemption),
        "dynasor": lambda: DynasorPolicy(starvation_bound_s=args.starvation_bound),
        "app_fifo": AppFIFOPolicy,
        "lpm": LPMPolicy,
    }
    makers[args.policy]()  # validate the policy's parameters before simulating
    return makers[args.policy]


def _profile(args):
    if args.cost_model == "roofline":
        if args.profile_table is not None:
            raise InvalidArgumentError("--profile-table needs --cost-model profile")
        return None
    if args.profile_table is None:
        raise InvalidArgumentError("--cost-model profile needs --profile-table PATH")
    return load_profile(args.profile_table)


def _workload(args, config: SimConfig) -> tuple[list, str]:
    if args.arrivals != "servegen":
        return _lengths_workload(args, config, args.arrivals)
    reqs, source = _lengths_workload(args, config, "poisson")  # then ServeGen's times replace Poisson's
    reqs = retimed(reqs, args.data, args.rate, args.seed, chunk=args.servegen_chunk)
    return reqs, f"{source}; ServeGen chunk-{args.servegen_chunk} arrivals"


def _lengths_workload(args, config: SimConfig, arrivals: str | None) -> tuple[list, str]:
    if args.lengths in TRACE_SOURCES:
        if args.program_size != 1:
            raise InvalidArgumentError("--program-size needs --lengths servegen or qwen3")
        arrivals = arrivals or ("poisson" if args.lengths == "sharegpt" else "trace")
        skipped: dict[str, int] = {}
        reqs = trace_workload(args.lengths, args.data, args.rate, args.requests, args.seed, arrivals=arrivals,
                              reason_split=args.reason_split, block_size=config.block_size,
                              skipped=skipped)  # fmt: skip
        counts = ", ".join(f"{n} {why}" for why, n in skipped.items())
        return reqs, f"{args.lengths} trace, {arrivals} arrivals, reason split {args.reason_split} ({counts})"
    if arrivals == "trace":
        raise InvalidArgumentError(f"--lengths {args.lengths} has no arrival times: use --arrivals poisson")
    table = load_lengths(args.lengths, args.data, seed=args.seed)
    reqs = poisson_workload(table, args.rate, args.requests, args.seed, programs_of=args.program_size)
    return reqs, table.source


def _progress_line(finished: int, known: int) -> None:
    width = 30
    done = width * finished // max(known, 1)
    print(f"\rsim [{'#' * done}{'.' * (width - done)}] {finished}/{known} requests finished",
          end="", file=sys.stderr, flush=True)  # fmt: skip


def run_sim(args: argparse.Namespace, out: TextIO, programs: Callable[..., dict] | None = None) -> int:
    """``programs(args, config, policy_factory, router)`` runs ``--sc-file`` (the SC
    programs run above the simulator: :func:`reasonserve.programs.recorded.run_sc_file`)."""
    if args.requests < 1:
        raise InvalidArgumentError(f"--requests must be >= 1, got {args.requests}")
    config = SimConfig(num_instances=args.instances, hardware=args.hardware, model=args.model,
                       kv_capacity_tokens=args.kv_tokens, preemption=args.preemption,
                       decode_steps_per_event=args.decode_steps_per_event,
                       profile=_profile(args))  # fmt: skip
    factory = _factory(args)
    router_name = args.router or ("pascal" if args.policy == "pascal" else "least_kv")
    router = ROUTERS[router_name]()
    if args.sc_file is not None:  # SC programs from recorded samples
        if args.png is not None:
            raise InvalidArgumentError("--png plots request workloads; SC programs report JSON only")
        if programs is None:
            raise InvalidArgumentError("--sc-file needs a program runner (run it as `reasonserve sim`)")
        summary = programs(args, config, factory, router)
        summary.update(config=repr(config), cost_model=args.cost_model)
    else:
        reqs, source = _workload(args, config)
        show = sys.stderr.isatty() if args.progress is None else args.progress
        result = simulate(reqs, config, factory, router, progress=_progress_line if show else None)
        if show:
            print(file=sys.stderr)
        summary = summarize(result)
        summary.update(lengths=source, rate_rps=args.rate, config=repr(config), cost_model=args.cost_model)
        if args.png is not None:
            title = f"{args.policy} / {result.router}, {source}, {args.rate} req/s, {args.instances} inst."
            drawn = write_png(result, args.png, title)
            print(f"wrote {args.png}" if drawn else "matplotlib is not installed: no PNG", file=out)
    text = json.dumps(summary, indent=1, default=str)
    if args.out is None:
        print(text, file=out)
    else:
        args.out.write_text(text)
        print(f"wrote {args.out}", file=out)
    return 0
