"""The ``reasonserve`` command line."""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reasonserve", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="show batch invariance with and without deterministic_mode()"
    )
    demo.add_argument("--batches", type=int, default=6, help="random batches to try (>= 1)")
    demo.add_argument("--seed", type=int, default=0, help="seed for weights and prompts")
    demo.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    _replay_parsers(sub)
    return parser


def _default_data() -> str:
    """``../shared/data`` next to the repository (the working directory's parent)."""
    return str(pathlib.Path.cwd().parent / "shared" / "data")


def _replay_parsers(sub) -> None:
    replay = sub.add_parser("replay", help="replay certainindex on recorded data")
    kinds = replay.add_subparsers(dest="kind", required=True)
    probes = kinds.add_parser("probes", help="probe-in-the-middle recordings")
    probes.add_argument("--run", action="append", help="one run folder (repeatable)")
    probes.add_argument("--runs", help="glob of run folders (default: DATA/probes/*)")
    sc = kinds.add_parser("sc", help="self-consistency samples")
    sc.add_argument("--samples", help="JSONL file (default: DATA/sc_samples/qwen25math_*.jsonl)")
    for p in (probes, sc):
        p.add_argument("--data", default=None, help="data root (default: ../shared/data)")
        p.add_argument("--tolerance", type=float, default=None,
                       help="accuracy loss allowed when calibrating (probes 0.005, sc 0)")  # fmt: skip
        p.add_argument("--json", metavar="PATH", help="write the report as JSON")
        p.add_argument("--png", metavar="PATH", help="write the accuracy-vs-cost plot")
    cal = sub.add_parser("calibrate", help="choose certainindex settings by cross-validation")
    cal.add_argument("kind", choices=["probes", "sc"])
    cal.add_argument("--data", default=None)
    cal.add_argument("--runs", help="glob of probe run folders")
    cal.add_argument("--samples", help="sc samples file")
    cal.add_argument("--tolerance", type=float, default=None)


def _replay(args, out) -> int:
    data = pathlib.Path(args.data or _default_data())
    if args.kind == "probes":
        from reasonserve.replay import probes

        folders = probes.run_folders(getattr(args, "run", None), args.runs, data)
        tol = 0.005 if args.tolerance is None else args.tolerance
        report = probes.replay_probes(folders, tolerance=tol)
        probes.print_and_save(report, json_path=getattr(args, "json", None),
                              png_path=getattr(args, "png", None), out=out)  # fmt: skip
        return 0
    from reasonserve.replay import sc

    path = args.samples or str(data / "sc_samples" / "qwen25math_math_cot_100_8samples_rm.jsonl")
    report = sc.replay_sc(path, tolerance=0.0 if args.tolerance is None else args.tolerance)
    sc.print_and_save(report, json_path=getattr(args, "json", None), png_path=getattr(args, "png", None),
                      out=out)  # fmt: skip
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from reasonserve.demo import run_demo

        return run_demo(batches=args.batches, seed=args.seed, json_path=args.json, out=sys.stdout)
    if args.command == "replay":
        return _replay(args, sys.stdout)
    if args.command == "calibrate":
        # Calibration is the cross-validated selection inside replay; print its choice.
        return _replay(args, sys.stdout)
    return 2
