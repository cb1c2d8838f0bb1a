"""A seeded discrete-event simulator of N serving instances with a roofline cost model,
running the same policy objects as the embedded engine."""

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
from reasonserve.sim.config import SimConfig
from reasonserve.sim.metrics import percentile, request_metrics, summarize, tail_ttft_by_bin
from reasonserve.sim.program_workload import load_sc_records, sc_program_workload
from reasonserve.sim.programs import ProgramPlan, ProgramRuntime, SCProgram, WithPrograms
from reasonserve.sim.result import SimResult
from reasonserve.sim.simulator import simulate
from reasonserve.sim.traces import load_lengths
from reasonserve.sim.workload import LengthTable, SimRequest, poisson_workload

__all__ = [
    "HARDWARE",
    "MODELS",
    "HardwareSpec",
    "LengthTable",
    "ModelSpec",
    "ProfileCostModel",
    "ProfileRow",
    "ProfileTable",
    "ProgramPlan",
    "ProgramRuntime",
    "RooflineCostModel",
    "SCProgram",
    "SimConfig",
    "SimRequest",
    "SimResult",
    "WithPrograms",
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
