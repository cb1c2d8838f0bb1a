"""Reasoning-program workloads for the simulator (Dynasor's online protocol): self-consistency
programs from the recorded samples (:mod:`~reasonserve.sim.programs.workload`) and
program-level metrics (:mod:`~reasonserve.sim.programs.metrics`). The programs themselves
are :mod:`reasonserve.programs.sc` on a ``SimClient`` on the cluster
(:mod:`reasonserve.programs.recorded`): the simulator holds no copy of them."""

from reasonserve.sim.programs.workload import (
    SCProgram,
    load_sc_records,
    load_search_records,
    sc_program_workload,
)

__all__ = ["SCProgram", "load_sc_records", "load_search_records", "sc_program_workload"]
