"""``reasonserve sim``: run one simulated workload under one policy and write JSON."""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import TextIO

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.sim.config import SimConfig
from reasonserve.sim.hardware import HARDWARE
from reasonserve.sim.metrics import summarize
from reasonserve.sim.model_spec import MODELS
from reasonserve.sim.simulator import simulate
from reasonserve.sim.traces import load_lengths
from reasonserve.sim.workload import poisson_workload

__all__ = ["add_sim_parser", "run_sim"]

POLICIES = ("fcfs", "round_robin", "pascal", "dynasor", "app_fifo", "lpm")


def add_sim_parser(sub) -> None:
    p = sub.add_parser(
        "sim",
        help="simulate N instances under a scheduling policy; write JSON metrics",
        description="Seeded discrete-event simulation with a roofline cost model.",
    )
    w = p.add_argument_group("workload")
    w.add_argument(
        "--lengths",
        choices=("servegen", "qwen3"),
        default="servegen",
        help="length source: ServeGen DeepSeek-R1 (input/output/reason ratio) or Qwen3-8B full texts",
    )
    w.add_argument(
        "--data", type=pathlib.Path, default=pathlib.Path("../shared/data"), help="recorded data root"
    )
    w.add_argument("--rate", type=float, default=2.0, help="Poisson arrival rate, requests/s (all instances)")
    w.add_argument("--requests", type=int, default=500, help="number of requests")
    w.add_argument("--program-size", type=int, default=1, help="requests per program (e.g. SC samples)")
    w.add_argument("--seed", type=int, default=0)
    c = p.add_argument_group("cost model and cluster")
    c.add_argument("--hardware", choices=sorted(HARDWARE), default="h100")
    c.add_argument("--model", choices=sorted(MODELS), default="qwen2.5-32b")
    c.add_argument("--instances", type=int, default=8)
    c.add_argument(
        "--kv-tokens", type=int, default=None, help="KV capacity per instance (default: from memory)"
    )
    c.add_argument("--preemption", choices=("swap", "recompute"), default="swap")
    q = p.add_argument_group("policy")
    q.add_argument("--policy", choices=POLICIES, default="pascal")
    q.add_argument(
        "--router",
        choices=("least_kv", "pascal"),
        default=None,
        help="placement (default: PASCAL's Algorithm 1 for --policy pascal, else least KV)",
    )
    q.add_argument("--quantum", type=int, default=500, help="round-robin/PASCAL token quantum")
    q.add_argument("--demote-tokens", type=int, default=5000, help="PASCAL demotion threshold")
    q.add_argument("--starvation-bound", type=float, default=60.0, help="Dynasor escalation bound, seconds")
    p.add_argument(
        "--out", type=pathlib.Path, default=None, help="write the JSON summary here (default: stdout)"
    )


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


def run_sim(args: argparse.Namespace, out: TextIO) -> int:
    from reasonserve.policies.router import LeastKVRouter, PascalRouter

    if args.requests < 1:
        raise InvalidArgumentError(f"--requests must be >= 1, got {args.requests}")
    config = SimConfig(num_instances=args.instances, hardware=args.hardware, model=args.model,
                       kv_capacity_tokens=args.kv_tokens, preemption=args.preemption)  # fmt: skip
    factory = _factory(args)
    router_name = args.router or ("pascal" if args.policy == "pascal" else "least_kv")
    router = PascalRouter() if router_name == "pascal" else LeastKVRouter()
    table = load_lengths(args.lengths, args.data, seed=args.seed)
    reqs = poisson_workload(table, args.rate, args.requests, args.seed, programs_of=args.program_size)
    summary = summarize(simulate(reqs, config, factory, router))
    summary.update(lengths=table.source, rate_rps=args.rate, config=repr(config))
    text = json.dumps(summary, indent=1, default=str)
    if args.out is None:
        print(text, file=out)
    else:
        args.out.write_text(text)
        print(f"wrote {args.out}", file=out)
    return 0
