"""N simulated serving instances under a router: the discrete-event loop
(:func:`~reasonserve.sim.cluster.simulator.simulate`), each instance's continuous batching
under a policy (:class:`~reasonserve.sim.cluster.instance.SimInstance`, the host contract of
:mod:`reasonserve.core.hosting`), the decision-free stretches run as one event
(:mod:`~reasonserve.sim.cluster.quiet`) and KV migration between instances."""

from reasonserve.sim.cluster.config import SimConfig
from reasonserve.sim.cluster.instance import SimInstance
from reasonserve.sim.cluster.migration import MigrationRecord
from reasonserve.sim.cluster.result import SimResult
from reasonserve.sim.cluster.sequence import SimSequence
from reasonserve.sim.cluster.simulator import ClusterLoop, simulate

__all__ = [
    "ClusterLoop",
    "MigrationRecord",
    "SimConfig",
    "SimInstance",
    "SimResult",
    "SimSequence",
    "simulate",
]
