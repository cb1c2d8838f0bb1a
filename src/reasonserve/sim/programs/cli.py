"""The flags of ``reasonserve sim --sc-file ...``: self-consistency programs from recorded
samples as the workload (Dynasor's online protocol, SPEC 2.4). ``--rate`` is then
programs/s and ``--requests`` the number of programs; the JSON adds program-level metrics
(deadline attainment per SLO scale, P90 SLO scale, samples and tokens per program, early
stops, accuracy). The programs run in :mod:`reasonserve.programs.recorded` (they are
``programs.sc`` on the simulated cluster, a layer above the simulator)."""

from __future__ import annotations

import argparse

__all__ = ["SCALES", "add_program_args"]

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
