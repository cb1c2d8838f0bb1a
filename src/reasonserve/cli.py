"""The ``reasonserve`` command line."""

from __future__ import annotations

import argparse
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from reasonserve.demo import run_demo

        return run_demo(batches=args.batches, seed=args.seed, json_path=args.json, out=sys.stdout)
    return 2
