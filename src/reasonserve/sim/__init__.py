"""A seeded discrete-event simulator of N serving instances with a roofline cost model,
running the same policy objects as the embedded engine.

* :mod:`~reasonserve.sim.cluster`: the event loop, the instances and their quiet stretches;
* :mod:`~reasonserve.sim.workloads`: requests, Poisson workloads, replayed serving traces;
* :mod:`~reasonserve.sim.programs`: recorded self-consistency workloads and program metrics
  (the programs themselves run in :mod:`reasonserve.programs.recorded`);
* :mod:`~reasonserve.sim.beam`: FlashTTS's beam-search serving on one GPU;
* :mod:`~reasonserve.sim.metrics`, :mod:`~reasonserve.sim.plots`, :mod:`~reasonserve.sim.cli`:
  what a run reports, and ``reasonserve sim``.

The cost models come from :mod:`reasonserve.cost` (re-exported here)."""

from reasonserve.cost import (  # the cost models the simulator times steps with
    HARDWARE,
    MODELS,
    HardwareSpec,
    ModelSpec,
    ProfileCostModel,
    ProfileRow,
    ProfileTable,
    RooflineCostModel,
    fit_profile,
    load_profile,
    save_profile,
)
from reasonserve.sim.cluster import SimConfig, SimResult, simulate
from reasonserve.sim.metrics import percentile, request_metrics, summarize, tail_ttft_by_bin
from reasonserve.sim.programs import SCProgram, load_sc_records, sc_program_workload
from reasonserve.sim.workloads import LengthTable, SimRequest, load_lengths, poisson_workload

__all__ = [
    "HARDWARE",
    "MODELS",
    "HardwareSpec",
    "LengthTable",
    "ModelSpec",
    "ProfileCostModel",
    "ProfileRow",
    "ProfileTable",
    "RooflineCostModel",
    "SCProgram",
    "SimConfig",
    "SimRequest",
    "SimResult",
    "fit_profile",
    "load_lengths",
    "load_profile",
    "load_sc_records",
    "percentile",
    "poisson_workload",
    "request_metrics",
    "save_profile",
    "sc_program_workload",
    "simulate",
    "summarize",
    "tail_ttft_by_bin",
]
