"""Reasoning programs in the simulator (Dynasor's online protocol): self-consistency programs
replayed from recorded samples (:mod:`~reasonserve.sim.programs.runtime`), their workloads
from the recordings (:mod:`~reasonserve.sim.programs.workload`) and program-level metrics
(:mod:`~reasonserve.sim.programs.metrics`)."""

from reasonserve.sim.programs.runtime import Allocation, ProgramPlan, ProgramRuntime, SCProgram, WithPrograms
from reasonserve.sim.programs.workload import load_sc_records, load_search_records, sc_program_workload

__all__ = [
    "Allocation",
    "ProgramPlan",
    "ProgramRuntime",
    "SCProgram",
    "WithPrograms",
    "load_sc_records",
    "load_search_records",
    "sc_program_workload",
]
