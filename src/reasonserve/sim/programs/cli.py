"""``reasonserve sim --sc-file ...``: self-consistency programs from recorded samples as the
workload (Dynasor's online protocol, SPEC 2.4). ``--rate`` is then programs/s and
``--requests`` the number of programs; the JSON adds program-level metrics (deadline
attainment per SLO scale, P90 SLO scale, samples and tokens per program, early stops,
accuracy)."""

from __future__ import annotations

import argparse
import pathlib
from collections.abc import Callable

from reasonserve.certainindex.allocation import ThresholdPolicy
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.sim.cluster.config import SimConfig
from reasonserve.sim.cluster.simulator import simulate
from reasonserve.sim.metrics import summarize
from reasonserve.sim.programs.metrics import program_summary
from reasonserve.sim.programs.runtime import ProgramPlan, ProgramRuntime, WithPrograms
from reasonserve.sim.programs.workload import load_sc_records, sc_program_workload

__all__ = ["add_program_args", "run_programs"]

SCALES = (0.025, 0.05, 0.1, 0.2, 0.5, 1.0)


def add_program_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("reasoning programs (self-consistency from recorded samples)")
    g.add_argument(
        "--sc-file",
        default=None,
        help="an sc_samples JSONL under --data (e.g. sc_samples/qwen25math_math_cot_100_8samples_rm.jsonl): "
        "the workload becomes SC programs; --rate is programs/s, --requests programs",
    )
    g.add_argument("--sc-cap", type=int, default=8, help="samples per program at most")
    g.add_argument(
        "--sc-threshold",
        type=float,
        default=None,
        help="certainindex threshold (semantic entropy); omit to run every sample",
    )
    g.add_argument(
        "--sc-detect-at",
        type=int,
        default=5,
        help="samples in the first round, where the certainindex is read (detect@knob)",
    )
    g.add_argument(
        "--base-deadline",
        type=float,
        default=240.0,
        help="seconds; deadline = SLO scale x difficulty (1/2/3) x this",
    )


def _plan(args: argparse.Namespace) -> ProgramPlan:
    if args.sc_threshold is None:
        return ProgramPlan(args.sc_cap)
    if not 1 <= args.sc_detect_at <= args.sc_cap:
        raise InvalidArgumentError(f"--sc-detect-at must be in [1, --sc-cap], got {args.sc_detect_at}")
    allocation = ThresholdPolicy(args.sc_threshold, detect_at=args.sc_detect_at, recheck_every=args.sc_cap,
                                 max_knob=args.sc_cap)  # fmt: skip
    return ProgramPlan(args.sc_cap, first_round=args.sc_detect_at, allocation=allocation)


def run_programs(
    args: argparse.Namespace, config: SimConfig, factory: Callable[[], object], router: object
) -> dict:
    """Simulate SC programs under ``factory()``'s policy (which sees the programs' views)."""
    if not args.base_deadline > 0:
        raise InvalidArgumentError(f"--base-deadline must be > 0, got {args.base_deadline}")
    path = pathlib.Path(args.data) / args.sc_file
    plan = _plan(args)
    programs = sc_program_workload(load_sc_records(path), args.rate, args.requests, args.seed,
                                   block_size=config.block_size)  # fmt: skip
    runtime = ProgramRuntime(programs, plan)
    result = simulate(runtime.initial_requests(), config, lambda: WithPrograms(factory(), runtime),
                      router, programs=runtime)  # type: ignore[arg-type]  # fmt: skip
    summary = summarize(result)
    summary["programs"] = program_summary(runtime.results(), args.base_deadline, SCALES)
    summary.update(sc_file=str(path), rate_programs_s=args.rate, plan=repr(plan))
    return summary
