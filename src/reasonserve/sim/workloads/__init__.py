"""What the simulator serves: requests (:class:`~reasonserve.sim.workloads.requests.SimRequest`),
Poisson workloads over length tables from the recordings, and workloads replayed from
recorded serving traces (arrival times, ServeGen's rate windows)."""

from reasonserve.sim.workloads.replayed import TRACE_SOURCES, load_trace, trace_workload
from reasonserve.sim.workloads.requests import LengthTable, SimRequest, poisson_workload
from reasonserve.sim.workloads.servegen import servegen_arrival_times
from reasonserve.sim.workloads.traces import load_lengths

__all__ = [
    "TRACE_SOURCES",
    "LengthTable",
    "SimRequest",
    "load_lengths",
    "load_trace",
    "poisson_workload",
    "servegen_arrival_times",
    "trace_workload",
]
